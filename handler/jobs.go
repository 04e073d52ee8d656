package main

import (
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/batonfn/baton/work"
	"github.com/batonfn/baton/work/inventory"
	"github.com/batonfn/baton/work/synthetic"
)

// Job names selectable with BATON_JOB or a manual run's "job".
const (
	JobSynthetic = "synthetic"
	JobInventory = "inventory"
)

// registerJobs builds the job registry: every built-in job, by name.
func registerJobs(blobs *azblob.Client) *work.Registry {
	r := work.NewRegistry()
	r.Register(JobSynthetic, synthetic.New())
	r.Register(JobInventory, inventory.New(blobs))
	return r
}
