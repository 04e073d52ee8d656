package coordinator

import (
	"errors"
	"testing"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
)

// A planner whose planning fails after the run already ended another way (timed out while it
// stalled) leaves the run's final state and reason as they are: a final state never changes.
func TestFailRun_KeepsFinalState(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:00Z")
	c := e.instance("a", countSchedule("s", 1, config.OverlapSkip))
	out, err := c.StartManual(testCtx(t), ManualRequest{Job: "count"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.fake.UpdateManifest(testCtx(t), out.Run, ledger.NoFence, func(m *ledger.Manifest) error {
		m.State, m.Reason, m.Finished = ledger.StateTimedOut, "planning made no progress", e.clock.Now()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	m, err := c.failRun(testCtx(t), election.Lease{Epoch: 1}, out.Run, errors.New("planning failed: the job broke"))
	if err != nil {
		t.Fatalf("failRun of a final run: %v", err)
	}
	if got := e.manifest(out.Run); got.State != ledger.StateTimedOut || got.Reason != "planning made no progress" || m.State != ledger.StateTimedOut {
		t.Errorf("run is %s (%q), failRun answered %s; want timed-out kept", got.State, got.Reason, m.State)
	}
}

// A run that is still planning is failed by failRun, through the one transition function.
func TestFailRun_FailsPlanningRun(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:00Z")
	c := e.instance("a", countSchedule("s", 1, config.OverlapSkip))
	out, err := c.StartManual(testCtx(t), ManualRequest{Job: "count"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.failRun(testCtx(t), election.Lease{Epoch: 1}, out.Run, errors.New("planning failed: the job broke")); err != nil {
		t.Fatal(err)
	}
	if got := e.manifest(out.Run); got.State != ledger.StateFailed || got.Reason == "" || got.Finished.IsZero() {
		t.Errorf("run is %s (%q, finished %v); want failed with a reason", got.State, got.Reason, got.Finished)
	}
}
