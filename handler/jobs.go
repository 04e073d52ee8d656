package main

import (
	"encoding/json"
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/batonfn/baton/config"
	"github.com/batonfn/baton/work"
	"github.com/batonfn/baton/work/inventory"
	"github.com/batonfn/baton/work/synthetic"
)

// Job names selectable with BATON_JOB or a manual run's "job".
const (
	jobSynthetic = "synthetic"
	jobInventory = "inventory"
)

// registerJobs builds the job registry: every built-in job, by name.
func registerJobs(blobs *azblob.Client) *work.Registry {
	r := work.NewRegistry()
	r.Register(jobSynthetic, synthetic.New())
	r.Register(jobInventory, inventory.New(blobs))
	return r
}

// jobError checks the timer job (BATON_JOB, BATON_JOB_PARAMS) with the same validation a run
// gets, and names the setting to fix. nil means the job can run. A bad job does not stop the
// handler: the coordinator records each occurrence as a failed run with this error as reason,
// and a manual run of the default job is refused with it.
func jobError(jobs *work.Registry, job, params string) error {
	if _, err := jobs.Lookup(job); err != nil {
		return fmt.Errorf("%s=%q is not a job: %w", config.SettingJob, job, err)
	}
	var raw json.RawMessage
	if params != "" {
		raw = json.RawMessage(params)
	}
	if err := jobs.ValidateParams(job, raw); err != nil {
		if params == "" {
			return fmt.Errorf("%s is not set, but %s=%s needs params (a JSON object): %w", config.SettingJobParams, config.SettingJob, job, err)
		}
		shown := params
		if len(shown) > 200 {
			shown = shown[:200] + "..."
		}
		return fmt.Errorf("%s=%q is not valid for %s=%s: %w", config.SettingJobParams, shown, config.SettingJob, job, err)
	}
	return nil
}
