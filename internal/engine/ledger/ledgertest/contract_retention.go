package ledgertest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// testDeleteRun: DeleteRun removes every record of a (final) run (manifest, plan, results,
// blocks, done shards, report, partials) and nothing of any other run, of the schedules'
// states or of the index of active runs; it is idempotent, and a run never recorded deletes as
// nil.
func testDeleteRun(t *testing.T, newStore Factory) {
	ctx := testContext(t)
	s := newStore(t, Options{})
	full := func(run string) {
		t.Helper()
		m := runningManifest(run, 8)
		must(t, s.CreateManifest(ctx, m))
		must(t, s.PutPlanBatch(ctx, run, ledger.PlanBatch{Batch: 0, Partitions: nil, Last: true}))
		must(t, s.PutResult(ctx, ledger.Result{Run: run, Index: 0, OK: true}))
		must(t, s.PutBlock(ctx, ledger.Block{Run: run, Span: ledger.Span{First: 4, Size: 4}, Results: []ledger.Result{{Run: run, Index: 5, OK: true}}}))
		_, err := s.AppendDone(ctx, run, ledger.DoneBlocks, 1, 0)
		must(t, err)
		_, err = s.ClaimReport(ctx, ledger.Report{Run: run, Job: "synthetic", State: ledger.StateSucceeded})
		must(t, err)
		must(t, s.WritePartial(ctx, ledger.Partial{Run: run, Shard: 0, Count: 1}, ""))
	}
	full("gone")
	full("kept")
	_, err := s.UpdateManifest(ctx, "gone", ledger.NoFence, func(m *ledger.Manifest) error { return m.Transition(ledger.StateSucceeded) })
	must(t, err)
	must(t, s.CreateManifest(ctx, runningManifest("gonf", 1))) // a prefix of neither, sorted between
	_, err = s.UpdateSchedule(ctx, "nightly", func(st *ledger.ScheduleState) error { st.Latest = "kept"; return nil })
	must(t, err)

	must(t, s.DeleteRun(ctx, "gone"))
	if _, err := s.ReadManifest(ctx, "gone"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("manifest after DeleteRun: %v, want ErrNotFound", err)
	}
	if _, err := s.ReadPlanBatch(ctx, "gone", 0); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("plan batch after DeleteRun: %v, want ErrNotFound", err)
	}
	if _, err := s.ReadResult(ctx, "gone", 0); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("result after DeleteRun: %v, want ErrNotFound", err)
	}
	if _, err := s.ReadBlock(ctx, "gone", ledger.Span{First: 4, Size: 4}); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("block after DeleteRun: %v, want ErrNotFound", err)
	}
	if n, err := s.DoneCount(ctx, "gone", 0); err != nil || n != 0 {
		t.Errorf("done count after DeleteRun: %d, %v; want 0", n, err)
	}
	if _, _, err := s.ReadReport(ctx, "gone"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("report after DeleteRun: %v, want ErrNotFound", err)
	}
	if _, _, err := s.ReadPartial(ctx, "gone", 0); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("partial after DeleteRun: %v, want ErrNotFound", err)
	}
	var refs int
	must(t, s.ListResults(ctx, "gone", func(ledger.ResultRef) error { refs++; return nil }))
	if refs != 0 {
		t.Errorf("ListResults after DeleteRun: %d results, want none", refs)
	}
	if got := listRuns(t, s); !slices.Equal(got, []string{"gonf", "kept"}) {
		t.Errorf("ListRuns after DeleteRun = %v, want gonf and kept", got)
	}
	// The other runs, the schedule's state and the index are untouched.
	if _, err := s.ReadManifest(ctx, "kept"); err != nil {
		t.Errorf("the other run's manifest: %v", err)
	}
	if _, _, err := s.ReadReport(ctx, "kept"); err != nil {
		t.Errorf("the other run's report: %v", err)
	}
	if n, err := s.DoneCount(ctx, "kept", 0); err != nil || n != 1 {
		t.Errorf("the other run's done count: %d, %v; want 1", n, err)
	}
	if st, err := s.ReadSchedule(ctx, "nightly"); err != nil || st.Latest != "kept" {
		t.Errorf("schedule state after DeleteRun: %+v, %v", st, err)
	}
	var active []string
	must(t, s.ListActive(ctx, func(a ledger.ActiveRun) bool { active = append(active, a.Run); return true }))
	if !slices.Equal(active, []string{"gonf", "kept"}) {
		t.Errorf("ListActive after DeleteRun = %v, want gonf and kept", active)
	}
	// Idempotent, and nil for a run never recorded; an invalid ID is refused.
	must(t, s.DeleteRun(ctx, "gone"))
	must(t, s.DeleteRun(ctx, "never"))
	if err := s.DeleteRun(ctx, "../x"); err == nil {
		t.Error("DeleteRun of an invalid run ID: nil, want an error")
	}
	// A deleted run can be recorded again (its ID is free).
	must(t, s.CreateManifest(ctx, runningManifest("gone", 1)))
}

// testListRunPage: pages of at most max IDs, in name order, resuming from the token; a token
// survives the deletion of the runs before and after it; the schedules' states, the index and
// the sweep's position are never listed as runs.
func testListRunPage(t *testing.T, newStore Factory) {
	ctx := testContext(t)
	s := newStore(t, Options{})
	var ids []string
	for i := range 7 {
		ids = append(ids, fmt.Sprintf("run-%02d", i))
	}
	for _, id := range slices.Backward(ids) {
		must(t, s.CreateManifest(ctx, runningManifest(id, 1)))
	}
	_, err := s.UpdateSchedule(ctx, "nightly", func(*ledger.ScheduleState) error { return nil })
	must(t, err)
	must(t, s.WriteSweep(ctx, ledger.Sweep{Token: "x", Active: true}))

	var got []string
	token, deleted := "", false
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatalf("more than 10 pages of 3 for 7 runs: %v", got)
		}
		page, next, err := s.ListRunPage(ctx, token, 3)
		must(t, err)
		if len(page) > 3 {
			t.Fatalf("page of %d, want at most 3", len(page))
		}
		got = append(got, page...)
		if !deleted && len(page) > 0 {
			// Deleting runs on both sides of the token does not break it (a page may hold
			// no run: what is not a run counts towards max too).
			deleted = true
			must(t, s.DeleteRun(ctx, page[0]))
			must(t, s.DeleteRun(ctx, "run-04"))
		}
		if token = next; token == "" {
			break
		}
	}
	want := slices.Concat(ids[:4], ids[5:])
	if !slices.Equal(got, want) {
		t.Errorf("paged listing = %v, want %v", got, want)
	}
	page, next, err := s.ListRunPage(ctx, "", 100)
	must(t, err)
	if want := slices.Concat(ids[1:4], ids[5:]); !slices.Equal(page, want) || next != "" {
		t.Errorf("one page of all = %v (next %q), want %v and no next page", page, next, want)
	}
}

// testSweep: the sweep's position reads back as written; zero before the first write.
func testSweep(t *testing.T, newStore Factory) {
	ctx := testContext(t)
	s := newStore(t, Options{})
	if sw, err := s.ReadSweep(ctx); err != nil || sw != (ledger.Sweep{}) {
		t.Fatalf("ReadSweep before any write = %+v, %v; want the zero Sweep", sw, err)
	}
	want := ledger.Sweep{Token: "tok", Started: time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC), Active: true}
	must(t, s.WriteSweep(ctx, want))
	if sw, err := s.ReadSweep(ctx); err != nil || sw.Token != want.Token || !sw.Started.Equal(want.Started) || !sw.Active {
		t.Errorf("ReadSweep = %+v, %v; want %+v", sw, err, want)
	}
	if got := listRuns(t, s); len(got) != 0 {
		t.Errorf("ListRuns with only the sweep's position = %v, want none", got)
	}
}

func listRuns(t *testing.T, s ledger.Store) []string {
	t.Helper()
	var got []string
	must(t, s.ListRuns(testContext(t), func(id string) bool { got = append(got, id); return true }))
	return got
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
