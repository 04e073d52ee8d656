// Command bulkhandler is the app BenchmarkScale's "cap=1024" runs start: the reference app
// (./handler) with its synthetic job registered as an app whose job has many short partitions
// would register it, with bundles of up to baton.MaxBundle partitions (1,024) instead of the
// default 256.
package main

import (
	"github.com/batonfn/baton"
	"github.com/batonfn/baton/work/synthetic"
)

func main() {
	app := baton.New()
	app.Register(synthetic.Name, synthetic.New(), baton.WithMaxBundle(baton.MaxBundle))
	app.Main()
}
