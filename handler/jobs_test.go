package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/batonfn/baton/config"
	"github.com/batonfn/baton/coordinator"
)

// jobError names the setting to fix and what is wrong; the defaults are valid.
func TestJobError_NamesTheSetting(t *testing.T) {
	jobs := registerJobs(localConfig(t), nil) // validation needs no storage client
	if err := jobError(jobs, config.DefaultJob, config.DefaultJobParams); err != nil {
		t.Fatalf("the default job and params: %v", err)
	}
	for _, c := range []struct {
		job, params string
		want        []string
	}{
		{"invntory", "", []string{config.SettingJob, `"invntory"`, "inventory", "synthetic"}},
		{jobInventory, "", []string{config.SettingJobParams + " is not set", config.SettingJob + "=inventory", "JSON object"}},
		{jobInventory, "{}", []string{config.SettingJobParams, config.SettingJob + "=inventory", "container"}},
		{jobSynthetic, `{"partitions":`, []string{config.SettingJobParams, `{\"partitions\":`}},
		{jobSynthetic, `{"partitions":0}`, []string{config.SettingJobParams, "partitions 0"}},
		{jobSynthetic, `[1]`, []string{config.SettingJobParams, "JSON object"}},
	} {
		err := jobError(jobs, c.job, c.params)
		if err == nil {
			t.Errorf("%s %s: no error", c.job, c.params)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s %s: %q lacks %q", c.job, c.params, err, w)
			}
		}
	}
}

type starterFunc func(context.Context, coordinator.ManualRequest) (coordinator.Outcome, error)

func (f starterFunc) StartManual(ctx context.Context, req coordinator.ManualRequest) (coordinator.Outcome, error) {
	return f(ctx, req)
}

// A manual run of the default job is refused as a bad request naming the setting while the job
// is misconfigured; a run that names its own job goes through.
func TestManualGuard_DefaultJob(t *testing.T) {
	calls := 0
	next := starterFunc(func(context.Context, coordinator.ManualRequest) (coordinator.Outcome, error) {
		calls++
		return coordinator.Outcome{Status: coordinator.StatusStarted}, nil
	})
	jobErr := errors.New(config.SettingJobParams + ` is not valid`)
	g := manualGuard{Starter: next, jobErr: jobErr}
	_, err := g.StartManual(context.Background(), coordinator.ManualRequest{})
	if !errors.Is(err, coordinator.ErrBadRequest) || !strings.Contains(err.Error(), config.SettingJobParams) || calls != 0 {
		t.Errorf("default job: %v (calls %d), want ErrBadRequest naming %s", err, calls, config.SettingJobParams)
	}
	if _, err := g.StartManual(context.Background(), coordinator.ManualRequest{Job: jobSynthetic}); err != nil || calls != 1 {
		t.Errorf("explicit job: %v (calls %d)", err, calls)
	}
	ok := manualGuard{Starter: next}
	if _, err := ok.StartManual(context.Background(), coordinator.ManualRequest{}); err != nil || calls != 2 {
		t.Errorf("valid default job: %v (calls %d)", err, calls)
	}
}

// localConfig is the configuration of a local app on Azurite, with the defaults.
func localConfig(t *testing.T) config.Config {
	t.Helper()
	env := map[string]string{config.SettingHostStorage: "UseDevelopmentStorage=true", config.SettingTransport: "queue",
		config.SettingSchedule: "0 */5 * * * *", config.SettingAppRoot: "/nonexistent-app-root"}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// BATON_MANUAL_JOBS limits the jobs a manual run may name; the timer job always passes, by
// name or by default.
func TestManualGuard_AllowList(t *testing.T) {
	calls := 0
	next := starterFunc(func(context.Context, coordinator.ManualRequest) (coordinator.Outcome, error) {
		calls++
		return coordinator.Outcome{Status: coordinator.StatusStarted}, nil
	})
	g := manualGuard{Starter: next, timerJob: jobSynthetic, allowed: []string{"report"}}
	for _, c := range []struct {
		job string
		ok  bool
	}{{"", true}, {jobSynthetic, true}, {"report", true}, {jobInventory, false}} {
		before := calls
		_, err := g.StartManual(context.Background(), coordinator.ManualRequest{Job: c.job})
		switch {
		case c.ok && (err != nil || calls != before+1):
			t.Errorf("job %q: %v, want it started", c.job, err)
		case !c.ok && (!errors.Is(err, coordinator.ErrBadRequest) || !strings.Contains(err.Error(), config.SettingManualJobs) || calls != before):
			t.Errorf("job %q: %v, want ErrBadRequest naming %s and no start", c.job, err, config.SettingManualJobs)
		}
	}
	all := manualGuard{Starter: next, timerJob: jobSynthetic}
	if _, err := all.StartManual(context.Background(), coordinator.ManualRequest{Job: jobInventory}); err != nil {
		t.Errorf("no allow-list: %v, want every job allowed", err)
	}
}

// The inventory job never reads Baton's own containers or the host's, and in Azure (no
// connection of its own) reads nothing; synthetic keeps to the configured caps.
func TestRegisterJobs_Refusals(t *testing.T) {
	local := localConfig(t)
	capped := local
	capped.SyntheticMax, capped.SyntheticWorkMs = 100, 1000
	azure := local
	azure.Inventory = nil
	cases := []struct {
		name   string
		cfg    config.Config
		job    string
		params string
		want   string // "" : accepted
	}{
		{"a user container", local, jobInventory, `{"container":"data"}`, ""},
		{"the runs container", local, jobInventory, `{"container":"runs"}`, "this app's own"},
		{"the leases container", local, jobInventory, `{"container":"leases"}`, "this app's own"},
		{"the function keys", local, jobInventory, `{"container":"azure-webjobs-secrets"}`, "azure-webjobs-"},
		{"the host's locks", local, jobInventory, `{"container":"azure-webjobs-hosts"}`, "azure-webjobs-"},
		{"the deployment package", local, jobInventory, `{"container":"app-package-baton-1234567"}`, "app-package-"},
		{"no inventory connection", azure, jobInventory, `{"container":"data"}`, config.SettingInventory},
		{"synthetic within its caps", capped, jobSynthetic, `{"partitions":100,"workMs":1000}`, ""},
		{"synthetic over the partition cap", capped, jobSynthetic, `{"partitions":101}`, "cap of 100"},
		{"synthetic over the work cap", capped, jobSynthetic, `{"partitions":1,"workMs":1001}`, "cap of 1000"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := registerJobs(c.cfg, nil).ValidateParams(c.job, json.RawMessage(c.params))
			if c.want == "" && err != nil {
				t.Errorf("%s %s: %v, want accepted", c.job, c.params, err)
			}
			if c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Errorf("%s %s: %v, want an error saying %q", c.job, c.params, err, c.want)
			}
		})
	}
}
