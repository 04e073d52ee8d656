package main

import (
	"github.com/batonfn/baton"
	"github.com/batonfn/baton/work/inventory"
	"github.com/batonfn/baton/work/synthetic"
)

// Job names selectable with BATON_JOB or a manual run's "job".
const (
	jobSynthetic = "synthetic"
	jobInventory = "inventory"
)

// registerJobs registers every built-in job, by name. Baton configures them from its own
// settings at start-up: inventory reads the account of BATON_INVENTORY_STORAGE (never the app's
// own storage), synthetic runs are capped by BATON_SYNTHETIC_MAX_*. A failed registration makes
// Main refuse to start, listing it.
func registerJobs(app *baton.App) {
	_ = app.Register(jobSynthetic, synthetic.New())
	_ = app.Register(jobInventory, inventory.New(nil, inventory.Options{}))
}
