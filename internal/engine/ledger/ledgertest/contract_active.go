package ledgertest

import (
	"slices"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// testActive: a record created not final is in the index of active runs, with what it says of
// itself; one created final is not; an update that makes it final takes it out; RemoveActive
// repairs an entry and is idempotent; the ledger's run listing does not see the index.
func testActive(t *testing.T, newStore Factory) {
	ctx := testContext(t)
	s := newStore(t, Options{})
	created := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	timer := runningManifest("tick-20261128t030000z", 4)
	timer.Trigger, timer.Schedule, timer.Created = ledger.TriggerTimer, "tick", created
	manual := runningManifest("manual-b", 2)
	manual.Created = created
	skipped := runningManifest("tick-20261128t020000z", 0)
	skipped.State = ledger.StateSkipped
	for _, m := range []*ledger.Manifest{timer, manual, skipped} {
		if err := s.CreateManifest(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	list := func() []ledger.ActiveRun {
		t.Helper()
		var got []ledger.ActiveRun
		if err := s.ListActive(ctx, func(a ledger.ActiveRun) bool { got = append(got, a); return true }); err != nil {
			t.Fatal(err)
		}
		return got
	}
	got := list()
	want := []ledger.ActiveRun{
		{Run: "manual-b", Trigger: ledger.TriggerManual, Job: "synthetic", Created: created},
		{Run: "tick-20261128t030000z", Trigger: ledger.TriggerTimer, Schedule: "tick", Job: "synthetic", Created: created},
	}
	if !slices.EqualFunc(got, want, sameActive) {
		t.Fatalf("ListActive = %+v, want %+v", got, want)
	}
	var runs []string
	if err := s.ListRuns(ctx, func(id string) bool { runs = append(runs, id); return true }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(runs, []string{"manual-b", "tick-20261128t020000z", "tick-20261128t030000z"}) {
		t.Errorf("ListRuns = %v: the index must not show as runs", runs)
	}
	// Not final to not final keeps the entry; to final removes it.
	if _, err := s.UpdateManifest(ctx, timer.RunID, ledger.NoFence, func(m *ledger.Manifest) error { m.CheckRound = 1; return nil }); err != nil {
		t.Fatal(err)
	}
	if len(list()) != 2 {
		t.Fatalf("an update that leaves the run not final removed its entry: %+v", list())
	}
	if _, err := s.UpdateManifest(ctx, timer.RunID, ledger.NoFence, func(m *ledger.Manifest) error { return m.Transition(ledger.StateSucceeded) }); err != nil {
		t.Fatal(err)
	}
	if got := list(); len(got) != 1 || got[0].Run != "manual-b" {
		t.Fatalf("after the timer run succeeded, ListActive = %+v, want manual-b alone", got)
	}
	if err := s.RemoveActive(ctx, "manual-b"); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveActive(ctx, "manual-b"); err != nil {
		t.Errorf("removing an entry twice: %v, want nil", err)
	}
	if got := list(); len(got) != 0 {
		t.Errorf("ListActive after the repairs = %+v, want none", got)
	}
	stopped := 0
	for _, id := range []string{"manual-c", "manual-d"} {
		if err := s.CreateManifest(ctx, runningManifest(id, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.ListActive(ctx, func(ledger.ActiveRun) bool { stopped++; return false }); err != nil || stopped != 1 {
		t.Errorf("ListActive stopping after the first: %d calls, %v", stopped, err)
	}
	if err := s.RemoveActive(ctx, "../x"); err == nil {
		t.Error("RemoveActive of an invalid run ID: nil, want an error")
	}

	// The backfill of older runs: entries added by hand, and its state beside them, which no
	// listing shows as a run.
	if b, err := s.ReadBackfill(ctx); err != nil || b != (ledger.Backfill{}) {
		t.Fatalf("ReadBackfill before any write = %+v, %v; want the zero Backfill", b, err)
	}
	if err := s.WriteBackfill(ctx, ledger.Backfill{After: "manual-c"}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddActive(ctx, ledger.ActiveRun{Run: "old-run", Trigger: ledger.TriggerManual, Job: "x", Created: created}); err != nil {
		t.Fatal(err)
	}
	if b, err := s.ReadBackfill(ctx); err != nil || b.After != "manual-c" || b.Done {
		t.Errorf("ReadBackfill = %+v, %v", b, err)
	}
	var ids []string
	if err := s.ListActive(ctx, func(a ledger.ActiveRun) bool { ids = append(ids, a.Run); return true }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, []string{"manual-c", "manual-d", "old-run"}) {
		t.Errorf("ListActive = %v, want manual-c, manual-d and old-run", ids)
	}
	if err := s.AddActive(ctx, ledger.ActiveRun{Run: "../x"}); err == nil {
		t.Error("AddActive of an invalid run ID: nil, want an error")
	}
}

func sameActive(a, b ledger.ActiveRun) bool {
	return a.Run == b.Run && a.Trigger == b.Trigger && a.Schedule == b.Schedule && a.Job == b.Job && a.Created.Equal(b.Created)
}
