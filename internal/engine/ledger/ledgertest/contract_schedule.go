package ledgertest

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// testSchedule: a schedule's state is created on its first update, changed only with the
// version read (concurrent writers of different fields both land), and never listed as a run.
func testSchedule(t *testing.T, newStore Factory) {
	ctx := testContext(t)
	s := newStore(t, Options{})
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

	if _, err := s.ReadSchedule(ctx, "nightly"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("ReadSchedule before any update: %v, want ErrNotFound", err)
	}
	if _, err := s.ReadSchedule(ctx, "../x"); err == nil {
		t.Error("ReadSchedule accepted an invalid schedule name")
	}
	if _, err := s.UpdateSchedule(ctx, "Bad_Name", func(*ledger.ScheduleState) error { return nil }); err == nil {
		t.Error("UpdateSchedule accepted an invalid schedule name")
	}
	// ErrNoChange writes nothing, not even the first state.
	if _, err := s.UpdateSchedule(ctx, "nightly", func(*ledger.ScheduleState) error { return ledger.ErrNoChange }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadSchedule(ctx, "nightly"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("after ErrNoChange: %v, want still ErrNotFound", err)
	}

	// Concurrent writers: n advance the cursor (never back), one pauses. All land.
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n+1)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = s.UpdateSchedule(ctx, "nightly", func(st *ledger.ScheduleState) error {
				at := t0.Add(time.Duration(i) * time.Minute)
				if !at.After(st.Cursor) {
					return ledger.ErrNoChange
				}
				st.Cursor, st.Latest = at, ledger.ScheduleRunID("nightly", at)
				return nil
			})
		})
	}
	wg.Go(func() {
		_, errs[n] = s.UpdateSchedule(ctx, "nightly", func(st *ledger.ScheduleState) error {
			st.Paused, st.Note, st.PausedAt = true, "maintenance", t0
			return nil
		})
	})
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	st, err := s.ReadSchedule(ctx, "nightly")
	last := t0.Add((n - 1) * time.Minute)
	if err != nil || st.Schedule != "nightly" || !st.Cursor.Equal(last) || st.Latest != ledger.ScheduleRunID("nightly", last) ||
		!st.Paused || st.Note != "maintenance" || st.Updated.IsZero() {
		t.Fatalf("state = %+v, %v; want the latest cursor and the pause together", st, err)
	}

	// A schedule's state is not a run, and a fresh store kept no legacy schedule.
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
	if l, ok, err := s.ReadLegacySchedule(ctx); err != nil || ok {
		t.Errorf("ReadLegacySchedule on a new ledger = %+v, %v, %v; want none", l, ok, err)
	}
}
