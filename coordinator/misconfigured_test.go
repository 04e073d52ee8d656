package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/election"
	"github.com/batonfn/baton/election/bloblease"
	"github.com/batonfn/baton/ledger"
)

// misconfiguredInstance builds a coordinator whose timer job is "count" with params, and
// jobErr as Config.JobError.
func (e *runEnv) misconfiguredInstance(name string, params string, jobErr error, sender *senderHook) *Coordinator {
	e.t.Helper()
	bl, err := bloblease.NewBlobLock(e.leases, "leader", bloblease.BlobLockOptions{Duration: testBlobLockDuration, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		e.t.Fatal(err)
	}
	id := ledger.Holder{App: "test", Instance: name, PID: 1}
	ld, err := election.NewLeader(election.LeaderConfig{Lock: bl, Identity: id, LeaseDuration: testBlobLockDuration, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		e.t.Fatal(err)
	}
	c, err := New(Config{Leader: ld, Store: e.store, Sender: sender, Jobs: e.jobs, Finisher: e.finisher, Identity: id,
		Job: "count", Params: json.RawMessage(params), JobError: jobErr, Schedule: mustSchedule(e.t, "0 */5 * * * *"),
		RunTimeout: time.Hour, CheckRounds: 2, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		e.t.Fatalf("New refused a misconfigured timer job (it must record it in JobError): %v", err)
	}
	return c
}

// A misconfigured timer job does not stop New; each occurrence becomes one failed run whose
// reason is JobError's text, nothing is planned or enqueued (not even the check), and a second
// instance ticking the same occurrence finds the run already recorded.
func TestTick_MisconfiguredJobRecordsFailedRun(t *testing.T) {
	e := newRunEnv(t)
	jobErr := errors.New("BATON_JOB_PARAMS: job count: params must be a JSON object")
	sends := &senderHook{Sender: e.sender}
	a := e.misconfiguredInstance("a", `{"n":3}`, jobErr, sends)
	b := e.misconfiguredInstance("b", `{"n":3}`, jobErr, sends)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	out, err := a.Tick(ctx, tick)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != StatusMisconfigured || out.State != ledger.StateFailed || out.Run != tickRun || out.Reason != jobErr.Error() {
		t.Fatalf("first tick: %+v, want status %s, state failed, run %s, reason %q", out, StatusMisconfigured, tickRun, jobErr)
	}
	m, err := e.store.ReadManifest(ctx, tickRun)
	if err != nil {
		t.Fatal(err)
	}
	if m.State != ledger.StateFailed || m.Reason != jobErr.Error() || m.Trigger != ledger.TriggerTimer || m.Finished.IsZero() {
		t.Fatalf("manifest: state %s reason %q trigger %s finished %v; want a finished failed timer run with the job error",
			m.State, m.Reason, m.Trigger, m.Finished)
	}
	if e.job.planCalls.Load() != 0 {
		t.Fatalf("the misconfigured job was planned %d times", e.job.planCalls.Load())
	}
	if n := sends.n.Load(); n != 0 {
		t.Fatalf("%d sends for a misconfigured run, want none (no partitions, no check)", n)
	}

	out, err = b.Tick(ctx, tick)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != StatusExisting && out.Status != StatusHeld {
		t.Fatalf("second instance: status %s, want existing (or held)", out.Status)
	}
	if m2, err := e.store.ReadManifest(ctx, tickRun); err != nil || m2.Created != m.Created || m2.Reason != m.Reason {
		t.Fatalf("the recorded run changed on a repeated tick: %+v, %v", m2, err)
	}
}

// New records a timer job that fails validation in JobError instead of refusing; the reason
// carries the validation error.
func TestNew_InvalidTimerJobBecomesJobError(t *testing.T) {
	e := newRunEnv(t)
	c := e.misconfiguredInstance("a", `[1,2]`, nil, &senderHook{Sender: e.sender})
	if c.cfg.JobError == nil || !strings.Contains(c.cfg.JobError.Error(), "JSON object") {
		t.Fatalf("JobError = %v, want the params validation error", c.cfg.JobError)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := c.Tick(ctx, tick)
	if err != nil {
		t.Fatal(err)
	}
	if out.State != ledger.StateFailed || !strings.Contains(out.Reason, "JSON object") {
		t.Fatalf("tick: %+v, want a failed run naming the params problem", out)
	}
	// Params that are not even JSON: the run is still recorded, without them.
	broken := e.misconfiguredInstance("c", `{"n":`, nil, &senderHook{Sender: e.sender})
	out, err = broken.Tick(ctx, TickInput{Now: tick.Now.Add(5 * time.Minute)})
	if err != nil || out.State != ledger.StateFailed {
		t.Fatalf("tick with params that are not JSON: %+v, %v", out, err)
	}
	// A valid job leaves JobError nil and runs.
	ok := e.misconfiguredInstance("b", `{"n":2}`, nil, &senderHook{Sender: e.sender})
	if ok.cfg.JobError != nil {
		t.Fatalf("JobError = %v for valid params", ok.cfg.JobError)
	}
}
