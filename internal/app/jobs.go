package app

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/batonfn/baton/config"
	"github.com/batonfn/baton/work"
)

// storageUser is a job that reads the app's storage account (the root package documents it
// as baton.StorageUser).
type storageUser interface {
	UseStorage(client *azblob.Client)
}

// bindStorage hands the app's blob client to every job that asks for it, before any
// invocation.
func bindStorage(jobs *work.Registry, blobs *azblob.Client) {
	for _, name := range jobs.Names() {
		if j, err := jobs.Lookup(name); err == nil {
			if u, ok := j.(storageUser); ok {
				u.UseStorage(blobs)
			}
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
