package baton

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/election/electiontest"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/tools/azurite"
	"github.com/batonfn/baton/work"
)

func TestMain(m *testing.M) { os.Exit(azurite.Main(m)) }

// rawJob is the smallest raw Job: one partition, output echoes the payload.
type rawJob struct{}

func (rawJob) Plan(ctx context.Context, params json.RawMessage, cursor string, emit func(json.RawMessage, string) error) error {
	if cursor != "" {
		return nil
	}
	return emit(json.RawMessage(`{"n":1}`), "1")
}

func (rawJob) Process(ctx context.Context, p Partition) (json.RawMessage, error) {
	return p.Payload, nil
}

func (rawJob) Aggregate(ctx context.Context, run RunInfo, results iter.Seq2[Result, error]) (json.RawMessage, error) {
	return json.RawMessage(`{}`), nil
}

// strictJob accepts only params {"limit": n} with n > 0.
type strictJob struct{ rawJob }

func (strictJob) ValidateParams(params json.RawMessage) error {
	var p struct{ Limit int }
	if err := json.Unmarshal(params, &p); err != nil || p.Limit <= 0 {
		return errors.New("limit must be a positive number")
	}
	return nil
}

// Every registration mistake is a *RegistrationError naming the job and the field, with its
// sentinel; the app remembers each one.
func TestRegister_MistakesAreTypedErrors(t *testing.T) {
	app := New()
	if err := registerErr(app, "export", rawJob{}); err != nil {
		t.Fatalf("valid registration: %v", err)
	}
	cases := []struct {
		name     string
		job      Job
		opts     []JobOption
		field    string
		sentinel error
	}{
		{"", rawJob{}, nil, "name", ErrInvalidName},
		{"Export", rawJob{}, nil, "name", ErrInvalidName},
		{"nightly export", rawJob{}, nil, "name", ErrInvalidName},
		{strings.Repeat("a", 64), rawJob{}, nil, "name", ErrInvalidName},
		{"export", rawJob{}, nil, "name", ErrDuplicateJob},
		{"nothing", nil, nil, "job", ErrNilJob},
		{"nilopt", rawJob{}, []JobOption{nil}, "option", ErrNilJob},
		{"array", rawJob{}, []JobOption{WithDefaultParams(`[1]`)}, "params", ErrInvalidParams},
		{"unencodable", rawJob{}, []JobOption{WithDefaultParams(func() {})}, "params", ErrInvalidParams},
		{"strict", strictJob{}, []JobOption{WithDefaultParams(map[string]int{"limit": 0})}, "params", ErrInvalidParams},
		{"tries", rawJob{}, []JobOption{WithRetry(RetryPolicy{Attempts: 11})}, "retry.Attempts", ErrInvalidRetry},
		{"backoff", rawJob{}, []JobOption{WithRetry(RetryPolicy{Multiplier: 0.5})}, "retry.Multiplier", ErrInvalidRetry},
		{"cap", rawJob{}, []JobOption{WithRetry(RetryPolicy{InitialDelay: time.Minute, MaxDelay: time.Second})}, "retry.MaxDelay", ErrInvalidRetry},
		{"nobundle", rawJob{}, []JobOption{WithMaxBundle(0)}, "bundle", ErrInvalidBundle},
		{"hugebundle", rawJob{}, []JobOption{WithMaxBundle(MaxBundle + 1)}, "bundle", ErrInvalidBundle},
		{"notimeout", rawJob{}, []JobOption{WithPartitionTimeout(0)}, "partitionTimeout", ErrInvalidTimeout},
		{"longtimeout", rawJob{}, []JobOption{WithPartitionTimeout(MaxPartitionTimeout + time.Second)}, "partitionTimeout", ErrInvalidTimeout},
		{"negbudget", rawJob{}, []JobOption{WithFailureBudget(FailureBudget{MaxFailed: -1})}, "failureBudget", ErrInvalidBudget},
		{"pctbudget", rawJob{}, []JobOption{WithFailureBudget(FailureBudget{MaxPercent: 101})}, "failureBudget", ErrInvalidBudget},
		{"shortrun", rawJob{}, []JobOption{WithRunTimeout(MinRunTimeout - time.Second)}, "runTimeout", ErrInvalidTimeout},
		{"longrun", rawJob{}, []JobOption{WithRunTimeout(MaxRunTimeout + time.Second)}, "runTimeout", ErrInvalidTimeout},
	}
	for _, c := range cases {
		err := registerErr(app, c.name, c.job, c.opts...)
		var re *RegistrationError
		if !errors.As(err, &re) {
			t.Errorf("Register(%q): %v, want a *RegistrationError", c.name, err)
			continue
		}
		if re.Job != c.name || re.Field != c.field || !errors.Is(err, c.sentinel) {
			t.Errorf("Register(%q) = %+v, want job %q field %q wrapping %v", c.name, re, c.name, c.field, c.sentinel)
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("%q", c.name)) {
			t.Errorf("Register(%q): message %q does not name the job", c.name, err)
		}
	}
	joined := app.Err()
	for _, c := range cases {
		if !strings.Contains(joined.Error(), fmt.Sprintf("job %q", c.name)) {
			t.Errorf("Err() does not list %q: %v", c.name, joined)
		}
	}
	if err := registerErr(app, "strict", strictJob{}, WithDefaultParams(json.RawMessage(`{"limit":3}`))); err != nil {
		t.Errorf("a refused registration must not reserve its name: %v", err)
	}
}

// A job's retry policy reaches the registry its workers read; a job without one gets the
// defaults.
func TestRegister_WithRetrySetsTheJobsPolicy(t *testing.T) {
	app := New()
	p := RetryPolicy{Attempts: 3, InitialDelay: 2 * time.Second, Multiplier: 3, MaxDelay: time.Minute, Jitter: -1}
	if err := registerErr(app, "flaky", rawJob{}, WithRetry(p)); err != nil {
		t.Fatal(err)
	}
	if err := registerErr(app, "plain", rawJob{}); err != nil {
		t.Fatal(err)
	}
	want := work.RetryPolicy{Attempts: 3, InitialDelay: 2 * time.Second, Multiplier: 3, MaxDelay: time.Minute}
	if got := app.jobs.Retry("flaky"); got != want {
		t.Errorf("flaky's policy = %+v, want %+v", got, want)
	}
	if got := app.jobs.Retry("plain"); got != work.DefaultRetryPolicy() {
		t.Errorf("plain's policy = %+v, want the defaults %+v", got, work.DefaultRetryPolicy())
	}
}

// A job's bundle cap reaches the registry the leader reads; a job without one gets the default.
func TestRegister_WithMaxBundleSetsTheJobsCap(t *testing.T) {
	app := New()
	if err := registerErr(app, "heavy", rawJob{}, WithMaxBundle(1)); err != nil {
		t.Fatal(err)
	}
	if err := registerErr(app, "light", rawJob{}); err != nil {
		t.Fatal(err)
	}
	if got := app.jobs.MaxBundle("heavy"); got != 1 {
		t.Errorf("heavy's cap = %d, want 1", got)
	}
	if got := app.jobs.MaxBundle("light"); got != DefaultMaxBundle {
		t.Errorf("light's cap = %d, want %d", got, DefaultMaxBundle)
	}
}

// A job's partition timeout reaches the registry the worker reads; a job without one has none.
func TestRegister_WithPartitionTimeoutSetsTheJobsBound(t *testing.T) {
	app := New()
	if err := registerErr(app, "bounded", rawJob{}, WithPartitionTimeout(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := registerErr(app, "free", rawJob{}); err != nil {
		t.Fatal(err)
	}
	if got := app.jobs.PartitionTimeout("bounded"); got != 30*time.Second {
		t.Errorf("bounded's timeout = %s, want 30s", got)
	}
	if got := app.jobs.PartitionTimeout("free"); got != 0 {
		t.Errorf("free's timeout = %s, want none", got)
	}
}

// A job's failure budget reaches the registry; a schedule's replaces it for the schedule's runs.
func TestRegister_WithFailureBudget(t *testing.T) {
	app := New()
	h := app.Register("sync", rawJob{}, WithFailureBudget(FailureBudget{MaxFailed: 10}))
	h.Schedule("nightly", "0 0 2 * * *", WithFailureBudget(FailureBudget{MaxPercent: 5}))
	h.Schedule("hourly", "0 0 * * * *")
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
	if b := app.jobs.FailureBudget("sync", nil); b == nil || b.MaxFailed != 10 || b.MaxPercent != 0 {
		t.Errorf("the job's budget = %v, want at most 10 failed", b)
	}
	var nightly, hourly *ledger.Budget
	for _, s := range app.schedules {
		switch s.Name {
		case "nightly":
			nightly = s.Budget
		case "hourly":
			hourly = s.Budget
		}
	}
	if nightly == nil || nightly.MaxPercent != 5 || hourly != nil {
		t.Errorf("schedules' budgets: nightly %v, hourly %v; want 5%% and the job's", nightly, hourly)
	}
	if err := scheduleErr(app, "bad", "sync", "0 0 3 * * *", WithFailureBudget(FailureBudget{MaxPercent: -1})); !errors.Is(err, ErrInvalidBudget) {
		t.Errorf("a schedule's bad budget: %v, want ErrInvalidBudget", err)
	}
}

// A job's run timeout reaches the registry the coordinator reads; a job without one keeps the
// app's (0).
func TestRegister_WithRunTimeoutSetsTheJobsRunTimeout(t *testing.T) {
	app := New()
	if err := registerErr(app, "quick", rawJob{}, WithRunTimeout(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := registerErr(app, "plain", rawJob{}); err != nil {
		t.Fatal(err)
	}
	if got := app.jobs.RunTimeout("quick"); got != 10*time.Minute {
		t.Errorf("quick's run timeout = %s, want 10m", got)
	}
	if got := app.jobs.RunTimeout("plain"); got != 0 {
		t.Errorf("plain's run timeout = %s, want 0 (the app's)", got)
	}
}

// Run and Main refuse to start while any registration failed, and Main lists every problem.
func TestMainAndRun_RefuseFailedRegistrations(t *testing.T) {
	app := New(WithSettings(func(string) string { return "" }))
	_ = registerErr(app, "", rawJob{})
	_ = registerErr(app, "b", nil)
	err := app.Run(context.Background())
	var re *RegistrationError
	if !errors.As(err, &re) || !errors.Is(err, ErrNilJob) || !errors.Is(err, ErrInvalidName) {
		t.Fatalf("Run: %v, want both registration errors", err)
	}
	var out, errb bytes.Buffer
	code := app.main([]string{"baton"}, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), `job ""`) || !strings.Contains(errb.String(), `job "b"`) {
		t.Errorf("main: exit %d, stderr %q; want 2 listing both problems", code, errb.String())
	}
}

// Run with invalid settings returns at once with ErrSettings naming the setting.
func TestRun_InvalidSettings(t *testing.T) {
	app := New(WithSettings(func(k string) string {
		if k == config.SettingLeaseDuration {
			return "forever"
		}
		return ""
	}))
	_ = registerErr(app, "export", rawJob{})
	err := app.Run(context.Background())
	if !errors.Is(err, ErrSettings) || !strings.Contains(err.Error(), config.SettingLeaseDuration) {
		t.Errorf("Run: %v, want ErrSettings naming %s", err, config.SettingLeaseDuration)
	}
}

// `validate` checks an app's own jobs and schedules with the settings: with BATON_JOB unset
// the only registered job is the settings' schedule's job, with its default params; the app's
// schedules with BATON_SCHEDULES applied; every problem named.
func TestMain_ValidateUsesTheAppsJobs(t *testing.T) {
	env := map[string]string{config.SettingAppRoot: ".", config.SettingSchedule: "0 0 3 * * *"}
	app := New(WithSettings(func(k string) string { return env[k] }))
	if err := registerErr(app, "export", strictJob{}, WithDefaultParams(`{"limit":5}`)); err != nil {
		t.Fatal(err)
	}
	if err := scheduleErr(app, "weekly", "export", "0 0 9 * * 1", InZone("Europe/Berlin"), WithParams(`{"limit":7}`)); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := app.main([]string{"baton", "validate"}, &out, &errb); code != 0 {
		t.Fatalf("validate: exit %d: %s%s", code, out.String(), errb.String())
	}
	for _, want := range []string{`weekly ("0 0 9 * * 1" Europe/Berlin, job export, params {"limit":7})`,
		`tick ("0 0 3 * * *" UTC, job export, params {"limit":5})`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("validate: %q, want %s", out.String(), want)
		}
	}
	env[config.SettingJobParams] = `{"limit":-1}`
	env[config.SettingSchedules] = `{"weekly":{"timeZone":"Berlin"},"daily":{"paused":true}}`
	out.Reset()
	errb.Reset()
	code := app.main([]string{"baton", "validate"}, &out, &errb)
	for _, want := range []string{"limit must be a positive number", `BATON_SCHEDULES: schedule "weekly": timeZone "Berlin"`,
		`BATON_SCHEDULES names the schedule "daily", which this app does not declare (it declares: tick, weekly)`} {
		if code != 2 || !strings.Contains(errb.String(), want) {
			t.Errorf("validate with bad settings: exit %d: %s; want %s", code, errb.String(), want)
		}
	}
}

// Run serves an app's own job over Azurite: the host's readiness probe is answered, and
// cancelling the context stops it cleanly.
func TestRun_ServesUntilCancelled(t *testing.T) {
	srv := azurite.Shared(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	env := map[string]string{
		config.SettingPort:           strconv.Itoa(port),
		config.SettingHostStorage:    srv.ConnectionString(),
		config.SettingTransport:      string(config.TransportQueue),
		config.SettingAppRoot:        ".",
		config.SettingHeartbeat:      "0 * * * * *",
		config.SettingSchedule:       "0 0 3 * * *",
		config.SettingRunsContainer:  azurite.UniqueName(t, "runs"),
		config.SettingLeaseContainer: azurite.UniqueName(t, "leases"),
		config.SettingWorkQueue:      azurite.UniqueName(t, "work"),
		config.SettingControlQueue:   azurite.UniqueName(t, "control"),
	}
	logs := electiontest.NewLogRecorder()
	app := New(WithSettings(func(k string) string { return env[k] }), WithLogger(slog.New(logs)))
	if err := registerErr(app, "export", rawJob{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()

	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/")
		if err == nil {
			resp.Body.Close()
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Run returned before serving: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the app never became ready: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // readiness poll, as the host does
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after cancel: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return after cancel")
	}
	// The app's own job is the timer's job: BATON_JOB is unset and it is the only one.
	if rec, ok := logs.Find("handler listening"); !ok || rec.Attrs["job"] != "export" {
		t.Errorf("the handler logged listening %v (found %v), want job export", rec.Attrs, ok)
	}
}

// registerErr registers and returns the registration's own error (nil when accepted).
func registerErr(a *App, name string, job Job, opts ...JobOption) error {
	n := len(a.problems)
	a.Register(name, job, opts...)
	if len(a.problems) > n {
		return a.problems[n]
	}
	return nil
}

// scheduleErr declares a schedule of the registered job named job and returns the
// declaration's own error (nil when accepted).
func scheduleErr(a *App, name, job, cron string, opts ...ScheduleOption) error {
	h := &JobHandle{app: a, name: job}
	if j, err := a.jobs.Lookup(job); err == nil {
		h.job, _ = work.Unwrap(j).(Job)
	}
	n := len(a.problems)
	h.Schedule(name, cron, opts...)
	if len(a.problems) > n {
		return a.problems[n]
	}
	return nil
}
