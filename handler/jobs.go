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

// registerJobs registers every built-in job, by name. The inventory job reads the app's own
// storage account, which Baton hands it at start-up. A failed registration makes Main refuse
// to start, listing it.
func registerJobs(app *baton.App) {
	_ = app.Register(jobSynthetic, synthetic.New())
	_ = app.Register(jobInventory, inventory.New(nil))
}
