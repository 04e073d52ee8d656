package work_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/enginejob"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/ledgertest"
	"github.com/batonfn/baton/work"
	"github.com/batonfn/baton/work/synthetic"
)

// cacheEnv is a worker over the ledger fake that counts its manifest reads, with a settable
// clock.
type cacheEnv struct {
	t     *testing.T
	fake  *ledgertest.Fake
	w     *work.Worker
	reads atomic.Int64
	mu    sync.Mutex
	now   time.Time
}

func newCacheEnv(t *testing.T) *cacheEnv {
	e := &cacheEnv{t: t, now: time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)}
	e.fake = ledgertest.NewFake(ledgertest.Options{Now: e.clock})
	store := &ledgertest.Faulty{Store: e.fake, Decide: func(op, name string) ledgertest.Fault {
		if op == "ReadManifest" {
			e.reads.Add(1)
		}
		return ledgertest.Pass
	}}
	jobs := work.NewRegistry()
	jobs.Register(synthetic.Name, enginejob.Of(synthetic.New()))
	w, err := work.NewWorker(work.WorkerConfig{Store: store, Jobs: jobs, Holder: ledger.Holder{App: "t", Instance: "i", PID: 1},
		MaxDeliveries: 5, Now: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	e.w = w
	return e
}

func (e *cacheEnv) clock() time.Time { e.mu.Lock(); defer e.mu.Unlock(); return e.now }

func (e *cacheEnv) advance(d time.Duration) { e.mu.Lock(); defer e.mu.Unlock(); e.now = e.now.Add(d) }

// run records a run of n partitions with its deadline an hour away, planned (or still planning).
func (e *cacheEnv) run(id string, n int, planned bool) {
	e.t.Helper()
	params, _ := json.Marshal(synthetic.Params{Partitions: n})
	m := &ledger.Manifest{RunID: id, Trigger: ledger.TriggerManual, Epoch: 1, Segments: []ledger.Segment{{Epoch: 1}},
		Job: synthetic.Name, Params: params, State: ledger.StateRunning, Partitions: n, PlanDone: planned, BatchSize: 100,
		Checkpoint: ledger.Checkpoint{Batches: 1, Next: n}, Deadline: e.clock().Add(time.Hour), Expires: e.clock().Add(2 * time.Hour)}
	if err := e.fake.CreateManifest(context.Background(), m); err != nil {
		e.t.Fatal(err)
	}
}

func (e *cacheEnv) deliver(run string, i, count int) {
	e.t.Helper()
	env := envelope(run, i, 1)
	if err := e.w.HandlePartition(context.Background(), env, work.Delivery{MessageID: env.MessageID(), Count: count}); err != nil {
		e.t.Fatalf("deliver %s/%d: %v", run, i, err)
	}
}

// reading asserts that fn makes want manifest reads.
func (e *cacheEnv) reading(want int64, what string, fn func()) {
	e.t.Helper()
	before := e.reads.Load()
	fn()
	if got := e.reads.Load() - before; got != want {
		e.t.Errorf("%s: %d manifest reads, want %d", what, got, want)
	}
}

// A planned run's manifest is read once per process while it cannot change, and again after
// the cache's TTL and past the run's deadline (when re-enqueue rounds and timeouts may finish it
// with partitions missing); while planning goes on, once per PlanningCopyTTL.
func TestWorker_ReadsAPlannedRunsManifestOnce(t *testing.T) {
	e := newCacheEnv(t)
	e.run("planned", 10, true)
	e.reading(1, "four partitions of a planned run", func() {
		for i := range 4 {
			e.deliver("planned", i, 1)
		}
	})
	e.advance(31 * time.Second)
	e.reading(1, "two partitions after the TTL", func() { e.deliver("planned", 4, 1); e.deliver("planned", 5, 1) })
	e.advance(time.Hour)
	e.reading(2, "two partitions past the deadline", func() { e.deliver("planned", 6, 1); e.deliver("planned", 7, 1) })

	e.run("planning", 10, false)
	e.reading(1, "two partitions while planning", func() {
		e.deliver("planning", 0, 1)
		e.deliver("planning", 1, 1)
	})
	e.advance(work.PlanningCopyTTL - time.Millisecond)
	e.reading(0, "a partition just inside PlanningCopyTTL", func() { e.deliver("planning", 2, 1) })
	e.advance(time.Millisecond)
	e.reading(1, "a partition once the copy is PlanningCopyTTL old", func() { e.deliver("planning", 3, 1) })
}

// A run that finished while this process held its manifest (every result in): a duplicate
// delivery finds its result recorded, and nothing is recorded, counted or finished twice.
func TestWorker_CachedManifestOfAFinishedRun(t *testing.T) {
	e := newCacheEnv(t)
	e.run("dup", 2, true)
	e.deliver("dup", 0, 1) // caches the manifest
	e.deliver("dup", 1, 1) // the last result: finishes the run
	m, err := e.fake.ReadManifest(context.Background(), "dup")
	if err != nil || m.State != ledger.StateSucceeded {
		t.Fatalf("run: %s, %v; want succeeded", m.State, err)
	}
	first, err := e.fake.ReadResult(context.Background(), "dup", 0)
	if err != nil {
		t.Fatal(err)
	}
	e.deliver("dup", 0, 1) // a duplicate copy of a message, first delivery
	again, err := e.fake.ReadResult(context.Background(), "dup", 0)
	if err != nil || !again.Finished.Equal(first.Finished) || again.Worker != first.Worker {
		t.Errorf("result after the duplicate: %+v, %v; want the first one kept", again, err)
	}
	rep, _, err := e.fake.ReadReport(context.Background(), "dup")
	if err != nil || rep.Succeeded != 2 || rep.State != ledger.StateSucceeded {
		t.Errorf("report after the duplicate: %+v, %v", rep, err)
	}
}
