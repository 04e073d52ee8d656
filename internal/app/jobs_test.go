package app

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/work"
)

// builtinJobs registers the built-in jobs as the reference app does, without a storage client
// (validation needs none).
func builtinJobs() *work.Registry { return builtins() }

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
		{inventoryName, "", []string{config.SettingJobParams + " is not set", config.SettingJob + "=inventory", "JSON object"}},
		{inventoryName, "{}", []string{config.SettingJobParams, config.SettingJob + "=inventory", "container"}},
		{syntheticName, `{"partitions":`, []string{config.SettingJobParams, `{\"partitions\":`}},
		{syntheticName, `{"partitions":0}`, []string{config.SettingJobParams, "partitions 0"}},
		{syntheticName, `[1]`, []string{config.SettingJobParams, "JSON object"}},
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

// runNowFunc records the runs now a guard asks for.
type runNowFunc func(ctx context.Context, schedule, key string) (coordinator.Outcome, error)

func (f runNowFunc) RunNow(ctx context.Context, schedule, key string) (coordinator.Outcome, error) {
	return f(ctx, schedule, key)
}

// A manual run without a job is a run now of the settings' schedule: refused as a bad request
// naming the setting while its job is misconfigured, and naming the way out when the app
// declares no such schedule; a run that names its own job is an ad-hoc run and goes through.
func TestDefaultJobGuard(t *testing.T) {
	calls, nows := 0, 0
	next := starterFunc(func(context.Context, coordinator.ManualRequest) (coordinator.Outcome, error) {
		calls++
		return coordinator.Outcome{Status: coordinator.StatusStarted}, nil
	})
	var gotSchedule, gotKey string
	now := runNowFunc(func(_ context.Context, schedule, key string) (coordinator.Outcome, error) {
		nows++
		gotSchedule, gotKey = schedule, key
		return coordinator.Outcome{Status: coordinator.StatusStarted}, nil
	})
	jobErr := errors.New(config.SettingJobParams + ` is not valid`)
	g := manualGuard{Starter: next, scheduler: now, jobErr: jobErr, hasDefault: true, allowed: []string{syntheticName}}
	_, err := g.StartManual(context.Background(), coordinator.ManualRequest{})
	if !errors.Is(err, coordinator.ErrBadRequest) || !strings.Contains(err.Error(), config.SettingJobParams) || calls+nows != 0 {
		t.Errorf("default job: %v (calls %d, %d), want ErrBadRequest naming %s", err, calls, nows, config.SettingJobParams)
	}
	if _, err := g.StartManual(context.Background(), coordinator.ManualRequest{Job: syntheticName}); err != nil || calls != 1 {
		t.Errorf("explicit job: %v (calls %d)", err, calls)
	}
	ok := manualGuard{Starter: next, scheduler: now, hasDefault: true}
	if _, err := ok.StartManual(context.Background(), coordinator.ManualRequest{IdempotencyKey: "k"}); err != nil || nows != 1 ||
		gotSchedule != coordinator.LegacySchedule || gotKey != "k" {
		t.Errorf("valid default job: %v (runs now %d of %q with key %q), want a run now of %q", err, nows, gotSchedule, gotKey, coordinator.LegacySchedule)
	}
	none := manualGuard{Starter: next, scheduler: now}
	if _, err := none.StartManual(context.Background(), coordinator.ManualRequest{}); !errors.Is(err, coordinator.ErrBadRequest) ||
		!strings.Contains(err.Error(), config.SettingSchedule) || !strings.Contains(err.Error(), "/api/schedules/") {
		t.Errorf("no settings' schedule: %v, want ErrBadRequest saying how to start a run", err)
	}
}

// The timer's job in an app without the default job: BATON_JOB when set, else the only
// registered job; its default params when BATON_JOB_PARAMS is unset.
func TestResolveTimerJob(t *testing.T) {
	one := work.NewRegistry()
	one.Register("export", builtin(syntheticName))
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
// params keeps its own.
func TestDefaultJobGuard_DefaultParams(t *testing.T) {
	var got []coordinator.ManualRequest
	next := starterFunc(func(_ context.Context, req coordinator.ManualRequest) (coordinator.Outcome, error) {
		got = append(got, req)
		return coordinator.Outcome{}, nil
	})
	g := manualGuard{Starter: next, allowAll: true, defaults: map[string]json.RawMessage{"export": json.RawMessage(`{"a":1}`)}}
	for _, req := range []coordinator.ManualRequest{{Job: "export"}, {Job: "export", Params: json.RawMessage(`{"a":2}`)}} {
		if _, err := g.StartManual(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{`{"a":1}`, `{"a":2}`}
	for i, w := range want {
		if string(got[i].Params) != w {
			t.Errorf("request %d: params %s, want %s", i, got[i].Params, w)
		}
	}
}

// localConfig is the configuration of a local app on Azurite, with the defaults.
func localConfig(t *testing.T) config.Config {
	t.Helper()
	env := map[string]string{config.SettingHostStorage: "UseDevelopmentStorage=true", config.SettingTransport: "queue",
		config.SettingSchedule: "0 */5 * * * *", config.SettingHeartbeat: "0 * * * * *", config.SettingAppRoot: "/nonexistent-app-root"}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// BATON_MANUAL_JOBS decides the jobs a manual run may name: unset or empty, only the jobs of
// the app's schedules (the settings' tick included); * every registered job; a list, those
// jobs and the schedules'. A run now without a job is the settings' schedule's, whatever the
// list. Every refusal is a 400 naming the setting, with nothing started.
func TestManualGuard_AllowList(t *testing.T) {
	jobs := work.NewRegistry()
	for _, name := range []string{syntheticName, inventoryName, "report", "export"} {
		jobs.Register(name, builtin(syntheticName))
	}
	scheduled := []coordinator.Schedule{{Name: "nightly", Job: "report"}, {Name: coordinator.LegacySchedule, Job: syntheticName}}
	cases := []struct {
		name      string
		setting   string
		schedules []coordinator.Schedule
		allowed   []string // of synthetic, inventory, report, export
	}{
		{"unset: the schedules' jobs", "", scheduled, []string{syntheticName, "report"}},
		{"unset, no schedule: none", "", nil, nil},
		{"unset, no settings' schedule", "", scheduled[:1], []string{"report"}},
		{"*: every job", "*", nil, []string{syntheticName, inventoryName, "report", "export"}},
		{"a list: it and the schedules' jobs", "export", scheduled, []string{syntheticName, "report", "export"}},
		{"a list, no schedule", " export , report", nil, []string{"report", "export"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := map[string]string{config.SettingHostStorage: "UseDevelopmentStorage=true", config.SettingTransport: "queue",
				config.SettingHeartbeat: "0 * * * * *", config.SettingAppRoot: "/nonexistent-app-root", config.SettingManualJobs: c.setting}
			cfg, err := config.Load(func(k string) string { return env[k] })
			if err != nil {
				t.Fatal(err)
			}
			allowed, all, err := manualJobs(cfg, jobs, c.schedules)
			if err != nil {
				t.Fatal(err)
			}
			calls, nows := 0, 0
			next := starterFunc(func(context.Context, coordinator.ManualRequest) (coordinator.Outcome, error) {
				calls++
				return coordinator.Outcome{Status: coordinator.StatusStarted}, nil
			})
			now := runNowFunc(func(context.Context, string, string) (coordinator.Outcome, error) {
				nows++
				return coordinator.Outcome{Status: coordinator.StatusStarted}, nil
			})
			g := manualGuard{Starter: next, scheduler: now, hasDefault: true, allowed: allowed, allowAll: all}
			for _, job := range jobs.Names() {
				before := calls
				_, err := g.StartManual(context.Background(), coordinator.ManualRequest{Job: job})
				switch ok := slices.Contains(c.allowed, job); {
				case ok && (err != nil || calls != before+1):
					t.Errorf("job %q: %v, want it started", job, err)
				case !ok && (!errors.Is(err, coordinator.ErrBadRequest) || !strings.Contains(err.Error(), config.SettingManualJobs) ||
					!strings.Contains(err.Error(), config.AllJobs) || calls != before):
					t.Errorf("job %q: %v, want ErrBadRequest naming %s and no start", job, err, config.SettingManualJobs)
				}
			}
			if _, err := g.StartManual(context.Background(), coordinator.ManualRequest{}); err != nil || nows != 1 {
				t.Errorf("run now of the settings' schedule: %v (%d runs now), want it started", err, nows)
			}
		})
	}
}

// A name BATON_MANUAL_JOBS lists that the app does not register is a settings error naming the
// setting and the name, at start-up (newApp), not a job that silently never starts.
func TestManualJobs_UnknownName(t *testing.T) {
	jobs := builtinJobs()
	cfg := localConfig(t)
	cfg.ManualJobs = []string{syntheticName, "invntory"}
	_, _, err := manualJobs(cfg, jobs, nil)
	for _, want := range []string{config.SettingManualJobs, `"invntory"`, inventoryName, `"*"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v, want an error saying %s", err, want)
		}
	}
	if strings.Contains(fmt.Sprint(err), `"synthetic" `) {
		t.Errorf("%v names synthetic, which is registered", err)
	}
	env := map[string]string{config.SettingHostStorage: "UseDevelopmentStorage=true", config.SettingTransport: "queue",
		config.SettingHeartbeat: "0 * * * * *", config.SettingSchedule: "0 */5 * * * *", config.SettingAppRoot: "/nonexistent-app-root",
		config.SettingManualJobs: "synthetic,invntory"}
	cfg, err = config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	_, err = newApp(cfg, slog.New(slog.DiscardHandler), Options{Jobs: jobs, Getenv: func(k string) string { return env[k] }})
	if !errors.Is(err, ErrSettings) || !strings.Contains(err.Error(), config.SettingManualJobs) || !strings.Contains(err.Error(), `"invntory"`) {
		t.Errorf("newApp: %v, want ErrSettings naming %s and the name", err, config.SettingManualJobs)
	}
}

// Baton configures the built-in jobs an app registered from its settings: inventory never reads
// Baton's own containers or the host's, and with no connection of its own (as in Azure by
// default) reads nothing; synthetic keeps to the configured caps.
func TestConfigureBuiltins_Refusals(t *testing.T) {
	local := localConfig(t)
	capped := local
	capped.SyntheticMax, capped.SyntheticWorkMs, capped.SyntheticPayloadBytes, capped.RunTimeout = 100, 1000, 100*1000, time.Hour
	failUntil := func(d time.Duration) string { return time.Now().Add(d).UTC().Format(time.RFC3339) }
	azure := local
	azure.Inventory = nil
	cases := []struct {
		name   string
		cfg    config.Config
		job    string
		params string
		want   string // "" : accepted
	}{
		{"a user container", local, inventoryName, `{"container":"data"}`, ""},
		{"the runs container", local, inventoryName, `{"container":"runs"}`, "this app's own"},
		{"the leases container", local, inventoryName, `{"container":"leases"}`, "this app's own"},
		{"the function keys", local, inventoryName, `{"container":"azure-webjobs-secrets"}`, "azure-webjobs-"},
		{"the host's locks", local, inventoryName, `{"container":"azure-webjobs-hosts"}`, "azure-webjobs-"},
		{"the deployment package", local, inventoryName, `{"container":"app-package-baton-1234567"}`, "app-package-"},
		{"no inventory connection", azure, inventoryName, `{"container":"data"}`, config.SettingInventory},
		{"synthetic within its caps", capped, syntheticName, `{"partitions":100,"workMs":1000}`, ""},
		{"synthetic over the partition cap", capped, syntheticName, `{"partitions":101}`, "cap of 100"},
		{"synthetic over the work cap", capped, syntheticName, `{"partitions":1,"workMs":1001}`, "cap of 1000"},
		{"synthetic payload within the cap", capped, syntheticName, `{"partitions":100,"payloadBytes":1000}`, ""},
		{"synthetic payload over the cap", capped, syntheticName, `{"partitions":100,"payloadBytes":1001}`, "cap of 100000 bytes"},
		{"the default payload cap", local, syntheticName, `{"partitions":10000,"payloadBytes":48128}`, "cap of 16777216 bytes"},
		{"failUntil within the run timeout", capped, syntheticName, `{"partitions":1,"failUntil":"` + failUntil(50*time.Minute) + `"}`, ""},
		{"failUntil past the run timeout", capped, syntheticName, `{"partitions":1,"failUntil":"` + failUntil(2*time.Hour) + `"}`, "cap of 1h0m0s"},
		{"failAlways longer than the run", capped, syntheticName, `{"partitions":2,"failAlways":[0,1,1]}`, "more than the 2 partitions"},
		{"permanent out of the run", capped, syntheticName, `{"partitions":2,"permanent":[2]}`, "permanent index 2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			jobs := builtinJobs()
			configureBuiltins(jobs, c.cfg, nil)
			err := jobs.ValidateParams(c.job, json.RawMessage(c.params))
			if c.want == "" && err != nil {
				t.Errorf("%s %s: %v, want accepted", c.job, c.params, err)
			}
			if c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Errorf("%s %s: %v, want an error saying %q", c.job, c.params, err, c.want)
			}
		})
	}
}
