package app

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/work"
)

// capped is a job that Baton's settings cap (the built-in synthetic job): its partitions, each
// partition's work and the run's total payload (BATON_SYNTHETIC_MAX_PARTITIONS,
// BATON_SYNTHETIC_MAX_WORK_MS, BATON_SYNTHETIC_MAX_PAYLOAD_BYTES), and how far ahead a failure
// window may end (BATON_RUN_TIMEOUT).
type capped interface {
	Configure(maxPartitions, maxWorkMs, maxPayloadBytes int, maxFailFor time.Duration)
}

// inventoried is a job that reads the account of BATON_INVENTORY_STORAGE (the built-in
// inventory job): client is that account (nil when none is set, unavailable then says why),
// reserved the app's own containers, which it must refuse.
type inventoried interface {
	ConfigureStorage(client *azblob.Client, reserved []string, unavailable error)
}

// configureBuiltins applies Baton's settings for its built-in jobs to the instances an app
// registered, before any invocation: the caps on synthetic, and the account inventory reads
// (inv, from BATON_INVENTORY_STORAGE; never the app's own storage) with the app's leases and
// runs containers refused. Without BATON_INVENTORY_STORAGE inventory refuses every run, naming
// the setting.
func configureBuiltins(jobs *work.Registry, cfg config.Config, inv *azblob.Client) {
	for _, name := range jobs.Names() {
		j, err := jobs.Lookup(name)
		if err != nil {
			continue
		}
		switch j := work.Unwrap(j).(type) {
		case capped:
			j.Configure(cfg.SyntheticMax, cfg.SyntheticWorkMs, cfg.SyntheticPayloadBytes, cfg.RunTimeout)
		case inventoried:
			var unavailable error
			if cfg.Inventory == nil {
				unavailable = fmt.Errorf("inventory has no storage to read: set %s to the name of a storage connection for the account to inventory "+
					"(deployed with azd: azd env set AZURE_INVENTORY_STORAGE_ACCOUNT_ID)", config.SettingInventory)
			}
			j.ConfigureStorage(inv, []string{cfg.LeaseContainer, cfg.RunsContainer}, unavailable)
		}
	}
}

// resolveTimerJob settles the timer's job and params: BATON_JOB, or the only registered job
// when BATON_JOB is unset and the default job is not registered; BATON_JOB_PARAMS, or the
// job's default params when it is unset.
func resolveTimerJob(cfg *config.Config, o Options) {
	if o.Getenv(config.SettingJob) == "" {
		if _, err := o.Jobs.Lookup(cfg.Job); err != nil {
			if names := o.Jobs.Names(); len(names) == 1 {
				cfg.Job = names[0]
				cfg.JobParams = strings.TrimSpace(o.Getenv(config.SettingJobParams))
			}
		}
	}
	if cfg.JobParams == "" || cfg.JobParams == "{}" {
		if d, ok := o.DefaultParams[cfg.Job]; ok && len(d) > 0 {
			cfg.JobParams = string(d)
		}
	}
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
