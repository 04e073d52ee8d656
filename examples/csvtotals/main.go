// Command csvtotals is a Baton app: an Azure Functions custom handler whose csvtotals job totals
// a column of the CSV blobs in a container per key, on its schedule, exactly once per occurrence
// across the app's instances.
package main

import (
	"os"

	"github.com/batonfn/baton"
)

func main() {
	app := baton.New()
	totals := app.Register("csvtotals", csvTotalsJob(newBlobSource(os.Getenv)),
		baton.WithDefaultParams(`{"container":"sales","key":"region","column":"units"}`))
	// The day's totals every morning at 06:00 New York time, whatever the daylight-saving
	// offset; a run still in progress at the next occurrence makes it wait (buffer-one).
	totals.Schedule("morning-totals", "0 0 6 * * *",
		baton.InZone("America/New_York"), baton.WithOverlap(baton.OverlapBufferOne))
	app.Main() // reads the BATON_* settings, serves the Functions host, exits with a clear message on error
}
