package app_test

import (
	"github.com/batonfn/baton/internal/app"
	"github.com/batonfn/baton/internal/enginejob"
	"github.com/batonfn/baton/work"
	"github.com/batonfn/baton/work/inventory"
	"github.com/batonfn/baton/work/synthetic"
)

// The built-in jobs as the reference app registers them, for the package's internal tests.
func init() {
	app.SetBuiltins(func() *work.Registry {
		r := work.NewRegistry()
		r.Register(synthetic.Name, enginejob.Of(synthetic.New()))
		r.Register(inventory.Name, enginejob.Of(inventory.New(nil, inventory.Options{})))
		return r
	})
}
