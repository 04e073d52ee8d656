package work_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/enginejob"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/ledgertest"
	"github.com/batonfn/baton/work"
	"github.com/batonfn/baton/work/synthetic"
)

// A report claim whose create took effect but whose response was lost to an outage must not
// block the run for StaleClaim (10 min, far past the run's documented bound): the process
// that made it (the invocation waits the outage out and tries again) recognises its own claim
// and finishes the run. (A claim whose process crashed is taken over once stale.)
func TestTryFinish_ClaimLostToAnOutageDoesNotBlockTheNextTry(t *testing.T) {
	ctx := context.Background()
	const run = "manual-lost-claim"
	fake, w := completeRun(t, run, "ClaimReport", nil)
	if done, err := w.TryFinish(ctx, run); err == nil || done {
		t.Fatalf("first TryFinish = %v, %v; want the outage's error", done, err)
	}
	done, err := w.TryFinish(ctx, run) // the invocation's retry once storage is back
	if err != nil || !done {
		t.Errorf("TryFinish after the outage = %v, %v: the run's own lost claim blocks it until the claim is stale (StaleClaim)", done, err)
	}
	if m, err := fake.ReadManifest(ctx, run); err != nil || m.State != ledger.StateSucceeded {
		t.Errorf("run after the retry: %s, %v; want succeeded", m.State, err)
	}
}

// The manifest update that settles a run may take effect with its answer lost: the retry then
// finds the run final. The aggregation happened once, in the call that wrote the report, and
// that call says so ("run finished", the line operators and the soak's checker count), even
// though the manifest's copy went in on a write whose answer it never saw.
func TestTryFinish_SettleLostToAnOutageStillLogsTheFinish(t *testing.T) {
	ctx := context.Background()
	const run = "manual-lost-settle"
	var logs bytes.Buffer
	fake, w := completeRun(t, run, "UpdateManifest", slog.New(slog.NewJSONHandler(&logs, nil)))
	if _, err := w.TryFinish(ctx, run); err == nil {
		t.Fatal("first TryFinish succeeded; want the lost answer's error")
	}
	if _, err := w.TryFinish(ctx, run); err != nil { // the redelivery
		t.Fatal(err)
	}
	if m, err := fake.ReadManifest(ctx, run); err != nil || m.State != ledger.StateSucceeded {
		t.Fatalf("run: %s, %v; want succeeded", m.State, err)
	}
	if got := strings.Count(logs.String(), `"msg":"run finished"`); got != 1 {
		t.Errorf(`"run finished" logged %d times, want once:\n%s`, got, logs.String())
	}
}

// A renewal of the report claim may take effect with its answer lost. The aggregator reads
// the claim back, finds it still its own and writes on under its current ETag: the final
// report goes in (with the renewal's first ETag it would fail with a conflict, and the run
// would wait for the claim to go stale and a second aggregation).
func TestTryFinish_RenewalLostToAnOutageKeepsTheClaim(t *testing.T) {
	ctx := context.Background()
	const run = "manual-lost-renewal"
	job := &countingJob{Job: enginejob.Of(synthetic.New())}
	fake, w := completeRun(t, run, "WriteReport", nil, func(c *work.WorkerConfig) {
		c.StaleClaim = 30 * time.Millisecond
		c.Jobs = work.NewRegistry()
		c.Jobs.Register(synthetic.Name, job)
	})
	job.beforeAggregate = func(context.Context, int64) error {
		// Hold the aggregation until a renewal after the lost one is in: the claim's ETag has
		// changed twice since it was taken.
		var first time.Time // the lost renewal's (the first WriteReport is the first renewal)
		work.WaitFor(t, "a renewal after the lost one", func() bool {
			rep, _, err := fake.ReadReport(ctx, run)
			if err != nil || rep.Renewed.IsZero() {
				return false
			}
			if first.IsZero() {
				first = rep.Renewed
			}
			return !rep.Renewed.Equal(first)
		})
		return nil
	}
	if done, err := w.TryFinish(ctx, run); err != nil || !done {
		t.Fatalf("TryFinish = %v, %v; want true, nil", done, err)
	}
	if m, err := fake.ReadManifest(ctx, run); err != nil || m.State != ledger.StateSucceeded {
		t.Errorf("run: %s, %v; want succeeded", m.State, err)
	}
}

// The final report's write may take effect with its answer lost. The process that wrote it
// finds it on its retry and says the run finished; another process that settles the run from
// that report says it settled it. Either line carries the report's state and counts (an
// operator's alert reads the state), and "run finished" is never logged twice.
func TestTryFinish_AReportLostToAnOutageIsLoggedWithItsState(t *testing.T) {
	for _, tc := range []struct {
		name  string
		other bool // the retry is another process's
		want  string
	}{
		{"its writer retries", false, "run finished"},
		{"another process settles", true, "report was written but the manifest was not final; settled it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			const run = "manual-lost-report"
			var logs bytes.Buffer
			logger := slog.New(slog.NewJSONHandler(&logs, nil))
			fake, w := completeRun(t, run, "WriteReport", logger)
			if _, err := w.TryFinish(ctx, run); err == nil {
				t.Fatal("first TryFinish succeeded; want the lost answer's error")
			}
			if rep, _, err := fake.ReadReport(ctx, run); err != nil || rep.State != ledger.StateSucceeded {
				t.Fatalf("report after the lost write: %s, %v; want it written, succeeded", rep.State, err)
			}
			if tc.other {
				jobs := work.NewRegistry()
				jobs.Register(synthetic.Name, enginejob.Of(synthetic.New()))
				var err error
				if w, err = work.NewWorker(work.WorkerConfig{Store: fake, Jobs: jobs, Holder: ledger.Holder{App: "t", Instance: "j", PID: 2},
					MaxDeliveries: 5, Logger: logger}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := w.TryFinish(ctx, run); err != nil { // it settles the manifest
				t.Fatalf("TryFinish after the outage: %v", err)
			}
			if m, err := fake.ReadManifest(ctx, run); err != nil || m.State != ledger.StateSucceeded {
				t.Fatalf("run: %s, %v; want succeeded", m.State, err)
			}
			var lines []map[string]any
			for l := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
				var m map[string]any
				if err := json.Unmarshal([]byte(l), &m); err == nil && (m["msg"] == "run finished" || strings.Contains(fmt.Sprint(m["msg"]), "settled")) {
					lines = append(lines, m)
				}
			}
			if len(lines) != 1 || lines[0]["msg"] != tc.want || lines[0]["state"] != "succeeded" || lines[0]["succeeded"] != 2.0 || lines[0]["run"] != run {
				t.Fatalf("the run's end logged as %v, want one line %q with its state (succeeded) and counts:\n%s", lines, tc.want, logs.String())
			}
		})
	}
}

// The manifest update that settles a run may fail outright after the report went in and the
// run's end was logged. The retry that settles the run from the report says it settled it; it
// does not log "run finished" a second time (an alert on that line would fire twice).
func TestTryFinish_ASettleThatFailedIsNotASecondFinish(t *testing.T) {
	ctx := context.Background()
	const run = "manual-failed-settle"
	var logs bytes.Buffer
	fake, w := completeRun(t, run, "UpdateManifest", slog.New(slog.NewJSONHandler(&logs, nil)), func(c *work.WorkerConfig) {
		c.Store = &ledgertest.Faulty{Store: c.Store.(*ledgertest.Faulty).Store, Decide: ledgertest.FaultOnce(ledgertest.Fail, "UpdateManifest", "")}
	})
	if _, err := w.TryFinish(ctx, run); err == nil {
		t.Fatal("first TryFinish succeeded; want the failed update's error")
	}
	if m, err := fake.ReadManifest(ctx, run); err != nil || m.State.Final() {
		t.Fatalf("run after the failed settle: %s, %v; want it still running", m.State, err)
	}
	if _, err := w.TryFinish(ctx, run); err != nil { // the redelivery
		t.Fatal(err)
	}
	if m, err := fake.ReadManifest(ctx, run); err != nil || m.State != ledger.StateSucceeded {
		t.Fatalf("run: %s, %v; want succeeded", m.State, err)
	}
	out := logs.String()
	if got := strings.Count(out, `"msg":"run finished"`); got != 1 {
		t.Errorf(`"run finished" logged %d times, want once:\n%s`, got, out)
	}
	if !strings.Contains(out, "settled it") {
		t.Errorf("the retry did not say it settled the run:\n%s", out)
	}
}

// completeRun records a planned 2-partition synthetic run with every result and done record
// in, and returns the ledger and a worker whose store loses the answer of the first call to op
// (the call takes effect, then fails as unavailable).
func completeRun(t *testing.T, run, op string, logger *slog.Logger, opts ...func(*work.WorkerConfig)) (*ledgertest.Fake, *work.Worker) {
	t.Helper()
	ctx := context.Background()
	fake := ledgertest.NewFake(ledgertest.Options{})
	store := &ledgertest.Faulty{Store: fake, Decide: ledgertest.FaultOnce(ledgertest.LoseResponse, op, "")}
	const n = 2
	params, _ := json.Marshal(synthetic.Params{Partitions: n})
	if err := fake.CreateManifest(ctx, &ledger.Manifest{RunID: run, Trigger: ledger.TriggerManual, Epoch: 1, Segments: []ledger.Segment{{Epoch: 1}},
		Job: synthetic.Name, Params: params, State: ledger.StateRunning, Partitions: n, PlanDone: true, BatchSize: 250}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := fake.PutResult(ctx, ledger.Result{Run: run, Index: i, Epoch: 1, OK: true, Attempts: 1, Output: fmt.Appendf(nil, `{"i":%d,"v":%d}`, i, i*i)}); err != nil {
			t.Fatal(err)
		}
		if _, err := fake.AppendDone(ctx, run, ledger.DoneBlocks, 1, i); err != nil {
			t.Fatal(err)
		}
	}
	jobs := work.NewRegistry()
	jobs.Register(synthetic.Name, enginejob.Of(synthetic.New()))
	cfg := work.WorkerConfig{Store: store, Jobs: jobs, Holder: ledger.Holder{App: "t", Instance: "i", PID: 1}, MaxDeliveries: 5, Logger: logger}
	for _, o := range opts {
		o(&cfg)
	}
	w, err := work.NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return fake, w
}
