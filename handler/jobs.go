package main

import (
	"github.com/batonfn/baton"
	"github.com/batonfn/baton/work/inventory"
	"github.com/batonfn/baton/work/synthetic"
)

// registerJobs registers every built-in job under its name (selectable with BATON_JOB or a
// manual run's "job"). Baton configures them from its own settings at start-up: inventory reads
// the account of BATON_INVENTORY_STORAGE (never the app's own storage), synthetic runs are
// capped by BATON_SYNTHETIC_MAX_*.
func registerJobs(app *baton.App) {
	app.Register(synthetic.Name, synthetic.New())
	app.Register(inventory.Name, inventory.New(nil, inventory.Options{}))
}
