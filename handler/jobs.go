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

// registerJobs builds the job registry: every built-in job, by name, with cfg's caps on
// synthetic. inventory reads through inv, the account of cfg.Inventory (with none configured it
// refuses every run, naming the setting), and never this app's leases and runs containers.
func registerJobs(cfg config.Config, inv *azblob.Client) *work.Registry {
	r := work.NewRegistry()
	r.Register(jobSynthetic, synthetic.NewCapped(synthetic.Caps{MaxPartitions: cfg.SyntheticMax, MaxWorkMs: cfg.SyntheticWorkMs}))
	opts := inventory.Options{Reserved: []string{cfg.LeaseContainer, cfg.RunsContainer}}
	if cfg.Inventory == nil {
		opts.Unavailable = fmt.Errorf("inventory has no storage to read: set %s to the name of a storage connection for the account to inventory "+
			"(deployed with azd: azd env set AZURE_INVENTORY_STORAGE_ACCOUNT_ID)", config.SettingInventory)
	}
	r.Register(jobInventory, inventory.New(inv, opts))
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
