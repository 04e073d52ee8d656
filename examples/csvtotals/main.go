// Command csvtotals is a Baton app: an Azure Functions custom handler whose csvtotals job totals
// a column of the CSV blobs in a container per key, exactly once per occurrence across the
// app's instances.
package main

import (
	"os"

	"github.com/batonfn/baton"
)

func main() {
	app := baton.New()
	app.Register("csvtotals", csvTotalsJob(newBlobSource(os.Getenv)),
		baton.WithDefaultParams(`{"container":"sales","key":"region","column":"units"}`))
	app.Main() // reads the BATON_* settings, serves the Functions host, exits with a clear message on error
}
