package ledgertest

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/batonfn/baton/ledger"
)

// testSchedule: the schedule's inbox, its cursor and the active-run pointer, none of which is
// ever listed as a run.
func testSchedule(t *testing.T, newStore Factory) {
	ctx := testContext(t)
	s := newStore(t, Options{})
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

	// Inbox: a repeat is a no-op that keeps the first entry; oldest occurrence first.
	for _, p := range []ledger.Pending{
		{Run: "tick-b", Occurrence: t0.Add(time.Minute), FiredBy: ledger.Holder{Instance: "i1"}},
		{Run: "tick-a", Occurrence: t0, FiredBy: ledger.Holder{Instance: "i1"}},
		{Run: "tick-a", Occurrence: t0, FiredBy: ledger.Holder{Instance: "i2"}},
	} {
		if err := s.PutPending(ctx, p); err != nil {
			t.Fatalf("PutPending %s: %v", p.Run, err)
		}
	}
	if err := s.PutPending(ctx, ledger.Pending{Run: "../x"}); err == nil {
		t.Error("PutPending accepted an invalid run ID")
	}
	got, err := s.ListPending(ctx)
	if err != nil || len(got) != 2 || got[0].Run != "tick-a" || got[1].Run != "tick-b" || got[0].FiredBy.Instance != "i1" {
		t.Fatalf("ListPending = %+v, %v; want tick-a (first record, i1) then tick-b", got, err)
	}
	if err := s.DeletePending(ctx, "tick-a"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePending(ctx, "tick-a"); err != nil {
		t.Errorf("deleting a missing entry: %v, want nil", err)
	}
	if got, err := s.ListPending(ctx); err != nil || len(got) != 1 || got[0].Run != "tick-b" {
		t.Errorf("after delete: %+v, %v", got, err)
	}

	// Cursor: absent at first, moves forward only, concurrent advances keep the latest.
	if _, ok, err := s.ReadCursor(ctx); err != nil || ok {
		t.Fatalf("fresh cursor: ok %v, %v; want none", ok, err)
	}
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = s.AdvanceCursor(ctx, t0.Add(time.Duration(i)*time.Minute)) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if err := s.AdvanceCursor(ctx, t0); err != nil {
		t.Fatal(err)
	}
	if c, ok, err := s.ReadCursor(ctx); err != nil || !ok || !c.Last.Equal(t0.Add((n-1)*time.Minute)) {
		t.Errorf("cursor = %+v %v %v; want the latest of the concurrent advances", c, ok, err)
	}

	// Active run pointer.
	if _, ok, err := s.ReadActive(ctx); err != nil || ok {
		t.Fatalf("fresh active: ok %v, %v", ok, err)
	}
	if err := s.SetActive(ctx, ledger.Active{Run: "run-a", Epoch: 3, Started: t0}); err != nil {
		t.Fatal(err)
	}
	if a, ok, err := s.ReadActive(ctx); err != nil || !ok || a.Run != "run-a" || a.Epoch != 3 {
		t.Errorf("active = %+v %v %v", a, ok, err)
	}

	// None of the above is a run.
	if err := s.CreateManifest(ctx, runningManifest("run-a", 1)); err != nil {
		t.Fatal(err)
	}
	var runs []string
	if err := s.ListRuns(ctx, func(id string) bool { runs = append(runs, id); return true }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(runs, []string{"run-a"}) {
		t.Errorf("ListRuns = %v, want only run-a", runs)
	}
}
