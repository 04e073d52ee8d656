package work_test

import (
	"context"
	"encoding/json"
	"fmt"
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

// countingLedger is the ledger fake with a hook after each DoneCount (given the shard).
type countingLedger struct {
	*ledgertest.Fake
	afterCount func(shard int)
}

func (c *countingLedger) DoneCount(ctx context.Context, run string, shard int) (int64, error) {
	n, err := c.Fake.DoneCount(ctx, run, shard)
	if c.afterCount != nil {
		c.afterCount(shard)
	}
	return n, err
}

// finishedRun records a planned synthetic run of n partitions in the striped layout, every
// result and done record in but those of the partitions in skip, and returns a worker over it.
func finishedRun(t *testing.T, store *countingLedger, run string, n int, skip ...int) *work.Worker {
	t.Helper()
	ctx := context.Background()
	params, _ := json.Marshal(synthetic.Params{Partitions: n})
	m := &ledger.Manifest{RunID: run, Trigger: ledger.TriggerManual, Epoch: 1, Segments: []ledger.Segment{{Epoch: 1}},
		Job: synthetic.Name, Params: params, State: ledger.StateRunning, Partitions: n, PlanDone: true, BatchSize: n,
		Checkpoint: ledger.Checkpoint{Batches: 1, Next: n}, DoneLayout: ledger.DoneStriped}
	if err := store.CreateManifest(ctx, m); err != nil {
		t.Fatal(err)
	}
	skipped := map[int]bool{}
	for _, i := range skip {
		skipped[i] = true
	}
	for i := range n {
		if !skipped[i] {
			recordDone(t, store, run, i)
		}
	}
	jobs := work.NewRegistry()
	jobs.Register(synthetic.Name, enginejob.Of(synthetic.New()))
	w, err := work.NewWorker(work.WorkerConfig{Store: store, Jobs: jobs, Holder: ledger.Holder{App: "t", Instance: "i", PID: 1}, MaxDeliveries: 5})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// recordDone writes partition i's result and its done record, as a worker does.
func recordDone(t *testing.T, store *countingLedger, run string, i int) {
	t.Helper()
	ctx := context.Background()
	r := ledger.Result{Run: run, Index: i, Epoch: 1, OK: true, Attempts: 1, Output: fmt.Appendf(nil, `{"i":%d,"v":%d}`, i, i*i)}
	if err := store.PutResult(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := store.AppendDone(ctx, run, ledger.DoneStriped, 1, i); err != nil {
		t.Fatal(err)
	}
}

// A finish asked for while another call in the process is reading the counts is handed to that
// call, which tries again when it did not finish: here the last partition's record lands just
// after the running call read its shard, and the run still finishes.
func TestTryFinish_CallDuringAnAttemptIsHandedToIt(t *testing.T) {
	const n = 2 * ledger.DoneUnit
	last := n - 1 // in shard 1
	store := &countingLedger{Fake: ledgertest.NewFake(ledgertest.Options{})}
	w := finishedRun(t, store, "handed", n, last)
	var once sync.Once
	var handed struct {
		done bool
		err  error
	}
	store.afterCount = func(shard int) {
		if shard != 1 {
			return
		}
		once.Do(func() {
			// The running call has read shard 1 one record short. The last partition's
			// worker records it now and asks for the finish.
			recordDone(t, store, "handed", last)
			handed.done, handed.err = w.TryFinish(context.Background(), "handed")
		})
	}
	done, err := w.TryFinish(context.Background(), "handed")
	if handed.done || handed.err != nil {
		t.Errorf("the call made during the attempt = %v, %v; want false, nil (handed over)", handed.done, handed.err)
	}
	if !done || err != nil {
		t.Fatalf("the running call = %v, %v; want true, nil: it must try again for the call handed to it", done, err)
	}
	if rep, _, err := store.ReadReport(context.Background(), "handed"); err != nil || rep.State != ledger.StateSucceeded || rep.Succeeded != n {
		t.Errorf("report %s, %d succeeded (%v); want succeeded, %d", rep.State, rep.Succeeded, err, n)
	}
}

// Many calls at once in one process (the shards' last appends at the end of a striped run)
// make one attempt between them, and it finishes the run.
func TestTryFinish_ConcurrentCallsInOneProcessCoalesce(t *testing.T) {
	const n, callers = 4 * ledger.DoneUnit, 16
	store := &countingLedger{Fake: ledgertest.NewFake(ledgertest.Options{})}
	w := finishedRun(t, store, "many", n)
	returned := make(chan struct{}, callers)
	var counts atomic.Int64
	var hold sync.Once
	store.afterCount = func(int) {
		counts.Add(1)
		// Hold the first attempt in its counts until every other caller has come and gone.
		hold.Do(func() {
			deadline := time.After(time.Minute)
			for range callers - 1 {
				select {
				case <-returned:
				case <-deadline:
					t.Error("the other callers did not return while an attempt ran")
					return
				}
			}
		})
	}
	var won atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			done, err := w.TryFinish(context.Background(), "many")
			if err != nil {
				t.Errorf("TryFinish: %v", err)
			}
			if done {
				won.Add(1)
			}
			returned <- struct{}{}
		})
	}
	wg.Wait()
	if won.Load() != 1 {
		t.Errorf("%d callers finished the run, want 1", won.Load())
	}
	// One attempt reads each of the 4 shards' counts once; without the gate every caller would.
	if shards := int64(ledger.DoneStriped.Shards(n)); counts.Load() != shards {
		t.Errorf("%d done-count reads, want %d (one attempt for %d callers)", counts.Load(), shards, callers)
	}
	if rep, _, err := store.ReadReport(context.Background(), "many"); err != nil || rep.State != ledger.StateSucceeded {
		t.Errorf("report %s (%v); want succeeded", rep.State, err)
	}
}

// The finish reads the done shards' counts several at a time, so the report of a striped run
// waits for two rounds of HEADs, not sixteen.
func TestTryFinish_ReadsTheShardsCountsTogether(t *testing.T) {
	const n = ledger.DoneStripes * ledger.DoneUnit
	store := &countingLedger{Fake: ledgertest.NewFake(ledgertest.Options{})}
	w := finishedRun(t, store, "wide", n)
	const together = 8
	wait, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var (
		mu      sync.Mutex
		waiting int
		all     = make(chan struct{})
		opened  bool
	)
	store.afterCount = func(int) {
		mu.Lock()
		waiting++
		if waiting == together && !opened {
			opened = true
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-wait.Done():
			t.Errorf("a done count waited alone: the counts are not read %d at a time", together)
		}
	}
	if done, err := w.TryFinish(context.Background(), "wide"); !done || err != nil {
		t.Fatalf("TryFinish = %v, %v; want true, nil", done, err)
	}
}

// countReads counts DoneCount calls on a countingLedger.
func countReads(store *countingLedger) *atomic.Int64 {
	var n atomic.Int64
	store.afterCount = func(int) { n.Add(1) }
	return &n
}

// A striped run's shards complete one after another towards its end; each append that
// completes one asks for a finish. Those before the last read the run's last shard alone (one
// HEAD: still short), and a process learns the shards its own appends completed from their
// counts, so the whole run's finishing costs about one HEAD per shard, not a round of counts
// per shard.
func TestFinish_ShardsCompletingEarlyCostOneCountEach(t *testing.T) {
	const units = 2 * ledger.DoneStripes // every shard records two bundles
	const n = units * ledger.DoneUnit
	store := &countingLedger{Fake: ledgertest.NewFake(ledgertest.Options{})}
	skip := make([]int, n)
	for i := range skip {
		skip[i] = i
	}
	w := finishedRun(t, store, "striped", n, skip...) // planned, nothing done
	reads := countReads(store)
	ctx := context.Background()
	for u := range units {
		env := blockBundle("striped", u*ledger.DoneUnit, ledger.DoneUnit, ledger.DoneUnit)
		if err := w.HandlePartition(ctx, env, work.Delivery{MessageID: env.MessageID(), Count: 1}); err != nil {
			t.Fatalf("bundle %d: %v", u, err)
		}
	}
	m, err := store.ReadManifest(ctx, "striped")
	if err != nil || m.State != ledger.StateSucceeded {
		t.Fatalf("run %s (%v); want succeeded", m.State, err)
	}
	// The first 15 shard completions read the last shard once each; the last completion
	// knows every shard complete from its own appends.
	if got, want := reads.Load(), int64(ledger.DoneStripes-1); got != want {
		t.Errorf("%d done counts read over the run's finish attempts, want %d (one per shard completed before the last)", got, want)
	}
}
