package work_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/enginejob"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/work"
	"github.com/batonfn/baton/work/synthetic"
)

// mergingWorker is the fixture's worker with the plain synthetic job, which merges partial
// aggregates (the fixture's counting wrapper hides that).
func mergingWorker(f *fixture) *work.Worker { return f.newWorker(mergingConfig(f)) }

// mergingConfig is mergingWorker's configuration.
func mergingConfig(f *fixture) work.WorkerConfig {
	jobs := work.NewRegistry()
	jobs.Register(synthetic.Name, enginejob.Of(synthetic.New()))
	cfg := f.cfg
	cfg.Jobs = jobs
	return cfg
}

// deliverAll hands every partition of run to w in a seeded random order, a fifth of them twice
// (some of those at the same time), with the given delivery count per partition.
func deliverAll(t *testing.T, f *fixture, w *work.Worker, run string, n int, seed uint64, count func(i int) int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	order := rng.Perm(n)
	var wg sync.WaitGroup
	for k, i := range order {
		env := envelope(run, i, 1)
		deliver := func() {
			err := w.HandlePartition(f.ctx, env, work.Delivery{MessageID: env.MessageID(), Count: count(i)})
			if err != nil && count(i) < w.MaxDeliveries() {
				t.Errorf("partition %d: %v", i, err)
			}
		}
		if k%5 == 0 {
			wg.Go(deliver)
		}
		deliver()
	}
	wg.Wait()
}

// A folding run (results folded into partial aggregates as they arrive) writes exactly the
// report the full read writes: counts, state, the failed partitions in index order, and the
// aggregate, byte for byte.
func TestFold_ReportEqualsTheFullRead(t *testing.T) {
	const n = 240
	f := newFixture(t)
	w := mergingWorker(f)
	params := synthetic.Params{Partitions: n, FailAlways: []int{7, 100, 233}, Permanent: []int{50}}
	count := func(i int) int {
		if slices.Contains(params.FailAlways, i) {
			return w.MaxDeliveries() // their last delivery records the failure
		}
		return 1 + i%2
	}
	f.createRun("folded", params, func(m *ledger.Manifest) { m.FoldShards = work.DefaultFoldShards })
	f.createRun("full", params)
	deliverAll(t, f, w, "folded", n, 1, count)
	deliverAll(t, f, w, "full", n, 2, count)

	folded, _ := f.report("folded")
	full, _ := f.report("full")
	if folded.State != ledger.StatePartial || folded.State != full.State || folded.Succeeded != full.Succeeded || folded.Failed != full.Failed {
		t.Fatalf("folded %s %d/%d, full %s %d/%d", folded.State, folded.Succeeded, folded.Failed, full.State, full.Succeeded, full.Failed)
	}
	if !slices.Equal(folded.FailedList, full.FailedList) || len(folded.FailedList) != 4 {
		t.Errorf("failed lists differ:\nfolded %+v\nfull   %+v", folded.FailedList, full.FailedList)
	}
	if string(folded.Aggregate) != string(full.Aggregate) {
		t.Errorf("aggregates differ:\nfolded %s\nfull   %s", folded.Aggregate, full.Aggregate)
	}
	var s synthetic.Summary
	if err := json.Unmarshal(folded.Aggregate, &s); err != nil || s.SumV != sumSquares(n, 7, 50, 100, 233) || s.Partitions != n {
		t.Errorf("aggregate %+v, %v", s, err)
	}
}

// Results recorded but never folded in (the worker crashed in between) are read one by one at
// the end, so the report still covers every partition.
func TestFold_UnfoldedResultsAreReadAtTheEnd(t *testing.T) {
	const n = 40
	f := newFixture(t)
	w := mergingWorker(f)
	f.createRun("gap", synthetic.Params{Partitions: n}, func(m *ledger.Manifest) { m.FoldShards = work.DefaultFoldShards })
	for i := range n {
		if i%9 == 0 { // recorded and counted, but not folded
			r := ledger.Result{Run: "gap", Index: i, Epoch: 1, OK: true, Attempts: 1, Output: json.RawMessage(`{"i":` + itoa(i) + `,"v":` + itoa(i*i) + `}`)}
			if err := f.store.PutResult(f.ctx, r); err != nil {
				t.Fatal(err)
			}
			if _, err := f.store.AppendDone(f.ctx, "gap", ledger.DoneStriped, 1, i); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := w.HandlePartition(f.ctx, envelope("gap", i, 1), work.Delivery{Count: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if done, err := w.TryFinish(f.ctx, "gap"); err != nil || !done {
		// The last delivery may already have finished it.
		if m := f.manifest("gap"); m.State != ledger.StateSucceeded {
			t.Fatalf("finish: %v %v, state %s", done, err, m.State)
		}
	}
	_, s := f.report("gap")
	if s.OK != n || s.SumV != sumSquares(n) {
		t.Errorf("aggregate %+v: want ok %d, sumV %d", s, n, sumSquares(n))
	}
}

// Finishing a folding run costs the same number of storage calls whatever its size, but for
// one HEAD per done shard (16 at most per 262,144 partitions): the report reads the partials,
// not the results. A process that has counted shards complete before (its earlier deliveries
// tried to finish as their shards filled) reads only the shards still open: here the last one.
func TestFold_FinishCostDoesNotGrowWithTheRun(t *testing.T) {
	fresh, same := map[int]int64{}, map[int]int64{}
	for _, n := range []int{64, 640} {
		for _, other := range []bool{true, false} {
			f := newFixture(t)
			w := mergingWorker(f)
			run := "size-" + itoa(n)
			f.createRun(run, synthetic.Params{Partitions: n}, func(m *ledger.Manifest) { m.FoldShards = work.DefaultFoldShards })
			// Process every partition but the last, then count what the last one's finish
			// costs, in another process or in the same one.
			for i := range n - 1 {
				if err := w.HandlePartition(f.ctx, envelope(run, i, 1), work.Delivery{Count: 1}); err != nil {
					t.Fatal(err)
				}
			}
			last, calls := w, same
			if other {
				last, calls = mergingWorker(f), fresh
			}
			before := f.calls.n.Load()
			if err := last.HandlePartition(f.ctx, envelope(run, n-1, 1), work.Delivery{Count: 1}); err != nil {
				t.Fatal(err)
			}
			calls[n] = f.calls.n.Load() - before
			if m := f.manifest(run); m.State != ledger.StateSucceeded {
				t.Fatalf("%s: state %s", run, m.State)
			}
		}
	}
	lay := ledger.DoneStriped
	if extra := int64(lay.Shards(640) - lay.Shards(64)); fresh[640] != fresh[64]+extra {
		t.Errorf("the last partition's calls (incl. the finish) in another process: %d at 64 partitions, %d at 640; want %d more (one HEAD per done shard)",
			fresh[64], fresh[640], extra)
	}
	if same[640] != same[64] {
		t.Errorf("the last partition's calls in the process that counted the other shards complete: %d at 64 partitions, %d at 640; want the same (one HEAD, the last shard's)",
			same[64], same[640])
	}
	calls := fresh
	if calls[640] > work.DefaultFoldShards+15 {
		t.Errorf("%d calls to finish, want about %d (the partials plus a handful)", calls[640], work.DefaultFoldShards)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// foldedAllButLast is a fixture with a folding run of n partitions, all but the last processed
// by the worker it returns.
func foldedAllButLast(t *testing.T, run string, n int) (*fixture, *work.Worker) {
	t.Helper()
	f := newFixture(t)
	w := mergingWorker(f)
	f.createRun(run, synthetic.Params{Partitions: n}, func(m *ledger.Manifest) { m.FoldShards = work.DefaultFoldShards })
	for i := range n - 1 {
		if err := w.HandlePartition(f.ctx, envelope(run, i, 1), work.Delivery{Count: 1}); err != nil {
			t.Fatal(err)
		}
	}
	return f, w
}

// The workers whose appends end a folding run together each find the counts complete; only the
// one that claims the report reads the partials. A worker that finds the report claimed by a
// live aggregator stops there, at no read of the partials (before, each read all 32 first).
func TestFold_AWorkerThatFindsTheReportClaimedReadsNoPartials(t *testing.T) {
	const n = 64
	run := "claimed-first"
	f, _ := foldedAllButLast(t, run, n)
	// Another process holds a fresh claim: it is aggregating the run.
	other := ledger.Report{Run: run, Job: synthetic.Name, State: ledger.StateRunning, Partitions: n,
		Aggregator: ledger.Holder{App: "test", Instance: "other", PID: 2}, Claim: "other", Created: time.Now()}
	if _, err := f.store.ClaimReport(f.ctx, other); err != nil {
		t.Fatal(err)
	}
	last := mergingWorker(f) // another process, whose append ends the run
	before := f.calls.n.Load()
	if err := last.HandlePartition(f.ctx, envelope(run, n-1, 1), work.Delivery{Count: 1}); err != nil {
		t.Fatal(err)
	}
	calls := f.calls.n.Load() - before
	if m := f.manifest(run); m.State.Final() {
		t.Fatalf("state %s: the worker finished a run another aggregator had claimed", m.State)
	}
	// Its manifest read, block, partial read and write, append, done count, claim and the
	// claim's read: well under the 32 partials.
	if calls >= work.DefaultFoldShards {
		t.Errorf("the last partition's delivery made %d storage calls with the report claimed elsewhere, want under %d (no partial read)", calls, work.DefaultFoldShards)
	}
}

// Counts that look complete because of a duplicate done record (a redelivery appended twice)
// while a partition has no result: the worker that claimed the report on them finds a result
// missing and lets the claim go at once, so the delivery that records the last result, in
// another process, finishes the run without waiting for the claim to go stale.
func TestFold_AClaimOnCountsThatLiedIsReleased(t *testing.T) {
	const n = 64
	run := "counts-lied"
	f, w := foldedAllButLast(t, run, n)
	if _, err := f.store.AppendDone(f.ctx, run, ledger.DoneStriped, 1, 5); err != nil { // a duplicate
		t.Fatal(err)
	}
	if finished, err := w.TryFinish(f.ctx, run); err != nil || finished {
		t.Fatalf("TryFinish with partition %d unrecorded = %v, %v; want false, nil", n-1, finished, err)
	}
	if rep, _, err := f.store.ReadReport(f.ctx, run); err == nil && (rep.State.Final() || !rep.Created.IsZero()) ||
		err != nil && !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("report after the attempt: %+v, %v; want none, or a released claim (no Created)", rep, err)
	}
	last := mergingWorker(f) // another process: a claim still held would keep it out
	if err := last.HandlePartition(f.ctx, envelope(run, n-1, 1), work.Delivery{Count: 1}); err != nil {
		t.Fatal(err)
	}
	if m := f.manifest(run); m.State != ledger.StateSucceeded || m.Succeeded != n {
		t.Errorf("after the last result: state %s, %d succeeded; want succeeded, %d", m.State, m.Succeeded, n)
	}
}

// overlapStore holds each read of partials 0 and 1 until both have begun: reads one at a time
// never get past the first.
type overlapStore struct {
	work.Ledger
	both chan struct{} // closed once both reads have begun
	n    atomic.Int32
}

func (s *overlapStore) ReadPartial(ctx context.Context, run string, shard int) (ledger.Partial, ledger.ETag, error) {
	if shard < 2 {
		if s.n.Add(1) == 2 {
			close(s.both)
		}
		guard := time.NewTimer(20 * time.Second) // a failure guard, not a wait for the other read
		defer guard.Stop()
		select {
		case <-s.both:
		case <-guard.C:
			return ledger.Partial{}, "", fmt.Errorf("partial %d read alone: the partials are read one at a time", shard)
		case <-ctx.Done():
			return ledger.Partial{}, "", ctx.Err()
		}
	}
	return s.Ledger.ReadPartial(ctx, run, shard)
}

// The finish reads a folding run's partials several at a time, so the report waits a few
// reads, not 32 one after the other.
func TestFold_TheFinishReadsThePartialsAtOnce(t *testing.T) {
	const n = 64
	run := "partials-at-once"
	f, _ := foldedAllButLast(t, run, n)
	cfg := mergingConfig(f)
	cfg.Store = &overlapStore{Ledger: f.store, both: make(chan struct{})}
	last := f.newWorker(cfg)
	if err := last.HandlePartition(f.ctx, envelope(run, n-1, 1), work.Delivery{Count: 1}); err != nil {
		t.Fatal(err)
	}
	if m := f.manifest(run); m.State != ledger.StateSucceeded || m.Succeeded != n {
		t.Errorf("state %s, %d succeeded; want succeeded, %d", m.State, m.Succeeded, n)
	}
}
