// Package ledgertest holds the run ledger's contract suite and an in-memory fake that passes
// it, so the rules every ledger.Store must keep (create-once records, conditional updates,
// fencing, append ordinals, the schedule's inbox and cursor) are checked the same way against
// Azure Blob Storage (ledger/blobstore, on Azurite) and against the fake that fast tests use.
package ledgertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// race runs fn on n goroutines released together and returns their errors.
func race(n int, fn func(i int) error) []error {
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = fn(i)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// oneWinner checks that exactly one error is nil and every other wraps ErrExists, and returns
// the winner's index.
func oneWinner(t *testing.T, errs []error) int {
	t.Helper()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("goroutines %d and %d both won", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, ledger.ErrExists):
			t.Errorf("goroutine %d: got %v, want ErrExists", i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no winner among %d goroutines", len(errs))
	}
	return winner
}

func testCreateOnce_RaceHasOneWinner(t *testing.T, newStore Factory) {
	const n = 20
	ctx := testContext(t)
	s := newStore(t, Options{})
	if err := s.CreateManifest(ctx, runningManifest("seed", 1)); err != nil {
		t.Fatal(err)
	}

	t.Run("manifest", func(t *testing.T) {
		w := oneWinner(t, race(n, func(i int) error {
			m := runningManifest("r1", 10)
			m.Leader.PID = i
			return s.CreateManifest(ctx, m)
		}))
		got, err := s.ReadManifest(ctx, "r1")
		if err != nil {
			t.Fatal(err)
		}
		if got.Leader.PID != w || got.Version != ledger.ManifestVersion || got.Created.IsZero() {
			t.Errorf("stored manifest: PID %d version %d created %v, want the winner's (PID %d), version %d, a creation time",
				got.Leader.PID, got.Version, got.Created, w, ledger.ManifestVersion)
		}
	})
	t.Run("result", func(t *testing.T) {
		w := oneWinner(t, race(n, func(i int) error {
			return s.PutResult(ctx, ledger.Result{Run: "seed", Index: 7, OK: true, Attempts: i})
		}))
		got, err := s.ReadResult(ctx, "seed", 7)
		if err != nil {
			t.Fatal(err)
		}
		if got.Attempts != w || got.Index != 7 || !got.OK {
			t.Errorf("stored result %+v, want the winner's (attempts %d)", got, w)
		}
	})
	t.Run("plan batch", func(t *testing.T) {
		w := oneWinner(t, race(n, func(i int) error {
			return s.PutPlanBatch(ctx, "seed", ledger.PlanBatch{Batch: 2, First: 200, Cursor: fmt.Sprint(i),
				Partitions: []json.RawMessage{json.RawMessage(`{"i":200}`)}})
		}))
		got, err := s.ReadPlanBatch(ctx, "seed", 2)
		if err != nil {
			t.Fatal(err)
		}
		if got.Cursor != fmt.Sprint(w) || got.First != 200 || len(got.Partitions) != 1 || string(got.Partitions[0]) != `{"i":200}` {
			t.Errorf("stored batch %+v, want the winner's (cursor %d)", got, w)
		}
	})
	t.Run("report claim", func(t *testing.T) {
		etags := make([]string, n)
		w := oneWinner(t, race(n, func(i int) error {
			etag, err := s.ClaimReport(ctx, ledger.Report{Run: "seed", State: ledger.StateRunning, Aggregator: ledger.Holder{PID: i}})
			etags[i] = string(etag)
			return err
		}))
		got, etag, err := s.ReadReport(ctx, "seed")
		if err != nil {
			t.Fatal(err)
		}
		if got.Aggregator.PID != w || string(etag) != etags[w] || etag == "" {
			t.Errorf("stored report by PID %d with ETag %s, want the winner's (PID %d, ETag %s)", got.Aggregator.PID, etag, w, etags[w])
		}
	})
}

func testNotFound(t *testing.T, newStore Factory) {
	ctx := testContext(t)
	s := newStore(t, Options{})
	for name, err := range map[string]error{
		"manifest": func() error { _, err := s.ReadManifest(ctx, "nope"); return err }(),
		"result":   func() error { _, err := s.ReadResult(ctx, "nope", 0); return err }(),
		"report":   func() error { _, _, err := s.ReadReport(ctx, "nope"); return err }(),
		"batch":    func() error { _, err := s.ReadPlanBatch(ctx, "nope", 0); return err }(),
		"update": func() error {
			_, err := s.UpdateManifest(ctx, "nope", ledger.NoFence, func(*ledger.Manifest) error { return nil })
			return err
		}(),
	} {
		if !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("%s: got %v, want ErrNotFound", name, err)
		}
	}
	if n, err := s.DoneCount(ctx, "nope", 0); err != nil || n != 0 {
		t.Errorf("DoneCount of a missing shard = %d, %v; want 0, nil", n, err)
	}
	if _, err := s.ReadManifest(ctx, "Bad/ID"); err == nil || errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("ReadManifest with an invalid ID: got %v, want a validation error", err)
	}
	if err := s.CreateManifest(ctx, runningManifest("../x", 1)); err == nil {
		t.Error("CreateManifest accepted an invalid run ID")
	}
}

func testUpdateManifest_ConcurrentUpdatesLoseNothing(t *testing.T, newStore Factory) {
	const workers, each = 8, 5
	ctx := testContext(t)
	s := newStore(t, Options{UpdateRetries: 1000})
	if err := s.CreateManifest(ctx, runningManifest("cas", 1)); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	errs := race(workers, func(int) error {
		for range each {
			_, err := s.UpdateManifest(ctx, "cas", ledger.NoFence, func(m *ledger.Manifest) error {
				calls.Add(1)
				m.CheckRound++
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("worker %d: %v", i, err)
		}
	}
	m, err := s.ReadManifest(ctx, "cas")
	if err != nil {
		t.Fatal(err)
	}
	if m.CheckRound != workers*each {
		t.Errorf("CheckRound = %d after %d increments, want %d (a lost update)", m.CheckRound, workers*each, workers*each)
	}
	t.Logf("%d increments took %d mutation calls (%d conflicts)", workers*each, calls.Load(), calls.Load()-workers*each)
}

func testUpdateManifest_GivesUpAfterRetries(t *testing.T, newStore Factory) {
	ctx := testContext(t)
	s := newStore(t, Options{UpdateRetries: 3})
	if err := s.CreateManifest(ctx, runningManifest("conflict", 1)); err != nil {
		t.Fatal(err)
	}
	calls := 0
	_, err := s.UpdateManifest(ctx, "conflict", ledger.NoFence, func(m *ledger.Manifest) error {
		calls++
		// A competing writer changes the manifest after every read, so every write conflicts.
		if _, err := s.UpdateManifest(ctx, "conflict", ledger.NoFence, func(m *ledger.Manifest) error {
			m.CheckRound++
			return nil
		}); err != nil {
			t.Errorf("competing update: %v", err)
		}
		m.Reason = "never written"
		return nil
	})
	if !errors.Is(err, ledger.ErrConflict) {
		t.Fatalf("got %v, want ErrConflict", err)
	}
	if calls != 3 {
		t.Errorf("mutation called %d times, want 3 (UpdateRetries)", calls)
	}
	m, err := s.ReadManifest(ctx, "conflict")
	if err != nil {
		t.Fatal(err)
	}
	if m.Reason != "" || m.CheckRound != 3 {
		t.Errorf("manifest reason %q, check round %d; want no reason and the 3 competing increments", m.Reason, m.CheckRound)
	}
}

func testUpdateManifest_Fencing(t *testing.T, newStore Factory) {
	ctx := testContext(t)
	s := newStore(t, Options{})
	m := runningManifest("fenced", 1)
	m.Epoch = 5
	if err := s.CreateManifest(ctx, m); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		epoch  int64
		fenced bool
	}{
		{"older epoch is fenced", 4, true},
		{"much older epoch is fenced", 1, true},
		{"same epoch writes", 5, false},
		{"newer epoch writes", 6, false},
		{"no fence writes", ledger.NoFence, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			called := false
			got, err := s.UpdateManifest(ctx, "fenced", tc.epoch, func(m *ledger.Manifest) error {
				called = true
				m.Reason = tc.name
				return nil
			})
			if tc.fenced {
				if !errors.Is(err, ledger.ErrFenced) || called {
					t.Errorf("got err %v, mutation called %v; want ErrFenced without calling it", err, called)
				}
				if got.Epoch != 5 {
					t.Errorf("returned manifest epoch %d, want the current 5", got.Epoch)
				}
				return
			}
			if err != nil || !called {
				t.Fatalf("got err %v, called %v; want a write", err, called)
			}
			stored, err := s.ReadManifest(ctx, "fenced")
			if err != nil {
				t.Fatal(err)
			}
			if stored.Reason != tc.name {
				t.Errorf("stored reason %q, want %q", stored.Reason, tc.name)
			}
		})
	}
}

func testUpdateManifest_NoChangeSkipsTheWrite(t *testing.T, newStore Factory) {
	ctx := testContext(t)
	clock := time.Date(2026, 11, 21, 2, 0, 0, 0, time.UTC)
	s := newStore(t, Options{Now: func() time.Time { return clock }})
	if err := s.CreateManifest(ctx, runningManifest("nochange", 1)); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(time.Hour)
	got, err := s.UpdateManifest(ctx, "nochange", ledger.NoFence, func(*ledger.Manifest) error { return ledger.ErrNoChange })
	if err != nil {
		t.Fatal(err)
	}
	stored, err := s.ReadManifest(ctx, "nochange")
	if err != nil {
		t.Fatal(err)
	}
	if !stored.Updated.Equal(stored.Created) || got.RunID != "nochange" {
		t.Errorf("updated %v created %v (returned run %q): want no write and the current manifest returned", stored.Updated, stored.Created, got.RunID)
	}
	wantErr := errors.New("mutation refused")
	if _, err := s.UpdateManifest(ctx, "nochange", ledger.NoFence, func(*ledger.Manifest) error { return wantErr }); !errors.Is(err, wantErr) {
		t.Errorf("got %v, want the mutation's error", err)
	}
}

func testAppendDone_ManyRecordsInOneAppend(t *testing.T, newStore Factory) {
	const workers, groups = 6, 10
	ctx := testContext(t)
	s := newStore(t, Options{})
	type span struct{ first, size int }
	got := make([][]struct {
		span
		ord int64
	}, workers)
	errs := race(workers, func(w int) error {
		for g := range groups {
			// Worker w's group g: (w+g)%5+1 consecutive indexes from its own range.
			sp := span{first: (w*groups + g) * 8, size: (w+g)%5 + 1}
			idx := make([]int, sp.size)
			for k := range idx {
				idx[k] = sp.first + k
			}
			ord, err := s.AppendDone(ctx, "bundles", ledger.DoneBlocks, 3, idx...)
			if err != nil {
				return err
			}
			got[w] = append(got[w], struct {
				span
				ord int64
			}{sp, ord})
		}
		return nil
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
	}
	records, err := s.ReadDone(ctx, "bundles", 0)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, list := range got {
		for _, g := range list {
			total += g.size
			// The append's records are exactly the ordinals ord-size+1..ord, in order.
			from := int(g.ord) - g.size
			if from < 0 || int(g.ord) > len(records) {
				t.Fatalf("group at %d of %d: ordinal %d out of the shard's %d records", g.first, g.size, g.ord, len(records))
			}
			for k := range g.size {
				if records[from+k] != g.first+k {
					t.Fatalf("group at %d of %d (ordinal %d): record %d is %d, want %d (one append's records are contiguous)",
						g.first, g.size, g.ord, from+k+1, records[from+k], g.first+k)
				}
			}
		}
	}
	if len(records) != total {
		t.Errorf("%d records, want %d", len(records), total)
	}
	if n, err := s.DoneCount(ctx, "bundles", 0); err != nil || n != int64(total) {
		t.Errorf("DoneCount = %d, %v; want %d", n, err, total)
	}
	// Indexes in two shards, or none, are refused and record nothing.
	for _, bad := range [][]int{{ledger.DoneShardSize - 1, ledger.DoneShardSize}, nil, {-1}} {
		if _, err := s.AppendDone(ctx, "bundles", ledger.DoneBlocks, 3, bad...); !errors.Is(err, ledger.ErrDoneShards) {
			t.Errorf("AppendDone(%v) = %v, want ErrDoneShards", bad, err)
		}
	}
	if n, err := s.DoneCount(ctx, "bundles", 1); err != nil || n != 0 {
		t.Errorf("shard 1 after a refused append: DoneCount = %d, %v; want 0", n, err)
	}
}

// A done shard created ahead of its records counts none and reads none; the first append to
// it has ordinal 1, and creating it again (racing, or after the records) keeps them.
func testCreateDone_EmptyThenAppendedTo(t *testing.T, newStore Factory) {
	ctx := testContext(t)
	s := newStore(t, Options{})
	for _, err := range race(4, func(int) error { return s.CreateDone(ctx, "ahead", 2) }) {
		if err != nil {
			t.Fatalf("CreateDone: %v", err)
		}
	}
	if n, err := s.DoneCount(ctx, "ahead", 2); err != nil || n != 0 {
		t.Errorf("DoneCount of a created shard = %d, %v; want 0, nil", n, err)
	}
	if idx, err := s.ReadDone(ctx, "ahead", 2); len(idx) != 0 || err != nil {
		t.Errorf("ReadDone of a created shard = %v, %v; want none", idx, err)
	}
	first := 2 * ledger.DoneShardSize
	if ord, err := s.AppendDone(ctx, "ahead", ledger.DoneBlocks, 1, first, first+1); err != nil || ord != 2 {
		t.Fatalf("first append to a created shard: ordinal %d, %v; want 2", ord, err)
	}
	if err := s.CreateDone(ctx, "ahead", 2); err != nil {
		t.Fatalf("CreateDone of a shard with records: %v", err)
	}
	if idx, err := s.ReadDone(ctx, "ahead", 2); err != nil || !slices.Equal(idx, []int{first, first + 1}) {
		t.Errorf("ReadDone after creating again = %v, %v; want [%d %d]", idx, err, first, first+1)
	}
}

func testAppendDone_OrdinalsUniqueAndDense(t *testing.T, newStore Factory) {
	const workers, each = 8, 100
	ctx := testContext(t)
	s := newStore(t, Options{})
	ords := make([][]int64, workers)
	errs := race(workers, func(w int) error {
		for k := range each {
			ord, err := s.AppendDone(ctx, "fanin", ledger.DoneBlocks, 1, w*each+k)
			if err != nil {
				return err
			}
			ords[w] = append(ords[w], ord)
		}
		return nil
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
	}
	all := slices.Concat(ords...)
	slices.Sort(all)
	for i, ord := range all {
		if ord != int64(i+1) {
			t.Fatalf("sorted ordinal #%d is %d, want %d (ordinals must be 1..%d, each once)", i, ord, i+1, workers*each)
		}
	}
	if n, err := s.DoneCount(ctx, "fanin", 0); err != nil || n != workers*each {
		t.Errorf("DoneCount = %d, %v; want %d", n, err, workers*each)
	}
	idx, err := s.ReadDone(ctx, "fanin", 0)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(idx)
	if len(idx) != workers*each || idx[0] != 0 || idx[len(idx)-1] != workers*each-1 || len(slices.Compact(idx)) != workers*each {
		t.Errorf("ReadDone: %d records, want each of 0..%d once", len(idx), workers*each-1)
	}
	if idx, err := s.ReadDone(ctx, "fanin", 7); idx != nil || err != nil {
		t.Errorf("ReadDone of a missing shard = %v, %v; want nil, nil", idx, err)
	}
	// Index DoneShardSize starts shard 1; shard 0 is unaffected.
	if ord, err := s.AppendDone(ctx, "fanin", ledger.DoneBlocks, 1, ledger.DoneShardSize); err != nil || ord != 1 {
		t.Errorf("first append to shard 1: ordinal %d, %v; want 1", ord, err)
	}
	n0, _ := s.DoneCount(ctx, "fanin", 0)
	n1, _ := s.DoneCount(ctx, "fanin", 1)
	if n0 != workers*each || n1 != 1 {
		t.Errorf("DoneCount shard 0 = %d, shard 1 = %d; want %d and 1", n0, n1, workers*each)
	}
	// A duplicate record (a redelivery) counts and reads back twice.
	if _, err := s.AppendDone(ctx, "fanin", ledger.DoneBlocks, 1, ledger.DoneShardSize); err != nil {
		t.Fatal(err)
	}
	if idx, err := s.ReadDone(ctx, "fanin", 1); err != nil || !slices.Equal(idx, []int{ledger.DoneShardSize, ledger.DoneShardSize}) {
		t.Errorf("ReadDone shard 1 = %v, %v; want index %d twice", idx, err, ledger.DoneShardSize)
	}
}

// In the striped layout a message's partitions (consecutive, within one unit) append to one
// shard, consecutive units to different shards, and each shard ends up holding exactly the
// partitions the layout gives it.
// The failure log: concurrent appends of several records each lose none, every append returns
// the count after it (the last one the total), a partition appended twice is read twice, and a
// run without a log reads none.
func testAppendFailed_CountsEveryRecord(t *testing.T, newStore Factory) {
	ctx := testContext(t)
	s := newStore(t, Options{})
	if err := s.CreateManifest(ctx, runningManifest("budget", 1)); err != nil {
		t.Fatal(err)
	}
	if idx, err := s.ReadFailed(ctx, "budget"); err != nil || len(idx) != 0 {
		t.Fatalf("ReadFailed before any append = %v, %v; want none", idx, err)
	}
	const appenders, each = 8, 3
	counts := make([]int64, appenders)
	errs := race(appenders, func(w int) error {
		var err error
		counts[w], err = s.AppendFailed(ctx, "budget", w*each, w*each+1, w*each+2)
		return err
	})
	for w, err := range errs {
		if err != nil {
			t.Fatalf("appender %d: %v", w, err)
		}
	}
	slices.Sort(counts)
	for w, n := range counts {
		if n != int64((w+1)*each) {
			t.Fatalf("counts after each append %v, want %d, %d, ... %d", counts, each, 2*each, appenders*each)
		}
	}
	if n, err := s.AppendFailed(ctx, "budget", 0); err != nil || n != appenders*each+1 {
		t.Fatalf("append of a partition again = %d, %v; want %d", n, err, appenders*each+1)
	}
	idx, err := s.ReadFailed(ctx, "budget")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(idx)
	want := []int{0}
	for i := range appenders * each {
		want = append(want, i)
	}
	if !slices.Equal(idx, want) {
		t.Fatalf("ReadFailed = %v, want %v (0 twice)", idx, want)
	}
}

func testAppendDone_Striped(t *testing.T, newStore Factory) {
	const n = 3*ledger.DoneUnit*ledger.DoneStripes + 100 // three rounds of the stripes and a bit
	const bundle = ledger.DoneUnit / 4
	ctx := testContext(t)
	s := newStore(t, Options{})
	lay := ledger.DoneStriped
	starts := make([]int, 0, n/bundle+1)
	for from := 0; from < n; from += bundle {
		starts = append(starts, from)
	}
	const workers = 6
	errs := race(workers, func(w int) error {
		for k := w; k < len(starts); k += workers {
			idx := make([]int, 0, bundle)
			for i := starts[k]; i < min(starts[k]+bundle, n); i++ {
				idx = append(idx, i)
			}
			ord, err := s.AppendDone(ctx, "striped", lay, 2, idx...)
			if err != nil {
				return err
			}
			if ord < int64(len(idx)) {
				return fmt.Errorf("append at %d: ordinal %d below its own %d records", starts[k], ord, len(idx))
			}
		}
		return nil
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
	}
	if got := lay.Shards(n); got != ledger.DoneStripes {
		t.Fatalf("Shards(%d) = %d, want %d", n, got, ledger.DoneStripes)
	}
	var total int64
	for sh := range lay.Shards(n) {
		c, err := s.DoneCount(ctx, "striped", sh)
		if err != nil {
			t.Fatal(err)
		}
		if want := lay.Expected(n, sh); c != want {
			t.Errorf("shard %d: DoneCount %d, want Expected %d", sh, c, want)
		}
		idx, err := s.ReadDone(ctx, "striped", sh)
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range idx {
			if lay.Shard(i) != sh {
				t.Fatalf("shard %d holds partition %d, which the layout gives shard %d", sh, i, lay.Shard(i))
			}
		}
		total += c
	}
	if total != n {
		t.Errorf("%d records over the shards, want %d", total, n)
	}
	// Partitions of two units, or one past a unit's end, are refused and record nothing.
	if _, err := s.AppendDone(ctx, "striped2", lay, 2, ledger.DoneUnit-1, ledger.DoneUnit); !errors.Is(err, ledger.ErrDoneShards) {
		t.Errorf("AppendDone across two units = %v, want ErrDoneShards", err)
	}
	for sh := range 2 {
		if c, err := s.DoneCount(ctx, "striped2", sh); err != nil || c != 0 {
			t.Errorf("striped2 shard %d after a refused append: DoneCount = %d, %v; want 0", sh, c, err)
		}
	}
}

// WrittenNow checks that each listed result tells when it was written — within a minute of
// now, as every result of a contract test is written during it (a blob store stamps it by
// its own clock) — and returns the refs with Modified cleared, for comparing.
func WrittenNow(t *testing.T, refs []ledger.ResultRef) []ledger.ResultRef {
	t.Helper()
	now := time.Now()
	out := make([]ledger.ResultRef, len(refs))
	for k, r := range refs {
		if d := now.Sub(r.Modified); d < -time.Minute || d > time.Minute {
			t.Errorf("result %d listed as written at %s, now is %s", r.Index, r.Modified, now)
		}
		r.Modified = time.Time{}
		out[k] = r
	}
	return out
}

func testListResults_IndexOrder(t *testing.T, newStore Factory) {
	ctx := testContext(t)
	s := newStore(t, Options{})
	for _, i := range []int{5, 100, 3, 20001, 0, 42} {
		if err := s.PutResult(ctx, ledger.Result{Run: "list", Index: i, OK: true}); err != nil {
			t.Fatal(err)
		}
	}
	// Another run whose ID extends this one is not listed.
	if err := s.PutResult(ctx, ledger.Result{Run: "list2", Index: 1, OK: true}); err != nil {
		t.Fatal(err)
	}
	var got []int
	if err := s.ListResults(ctx, "list", func(r ledger.ResultRef) error {
		if !r.Block.IsZero() {
			t.Errorf("result %d listed in block %s, want its own", r.Index, r.Block)
		}
		WrittenNow(t, []ledger.ResultRef{r})
		got = append(got, r.Index)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 3, 5, 42, 100, 20001}; !slices.Equal(got, want) {
		t.Errorf("listed %v, want %v", got, want)
	}
	stop := errors.New("stop")
	calls := 0
	if err := s.ListResults(ctx, "list", func(ledger.ResultRef) error { calls++; return stop }); !errors.Is(err, stop) || calls != 1 {
		t.Errorf("callback error: got %v after %d calls, want it returned after 1", err, calls)
	}
	if err := s.ListResults(ctx, "empty", func(ledger.ResultRef) error { t.Error("callback on an empty run"); return nil }); err != nil {
		t.Error(err)
	}
}

func testWriteReport_GuardedByClaimETag(t *testing.T, newStore Factory) {
	ctx := testContext(t)
	s := newStore(t, Options{})
	etag, err := s.ClaimReport(ctx, ledger.Report{Run: "rep", State: ledger.StateRunning})
	if err != nil {
		t.Fatal(err)
	}
	// A renewal of the claim (what an aggregator writes while it works) returns the version
	// the next write needs; the claim's own is stale from then on.
	renewedAt := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	renewed, err := s.WriteReport(ctx, ledger.Report{Run: "rep", State: ledger.StateRunning, Renewed: renewedAt}, etag)
	if err != nil || renewed == "" || renewed == etag {
		t.Fatalf("renew with the claim's ETag: %q, %v; want a new ETag", renewed, err)
	}
	if _, err := s.WriteReport(ctx, ledger.Report{Run: "rep", State: ledger.StateFailed}, etag); !errors.Is(err, ledger.ErrConflict) {
		t.Errorf("a write with the claim's ETag after the renewal: got %v, want ErrConflict", err)
	}
	if got, tag, err := s.ReadReport(ctx, "rep"); err != nil || tag != renewed || !got.Renewed.Equal(renewedAt) || !got.ClaimedAt().Equal(renewedAt) {
		t.Errorf("report after the renewal: %+v (ETag %q), %v; want renewed at %s, ETag %q", got, tag, err, renewedAt, renewed)
	}
	if _, err := s.WriteReport(ctx, ledger.Report{Run: "rep", State: ledger.StateSucceeded, Succeeded: 3}, renewed); err != nil {
		t.Fatalf("write with the renewal's ETag: %v", err)
	}
	if _, err := s.WriteReport(ctx, ledger.Report{Run: "rep", State: ledger.StateFailed}, renewed); !errors.Is(err, ledger.ErrConflict) {
		t.Errorf("a second write with the renewal's (now stale) ETag: got %v, want ErrConflict", err)
	}
	got, _, err := s.ReadReport(ctx, "rep")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != ledger.StateSucceeded || got.Succeeded != 3 {
		t.Errorf("report %+v, want the final write (succeeded, 3)", got)
	}
}

func testListRuns(t *testing.T, newStore Factory) {
	ctx := testContext(t)
	s := newStore(t, Options{})
	for _, id := range []string{"run-b", "run-a", "run-c"} {
		if err := s.CreateManifest(ctx, runningManifest(id, 1)); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	if err := s.ListRuns(ctx, func(id string) bool { got = append(got, id); return true }); err != nil {
		t.Fatal(err)
	}
	if want := []string{"run-a", "run-b", "run-c"}; !slices.Equal(got, want) {
		t.Errorf("ListRuns = %v, want %v", got, want)
	}
	got = nil
	if err := s.ListRuns(ctx, func(id string) bool { got = append(got, id); return false }); err != nil || len(got) != 1 {
		t.Errorf("ListRuns stopping after the first: got %v, %v", got, err)
	}
}

// Options configure a store for one contract test.
type Options struct {
	// Now is the store's clock for Updated timestamps (nil: time.Now).
	Now func() time.Time
	// UpdateRetries bounds UpdateManifest's conflict retries (0: ledger.DefaultUpdateRetries).
	UpdateRetries int
}

// Factory returns a new, empty store (its container ensured) for one test.
type Factory func(t *testing.T, opts Options) ledger.Store

// RunContract runs the whole contract suite against the stores newStore makes.
func RunContract(t *testing.T, newStore Factory) {
	for _, c := range []struct {
		name string
		fn   func(*testing.T, Factory)
	}{
		{"CreateOnce_RaceHasOneWinner", testCreateOnce_RaceHasOneWinner},
		{"NotFound", testNotFound},
		{"UpdateManifest_ConcurrentUpdatesLoseNothing", testUpdateManifest_ConcurrentUpdatesLoseNothing},
		{"UpdateManifest_GivesUpAfterRetries", testUpdateManifest_GivesUpAfterRetries},
		{"UpdateManifest_Fencing", testUpdateManifest_Fencing},
		{"UpdateManifest_NoChangeSkipsTheWrite", testUpdateManifest_NoChangeSkipsTheWrite},
		{"AppendDone_OrdinalsUniqueAndDense", testAppendDone_OrdinalsUniqueAndDense},
		{"CreateDone_EmptyThenAppendedTo", testCreateDone_EmptyThenAppendedTo},
		{"AppendDone_ManyRecordsInOneAppend", testAppendDone_ManyRecordsInOneAppend},
		{"AppendDone_Striped", testAppendDone_Striped},
		{"AppendFailed_CountsEveryRecord", testAppendFailed_CountsEveryRecord},
		{"ListResults_IndexOrder", testListResults_IndexOrder},
		{"Blocks", testBlocks},
		{"WriteReport_GuardedByClaimETag", testWriteReport_GuardedByClaimETag},
		{"ListRuns", testListRuns},
		{"ReadReportBounded", testReadReportBounded},
		{"Schedule", testSchedule},
		{"Partials", testPartials},
		{"Active", testActive},
		{"DeleteRun", testDeleteRun},
		{"ListRunPage", testListRunPage},
		{"Sweep", testSweep},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newStore) })
	}
}

// testContext is cancelled when the test ends and bounded generously (2 shared cores).
func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// runningManifest is a minimal valid manifest for run.
func runningManifest(run string, partitions int) *ledger.Manifest {
	return &ledger.Manifest{RunID: run, Trigger: ledger.TriggerManual, Epoch: 1,
		Segments: []ledger.Segment{{Epoch: 1, From: 0}}, Job: "synthetic", State: ledger.StateRunning,
		Partitions: partitions, PlanDone: true, BatchSize: 100}
}
