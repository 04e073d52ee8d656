package coordinator

import (
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/ledgertest"
)

// activeRuns lists the index of active runs.
func activeRuns(t *testing.T, e *schedEnv) []string {
	t.Helper()
	var out []string
	if err := e.fake.ListActive(testCtx(t), func(a ledger.ActiveRun) bool { out = append(out, a.Run); return true }); err != nil {
		t.Fatal(err)
	}
	return out
}

// The heartbeat repairs the index: an entry whose run is final, or whose record was never
// created once no creation can still be under way, is removed; a fresh one is kept.
func TestSupervision_RepairsTheIndex(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	c := e.instance("a")
	ctx := testCtx(t)
	out, err := c.StartManual(ctx, ManualRequest{Job: "count", Params: json.RawMessage(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	e.finish(out.Run)
	now := e.clock.Now()
	for _, a := range []ledger.ActiveRun{
		{Run: out.Run, Trigger: ledger.TriggerManual, Job: "count", Created: now},                        // left behind by a failed removal
		{Run: "manual-ghost", Trigger: ledger.TriggerManual, Job: "count", Created: now.Add(-time.Hour)}, // its record never came
		{Run: "manual-fresh", Trigger: ledger.TriggerManual, Job: "count", Created: now},                 // its record may still come
	} {
		if err := e.fake.AddActive(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	e.heartbeat(c, now.Add(time.Second).Format(time.RFC3339Nano))
	if got := activeRuns(t, e); len(got) != 1 || got[0] != "manual-fresh" {
		t.Errorf("index after the heartbeat: %v, want manual-fresh alone", got)
	}
}

// A ledger recorded before the index existed (runs in flight at the upgrade): the heartbeat
// fills the index from it once, and supervises those runs like any other.
func TestSupervision_BackfillsRunsRecordedBeforeTheIndex(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	lossy := e.instanceWith("old", func(cfg *Config) { cfg.Control = dropStartChecks{inner: e.sender} })
	ctx := testCtx(t)
	if _, err := lossy.StartManual(ctx, ManualRequest{Job: "count", Params: json.RawMessage(`{"n":2}`)}); !errors.Is(err, errStartCheckLost) {
		t.Fatalf("StartManual: %v", err)
	}
	if _, err := lossy.StartManual(ctx, ManualRequest{Job: "count", Params: json.RawMessage(`{"n":1}`), IdempotencyKey: "done"}); err == nil {
		t.Fatal("the second start check went out")
	}
	orphans := planningRuns(t, e)
	for _, run := range orphans {
		if err := e.fake.RemoveActive(ctx, run); err != nil { // as the code before the index wrote them
			t.Fatal(err)
		}
	}
	final := orphans[len(orphans)-1]
	e.finish(final)
	if len(activeRuns(t, e)) != 0 {
		t.Fatal("the old ledger has an index")
	}
	c := e.instance("new")
	out := e.heartbeat(c, e.clock.Now().Add(15*time.Second+checkMargin).Format(time.RFC3339Nano))
	if out.Supervised != len(orphans)-1 {
		t.Fatalf("the first heartbeat after the upgrade drove %d runs, want the %d not final", out.Supervised, len(orphans)-1)
	}
	for _, run := range orphans[:len(orphans)-1] {
		if m := e.manifest(run); !m.PlanDone {
			t.Errorf("run %s recorded before the index: not planned after the heartbeat", run)
		}
	}
	if b, err := e.fake.ReadBackfill(ctx); err != nil || !b.Done {
		t.Errorf("backfill state %+v, %v; want done", b, err)
	}
	if got := activeRuns(t, e); len(got) != len(orphans)-1 {
		t.Errorf("index after the backfill: %v, want the runs not final", got)
	}
}

// A new schedule's cursor starts when the instance started, not at its first heartbeat: an app
// deployed at 01:59:30 whose first heartbeat beats at 02:00:00 runs its 02:00 occurrence.
func TestHeartbeat_FirstOccurrenceAfterDeploymentRuns(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T01:59:30Z")
	s := Schedule{Name: "nightly", Job: "count", Params: json.RawMessage(`{"n":1}`), Cron: every(time.Hour),
		Overlap: config.OverlapSkip, CatchUp: 10 * time.Minute}
	c := e.instance("a", s) // the instance starts at 01:59:30
	out := e.heartbeat(c, "2026-11-21T02:00:00Z")
	if len(out.Decisions) != 1 || out.Decisions[0].Run != occ("nightly", "2026-11-21T02:00:00Z") || out.Decisions[0].Status != StatusStarted {
		t.Fatalf("the first heartbeat decided %+v, want the 02:00 occurrence started", out.Decisions)
	}
}

// A run queued by a heartbeat that died before it saved the schedule's state is found by the
// next pass, and when its turn has come it starts before any later occurrence of that pass:
// the later one waits behind it, not the other way round.
func TestHeartbeat_AQueuedRunFoundAgainStartsBeforeLaterOccurrences(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	var failSave atomic.Bool
	e.store = &ledgertest.Faulty{Store: e.fake, Decide: func(op, name string) ledgertest.Fault {
		if op == "UpdateSchedule" && failSave.Load() {
			return ledgertest.Fail
		}
		return ledgertest.Pass
	}}
	c := e.instance("a", countSchedule("s", 1, config.OverlapBufferOne))
	e.heartbeat(c, "2026-11-21T10:00:01Z")
	e.heartbeat(c, "2026-11-21T10:00:10Z") // the first run starts
	failSave.Store(true)
	e.clock.set(at2("2026-11-21T10:00:20Z"))
	if _, err := c.Heartbeat(testCtx(t)); err == nil {
		t.Fatal("the heartbeat whose state write failed reported success")
	}
	failSave.Store(false)
	queued := occ("s", "2026-11-21T10:00:20Z")
	if m := e.manifest(queued); m.State != ledger.StateQueued {
		t.Fatalf("run %s is %s, want queued behind the first", queued, m.State)
	}
	e.finish(occ("s", "2026-11-21T10:00:10Z"))
	e.heartbeat(c, "2026-11-21T10:00:30Z")
	if m := e.manifest(queued); m.State == ledger.StateQueued {
		t.Errorf("run %s still queued after its turn came", queued)
	}
	if m := e.manifest(occ("s", "2026-11-21T10:00:30Z")); m.State != ledger.StateQueued {
		t.Errorf("the later occurrence is %s, want queued behind %s", m.State, queued)
	}
}
