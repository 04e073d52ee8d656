// Command limithandler is the app BenchmarkLimits' limited runs start: the reference app
// (./handler) with its synthetic job under the named limit "bench" (baton.WithLimit), as an app
// whose job calls a rate-limited downstream would register it. The limit's numbers here are a
// placeholder: each run sets them with BATON_LIMITS, e.g. {"bench":{"rate":200,"per":"1s"}}.
package main

import (
	"github.com/batonfn/baton"
	"github.com/batonfn/baton/work/synthetic"
)

// LimitName is the limit the synthetic job runs under.
const LimitName = "bench"

func main() {
	app := baton.New()
	app.Register(synthetic.Name, synthetic.New(), baton.WithLimit(baton.Limit{Name: LimitName, MaxInFlight: 1}))
	app.Main()
}
