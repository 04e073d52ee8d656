package app

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/batonfn/baton/config"
	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/work"
	"github.com/batonfn/baton/work/inventory"
	"github.com/batonfn/baton/work/synthetic"
)

// builtinJobs registers the built-in jobs as the reference app does, without a storage client
// (validation needs none).
func builtinJobs() *work.Registry {
	r := work.NewRegistry()
	r.Register(synthetic.Name, synthetic.New())
	r.Register(inventory.Name, inventory.New(nil))
	return r
}

// jobError names the setting to fix and what is wrong; the defaults are valid.
func TestJobError_NamesTheSetting(t *testing.T) {
	jobs := builtinJobs() // validation needs no storage client
	if err := jobError(jobs, config.DefaultJob, config.DefaultJobParams); err != nil {
		t.Fatalf("the default job and params: %v", err)
	}
	for _, c := range []struct {
		job, params string
		want        []string
	}{
		{"invntory", "", []string{config.SettingJob, `"invntory"`, "inventory", "synthetic"}},
		{inventory.Name, "", []string{config.SettingJobParams + " is not set", config.SettingJob + "=inventory", "JSON object"}},
		{inventory.Name, "{}", []string{config.SettingJobParams, config.SettingJob + "=inventory", "container"}},
		{synthetic.Name, `{"partitions":`, []string{config.SettingJobParams, `{\"partitions\":`}},
		{synthetic.Name, `{"partitions":0}`, []string{config.SettingJobParams, "partitions 0"}},
		{synthetic.Name, `[1]`, []string{config.SettingJobParams, "JSON object"}},
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
func TestDefaultJobGuard(t *testing.T) {
	calls := 0
	next := starterFunc(func(context.Context, coordinator.ManualRequest) (coordinator.Outcome, error) {
		calls++
		return coordinator.Outcome{Status: coordinator.StatusStarted}, nil
	})
	jobErr := errors.New(config.SettingJobParams + ` is not valid`)
	g := defaultJobGuard{Starter: next, jobErr: jobErr}
	_, err := g.StartManual(context.Background(), coordinator.ManualRequest{})
	if !errors.Is(err, coordinator.ErrBadRequest) || !strings.Contains(err.Error(), config.SettingJobParams) || calls != 0 {
		t.Errorf("default job: %v (calls %d), want ErrBadRequest naming %s", err, calls, config.SettingJobParams)
	}
	if _, err := g.StartManual(context.Background(), coordinator.ManualRequest{Job: synthetic.Name}); err != nil || calls != 1 {
		t.Errorf("explicit job: %v (calls %d)", err, calls)
	}
	ok := defaultJobGuard{Starter: next}
	if _, err := ok.StartManual(context.Background(), coordinator.ManualRequest{}); err != nil || calls != 2 {
		t.Errorf("valid default job: %v (calls %d)", err, calls)
	}
}

// The timer's job in an app without the default job: BATON_JOB when set, else the only
// registered job; its default params when BATON_JOB_PARAMS is unset.
func TestResolveTimerJob(t *testing.T) {
	one := work.NewRegistry()
	one.Register("export", synthetic.New())
	defaults := map[string]json.RawMessage{"export": json.RawMessage(`{"partitions":3}`)}
	for _, c := range []struct {
		name             string
		jobs             *work.Registry
		env              map[string]string
		wantJob, wantPar string
	}{
		{"only job, its defaults", one, nil, "export", `{"partitions":3}`},
		{"only job, params {} as Bicep deploys them", one, map[string]string{config.SettingJobParams: `{}`}, "export", `{"partitions":3}`},
		{"only job, params set", one, map[string]string{config.SettingJobParams: `{"partitions":9}`}, "export", `{"partitions":9}`},
		{"BATON_JOB wins", one, map[string]string{config.SettingJob: "other"}, "other", ""},
		{"default job registered", builtinJobs(), nil, config.DefaultJob, config.DefaultJobParams},
	} {
		getenv := func(k string) string { return c.env[k] }
		// As config.Load leaves them: BATON_JOB or the default job, whose params default too.
		cfg := config.Config{Job: cmp.Or(getenv(config.SettingJob), config.DefaultJob), JobParams: getenv(config.SettingJobParams)}
		if cfg.Job == config.DefaultJob && cfg.JobParams == "" {
			cfg.JobParams = config.DefaultJobParams
		}
		resolveTimerJob(&cfg, Options{Jobs: c.jobs, DefaultParams: defaults, Getenv: getenv})
		if cfg.Job != c.wantJob || cfg.JobParams != c.wantPar {
			t.Errorf("%s: job %q params %q, want %q %q", c.name, cfg.Job, cfg.JobParams, c.wantJob, c.wantPar)
		}
	}
}

// A manual run that names a job without params gets the job's default params; one with
// params keeps its own, and one without a job is the timer's business.
func TestDefaultJobGuard_DefaultParams(t *testing.T) {
	var got []coordinator.ManualRequest
	next := starterFunc(func(_ context.Context, req coordinator.ManualRequest) (coordinator.Outcome, error) {
		got = append(got, req)
		return coordinator.Outcome{}, nil
	})
	g := defaultJobGuard{Starter: next, defaults: map[string]json.RawMessage{"export": json.RawMessage(`{"a":1}`)}}
	for _, req := range []coordinator.ManualRequest{{Job: "export"}, {Job: "export", Params: json.RawMessage(`{"a":2}`)}, {}} {
		if _, err := g.StartManual(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{`{"a":1}`, `{"a":2}`, ``}
	for i, w := range want {
		if string(got[i].Params) != w {
			t.Errorf("request %d: params %s, want %s", i, got[i].Params, w)
		}
	}
}

// storageJob records the client it was handed.
type storageJob struct {
	work.Job
	got *azblob.Client
}

func (j *storageJob) UseStorage(c *azblob.Client) { j.got = c }

// Every job that asks for the app's storage gets the client, before any invocation.
func TestBindStorage(t *testing.T) {
	client, err := azblob.NewClientWithNoCredential("http://127.0.0.1:1/devstoreaccount1", nil)
	if err != nil {
		t.Fatal(err)
	}
	jobs := work.NewRegistry()
	a, b := &storageJob{Job: synthetic.New()}, &storageJob{Job: synthetic.New()}
	jobs.Register("a", a)
	jobs.Register("b", b)
	jobs.Register(synthetic.Name, synthetic.New())
	bindStorage(jobs, client)
	if a.got != client || b.got != client {
		t.Errorf("UseStorage got %p and %p, want %p", a.got, b.got, client)
	}
}
