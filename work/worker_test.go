package work_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/ledgertest"
	"github.com/batonfn/baton/work"
	"github.com/batonfn/baton/work/synthetic"
)

// checkSucceeded asserts a run of n partitions finished succeeded with the right aggregate,
// exactly one result per partition and exactly one aggregation.
func checkSucceeded(t *testing.T, f *fixture, run string, n int) {
	t.Helper()
	m := f.manifest(run)
	if m.State != ledger.StateSucceeded || m.Succeeded != n || m.Failed != 0 || m.Finished.IsZero() {
		t.Errorf("manifest: state %s, succeeded %d, failed %d, finished %v; want succeeded, %d, 0, a time",
			m.State, m.Succeeded, m.Failed, m.Finished, n)
	}
	rep, sum := f.report(run)
	if rep.State != ledger.StateSucceeded || rep.Succeeded != n || rep.Failed != 0 || rep.Partitions != n {
		t.Errorf("report: state %s, %d/%d succeeded, %d failed; want succeeded, %d/%d, 0", rep.State, rep.Succeeded, rep.Partitions, rep.Failed, n, n)
	}
	if sum.OK != n || sum.SumV != sumSquares(n) {
		t.Errorf("aggregate: ok %d, sumV %d; want %d, %d", sum.OK, sum.SumV, n, sumSquares(n))
	}
	if got := f.results(run); len(got) != n || !slices.Equal(got, seq(n)) {
		t.Errorf("results: %d listed, want exactly one for each of 0..%d", len(got), n-1)
	}
	if got := f.job.aggregateCalls.Load(); got != 1 {
		t.Errorf("Aggregate ran %d times, want exactly once", got)
	}
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

func TestWorker_ConcurrentWorkersWithDuplicateDeliveries(t *testing.T) {
	const n, workers = 1000, 8
	f := newFixture(t)
	f.createRun("dups", synthetic.Params{Partitions: n, WorkMs: 1})

	// Every partition once; 20% get a second delivery: half race the original (adjacent in
	// the queue, first-delivery count, so both process), half arrive later as redeliveries.
	type delivery struct{ part, count int }
	rng := rand.New(rand.NewPCG(9, 9))
	var units [][]delivery
	racing, later := 0, 0
	for i := range n {
		switch r := rng.IntN(10); {
		case r == 0:
			units = append(units, []delivery{{i, 1}, {i, 1}})
			racing++
		case r == 1:
			units = append(units, []delivery{{i, 1}}, []delivery{{i, 2}})
			later++
		default:
			units = append(units, []delivery{{i, 1}})
		}
	}
	rng.Shuffle(len(units), func(a, b int) { units[a], units[b] = units[b], units[a] })
	queue := make(chan delivery, n*2)
	for _, u := range units {
		for _, d := range u {
			queue <- d
		}
	}
	close(queue)

	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for d := range queue {
				if err := f.deliver("dups", d.part, d.count); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Errorf("delivery failed: %v", err)
	}
	t.Logf("%d partitions, %d racing duplicates, %d later redeliveries; Process ran %d times; %d duplicates lost the create race",
		n, racing, later, f.job.processCalls.Load(), f.logs.count("duplicate delivery: another delivery recorded the result first"))
	checkSucceeded(t, f, "dups", n)
	if c, err := f.doneRecords("dups"); err != nil || c < n || c > int64(n+racing+later) {
		t.Errorf("done records %d (%v), want between %d and %d", c, err, n, n+racing+later)
	}
	// The coordinator's later check finds the run finished and does not aggregate again.
	if done, err := f.w.TryFinish(f.ctx, "dups"); done || err != nil {
		t.Errorf("TryFinish after the finish = %v, %v; want false, nil", done, err)
	}
	if got := f.job.aggregateCalls.Load(); got != 1 {
		t.Errorf("Aggregate ran %d times, want 1", got)
	}
}

func TestWorker_LastTwoPartitionsAtTheSameInstant(t *testing.T) {
	const n = 10
	f := newFixture(t)
	f.createRun("lasttwo", synthetic.Params{Partitions: n})
	// Partition 0 is recorded twice, so both last appends see an ordinal >= n and both try to
	// finish: the report claim alone must keep the aggregation to one.
	for i := range n - 2 {
		f.mustDeliver("lasttwo", i, 1)
	}
	f.mustDeliver("lasttwo", 0, 2)
	f.noReport("lasttwo")

	var arrived sync.WaitGroup
	arrived.Add(2)
	f.job.beforeProcess = func(ctx context.Context, p work.Partition) error {
		if p.Index >= n-2 {
			arrived.Done()
			arrived.Wait() // both are inside Process; both return together
		}
		return nil
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for k := range 2 {
		wg.Go(func() { errs[k] = f.deliver("lasttwo", n-2+k, 1) })
	}
	wg.Wait()
	for k, err := range errs {
		if err != nil {
			t.Errorf("partition %d: %v", n-2+k, err)
		}
	}
	checkSucceeded(t, f, "lasttwo", n)
}

func TestWorker_PartitionFailingEveryDelivery(t *testing.T) {
	const n, bad = 6, 3
	f := newFixture(t)
	f.createRun("poison", synthetic.Params{Partitions: n, FailAlways: []int{bad}})
	for i := range n {
		if i != bad {
			f.mustDeliver("poison", i, 1)
		}
	}
	for count := 1; count < f.w.MaxDeliveries(); count++ {
		err := f.deliver("poison", bad, count)
		if err == nil || errors.Is(err, work.ErrGaveUp) || errors.Is(err, work.ErrMalformed) {
			t.Fatalf("delivery %d: got %v, want a transient error (retry)", count, err)
		}
		if got := f.results("poison"); slices.Contains(got, bad) {
			t.Fatalf("delivery %d recorded a result before the last delivery", count)
		}
	}
	err := f.deliver("poison", bad, f.w.MaxDeliveries())
	if !errors.Is(err, work.ErrGaveUp) {
		t.Fatalf("last delivery: got %v, want ErrGaveUp (the invocation fails; the message dead-letters)", err)
	}
	r, err := f.store.ReadResult(f.ctx, "poison", bad)
	if err != nil {
		t.Fatalf("failure result: %v", err)
	}
	if r.OK || r.Attempts != f.w.MaxDeliveries() || !strings.Contains(r.Error, "always fails") {
		t.Errorf("failure result %+v: want ok=false, attempts %d, the job's error", r, f.w.MaxDeliveries())
	}
	m := f.manifest("poison")
	if m.State != ledger.StatePartial || m.Succeeded != n-1 || m.Failed != 1 {
		t.Errorf("manifest: %s, %d succeeded, %d failed; want partial, %d, 1", m.State, m.Succeeded, m.Failed, n-1)
	}
	rep, sum := f.report("poison")
	if rep.State != ledger.StatePartial || len(rep.FailedList) != 1 || rep.FailedList[0].Index != bad ||
		!strings.Contains(rep.FailedList[0].Error, "always fails") {
		t.Errorf("report: %s, failed list %+v; want partial listing partition %d with its error", rep.State, rep.FailedList, bad)
	}
	if sum.OK != n-1 || sum.Failed != 1 || sum.SumV != sumSquares(n, bad) {
		t.Errorf("aggregate %+v: want ok %d, failed 1, sumV %d", sum, n-1, sumSquares(n, bad))
	}
}

func TestWorker_PermanentFailureSkipsRetries(t *testing.T) {
	const n = 3
	f := newFixture(t)
	f.createRun("perm", synthetic.Params{Partitions: n, Permanent: []int{0, 1, 2}})
	for i := range n {
		if err := f.deliver("perm", i, 1); err != nil {
			t.Fatalf("partition %d: got %v, want nil (recorded, no retry)", i, err)
		}
		r, err := f.store.ReadResult(f.ctx, "perm", i)
		if err != nil || r.OK || r.Attempts != 1 || !strings.Contains(r.Error, "permanent") {
			t.Errorf("result %d: %+v, %v; want a failure recorded on the first delivery", i, r, err)
		}
	}
	// Every partition failed: the run failed.
	if m := f.manifest("perm"); m.State != ledger.StateFailed || m.Failed != n {
		t.Errorf("manifest %s with %d failed, want failed with %d", m.State, m.Failed, n)
	}
}

func TestWorker_FailOnceThenSucceed(t *testing.T) {
	const n, percent = 40, 30
	f := newFixture(t)
	f.createRun("flaky", synthetic.Params{Partitions: n, FailOncePercent: percent})
	want := 0
	for i := range n {
		if synthetic.FailsOnce(i, percent) {
			want++
		}
		// Deliver as the host would: again, with a higher count, until it succeeds.
		for count := 1; ; count++ {
			err := f.deliver("flaky", i, count)
			if err == nil {
				break
			}
			if count >= f.w.MaxDeliveries() {
				t.Fatalf("partition %d still failing at delivery %d: %v", i, count, err)
			}
		}
	}
	checkSucceeded(t, f, "flaky", n)
	if _, sum := f.report("flaky"); sum.Retried != want || want == 0 {
		t.Errorf("aggregate retried %d, want %d (FailsOnce at %d%%) and more than 0", sum.Retried, want, percent)
	}
}

func TestWorker_StaleAndMalformedMessages(t *testing.T) {
	f := newFixture(t)
	f.createRun("known", synthetic.Params{Partitions: 5}, func(m *ledger.Manifest) {
		m.Epoch = 3
		m.Segments = []ledger.Segment{{Epoch: 1, From: 0}, {Epoch: 3, From: 3}}
	})
	f.createRun("nojob", synthetic.Params{Partitions: 5}, func(m *ledger.Manifest) { m.Job = "nope" })
	f.createRun("over", synthetic.Params{Partitions: 5}, func(m *ledger.Manifest) { m.State = ledger.StateTimedOut })

	withEpoch := func(e work.Envelope, epoch int64) work.Envelope { e.Epoch = epoch; return e }
	for _, tc := range []struct {
		name      string
		env       work.Envelope
		malformed bool
	}{
		{"unknown run", envelope("ghost", 0, 1), true},
		{"index out of range", envelope("known", 5, 3), true},
		{"unknown job", envelope("nojob", 0, 1), true},
		{"check message", work.Envelope{Version: 1, Kind: work.KindCheck, Run: "known", Epoch: 3}, true},
		{"invalid envelope", withEpoch(envelope("known", 0, 1), 0), true},
		{"epoch older than the takeover segment", envelope("known", 3, 1), false},
		{"epoch older than the segment, last index", envelope("known", 4, 2), false},
		{"run already final", envelope("over", 0, 1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := f.w.HandlePartition(f.ctx, tc.env, work.Delivery{MessageID: "m", Count: 1})
			switch {
			case tc.malformed && !errors.Is(err, work.ErrMalformed):
				t.Errorf("got %v, want ErrMalformed (dead-letter)", err)
			case !tc.malformed && err != nil:
				t.Errorf("got %v, want nil (dropped)", err)
			}
			if got := f.results(tc.env.Run); len(got) != 0 {
				t.Errorf("results written: %v, want none", got)
			}
		})
	}
	if got := f.job.processCalls.Load(); got != 0 {
		t.Errorf("Process ran %d times for dropped messages, want 0", got)
	}
	if got := f.logs.count("stale partition message dropped"); got != 2 {
		t.Errorf("%d stale log lines, want 2", got)
	}
	// Control: a message current for its segment (index 2 is still epoch 1's) is processed.
	if err := f.w.HandlePartition(f.ctx, envelope("known", 2, 1), work.Delivery{Count: 1}); err != nil {
		t.Fatal(err)
	}
	if got := f.results("known"); !slices.Equal(got, []int{2}) {
		t.Errorf("results %v after a current message, want [2]", got)
	}
}

func TestWorker_CrashBetweenResultAndDoneAppend(t *testing.T) {
	for _, tc := range []struct {
		name        string
		count       int
		wantProcess int64
	}{
		{"redelivery finds the result", 2, 0},
		{"fresh copy loses the create race", 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n, crashed = 4, 2
			f := newFixture(t)
			f.createRun("crash", synthetic.Params{Partitions: n})
			// The crashed worker wrote the result and died before appending its done record.
			if err := f.store.PutResult(f.ctx, ledger.Result{Run: "crash", Index: crashed, Epoch: 1, OK: true,
				Output: []byte(`{"i":2,"v":4}`), Attempts: 1}); err != nil {
				t.Fatal(err)
			}
			for i := range n {
				if i != crashed {
					f.mustDeliver("crash", i, 1)
				}
			}
			if done, err := f.w.TryFinish(f.ctx, "crash"); done || err != nil {
				t.Fatalf("TryFinish with a done record missing = %v, %v; want false, nil", done, err)
			}
			f.noReport("crash")
			before := f.job.processCalls.Load()
			f.mustDeliver("crash", crashed, tc.count)
			if got := f.job.processCalls.Load() - before; got != tc.wantProcess {
				t.Errorf("Process ran %d times on the redelivery, want %d", got, tc.wantProcess)
			}
			checkSucceeded(t, f, "crash", n)
		})
	}
}

func TestWorker_PlanningFinishesAfterTheLastResult(t *testing.T) {
	const n = 5
	f := newFixture(t)
	notPlanned := func(m *ledger.Manifest) {
		m.PlanDone, m.Partitions, m.State = false, 0, ledger.StateEnqueuing
	}
	f.createRun("slowplan", synthetic.Params{Partitions: n}, notPlanned)
	for i := range n {
		f.mustDeliver("slowplan", i, 1)
	}
	f.noReport("slowplan")
	if done, err := f.w.TryFinish(f.ctx, "slowplan"); done || err != nil {
		t.Fatalf("TryFinish before PlanDone = %v, %v; want false, nil", done, err)
	}
	// The leader's path: planning completes, then it tries to finish.
	if _, err := f.store.UpdateManifest(f.ctx, "slowplan", 1, func(m *ledger.Manifest) error {
		m.PlanDone, m.Partitions, m.State = true, n, ledger.StateRunning
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if done, err := f.w.TryFinish(f.ctx, "slowplan"); !done || err != nil {
		t.Fatalf("TryFinish after PlanDone = %v, %v; want true, nil", done, err)
	}
	checkSucceeded(t, f, "slowplan", n)
}

// The last worker read the manifest while planning ran; the leader then finished planning and
// its TryFinish ran before the worker's append. A worker whose copy is older than
// PlanningCopyTTL by then reads it again and finishes the run; one whose copy is younger
// leaves the finish to the leader's second try (coordinator: finishAfterPlanning), unless its
// message carries the run's partition count (the last plan batch's do) or an earlier message
// to the same process did.
func TestWorker_PlanDoneBetweenManifestReadAndAppend(t *testing.T) {
	for _, tc := range []struct {
		name     string
		age      time.Duration // of the worker's copy when its append may complete the run
		parts    int           // the last message's Parts
		taught   int           // the first message's Parts
		finishes bool
	}{
		{"copy older than PlanningCopyTTL: read again, finished", work.PlanningCopyTTL, 0, 0, true},
		{"copy younger: left to the leader", work.PlanningCopyTTL - time.Millisecond, 0, 0, false},
		{"copy younger, the message carries the count: finished", work.PlanningCopyTTL - time.Millisecond, 5, 0, true},
		{"copy younger, an earlier message carried the count: finished", work.PlanningCopyTTL - time.Millisecond, 0, 5, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 5
			f := newFixture(t)
			now := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
			f.setClock(now)
			f.createRun("race", synthetic.Params{Partitions: n}, func(m *ledger.Manifest) {
				m.PlanDone, m.Partitions, m.State, m.Checkpoint.Next = false, 0, ledger.StateEnqueuing, n-1
			})
			first := envelope("race", 0, 1)
			first.Parts = tc.taught
			if err := f.w.HandlePartition(f.ctx, first, work.Delivery{MessageID: first.MessageID(), Count: 1}); err != nil {
				t.Fatal(err)
			}
			for i := 1; i < n-1; i++ {
				f.mustDeliver("race", i, 1)
			}
			f.job.beforeProcess = func(ctx context.Context, p work.Partition) error {
				if p.Index != n-1 {
					return nil
				}
				if _, err := f.store.UpdateManifest(ctx, "race", 1, func(m *ledger.Manifest) error {
					m.PlanDone, m.Partitions, m.State = true, n, ledger.StateRunning
					return nil
				}); err != nil {
					return err
				}
				done, err := f.w.TryFinish(ctx, "race")
				if done || err != nil {
					t.Errorf("leader's TryFinish = %v, %v; want false, nil (the last result is not in)", done, err)
				}
				f.setClock(now.Add(tc.age)) // the copy was read at now, by the first delivery
				return nil
			}
			last := envelope("race", n-1, 1)
			last.Parts = tc.parts
			if err := f.w.HandlePartition(f.ctx, last, work.Delivery{MessageID: last.MessageID(), Count: 1}); err != nil {
				t.Fatal(err)
			}
			if !tc.finishes {
				f.noReport("race")
				// The leader's second try, finishGrace after its first.
				if done, err := f.w.TryFinish(f.ctx, "race"); !done || err != nil {
					t.Fatalf("leader's second TryFinish = %v, %v; want true, nil", done, err)
				}
			}
			checkSucceeded(t, f, "race", n)
		})
	}
}

func TestWorker_PanickingJobFailsTheInvocation(t *testing.T) {
	f := newFixture(t)
	f.createRun("panic", synthetic.Params{Partitions: 1})
	f.job.beforeProcess = func(context.Context, work.Partition) error { panic("job bug") }
	if err := f.deliver("panic", 0, 1); err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Fatalf("first delivery: got %v, want an error naming the panic", err)
	}
	if err := f.deliver("panic", 0, f.w.MaxDeliveries()); !errors.Is(err, work.ErrGaveUp) {
		t.Fatalf("last delivery: got %v, want ErrGaveUp", err)
	}
	if r, err := f.store.ReadResult(f.ctx, "panic", 0); err != nil || r.OK || !strings.Contains(r.Error, "job bug") {
		t.Errorf("result %+v, %v; want the panic recorded as the failure", r, err)
	}
	if m := f.manifest("panic"); m.State != ledger.StateFailed {
		t.Errorf("state %s, want failed", m.State)
	}
}

func TestWorker_HappyPathStorageCalls(t *testing.T) {
	const n = 20
	f := newFixture(t)
	f.createRun("calls", synthetic.Params{Partitions: n})
	per := make([]int64, n)
	for i := range n {
		before := f.calls.n.Load()
		f.mustDeliver("calls", i, 1)
		per[i] = f.calls.n.Load() - before
	}
	t.Logf("storage calls per partition: %v", per)
	// The first partition also creates the done shard (a failed append and a create); the
	// last one also finishes the run.
	for i := 1; i < n-1; i++ {
		if per[i] > 3 {
			t.Errorf("partition %d made %d storage calls, want at most 3 (manifest, result, done)", i, per[i])
		}
	}
	if per[0] > 5 {
		t.Errorf("first partition made %d calls, want at most 5 (3 + the shard's create)", per[0])
	}
	checkSucceeded(t, f, "calls", n)
}

// invocationDeadline is the deadline of the invocations that run out of time below: the
// delivery reads the run's manifest from Azurite before the part under test, and on a loaded
// machine a read under -race may take a good part of a second.
const invocationDeadline = 2 * time.Second

func TestWorker_LastDeliveryPastTheDeadlineStillRecordsTheFailure(t *testing.T) {
	f := newFixture(t)
	f.createRun("slow", synthetic.Params{Partitions: 2, WorkMs: 600_000})
	deliver := func(count int) error {
		ctx, cancel := context.WithTimeout(f.ctx, invocationDeadline)
		defer cancel()
		env := envelope("slow", 0, 1)
		return f.w.HandlePartition(ctx, env, work.Delivery{MessageID: env.MessageID(), Count: count})
	}
	if err := deliver(1); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, work.ErrGaveUp) {
		t.Fatalf("first delivery: got %v, want the deadline (a retry)", err)
	}
	if got := f.results("slow"); len(got) != 0 {
		t.Fatalf("results %v after a retryable failure, want none", got)
	}
	if err := deliver(f.w.MaxDeliveries()); !errors.Is(err, work.ErrGaveUp) {
		t.Fatalf("last delivery: got %v, want ErrGaveUp", err)
	}
	r, err := f.store.ReadResult(f.ctx, "slow", 0)
	if err != nil || r.OK || !strings.Contains(r.Error, "deadline") {
		t.Fatalf("result %+v, %v; want the deadline recorded as the failure", r, err)
	}
	if c, err := f.store.DoneCount(f.ctx, "slow", 0); c != 1 || err != nil {
		t.Errorf("done records %d, %v; want 1 (recorded on a context detached from the expired one)", c, err)
	}
}

// NewWorker refuses a config it cannot work with, naming what is wrong.
func TestNewWorker_Validates(t *testing.T) {
	if _, err := work.NewWorker(work.WorkerConfig{Jobs: work.NewRegistry()}); err == nil || !strings.Contains(err.Error(), "store") {
		t.Errorf("no store: %v", err)
	}
	f := newFixture(t)
	if _, err := work.NewWorker(work.WorkerConfig{Store: f.store, Jobs: work.NewRegistry(), MaxDeliveries: -1}); err == nil {
		t.Error("negative MaxDeliveries accepted")
	}
	if _, err := work.NewWorker(work.WorkerConfig{Store: f.store, Jobs: work.NewRegistry()}); err == nil || !strings.Contains(err.Error(), "MaxDeliveries") {
		t.Errorf("no MaxDeliveries: %v, want an error naming it", err)
	}
	w, err := work.NewWorker(work.WorkerConfig{Store: f.store, Jobs: work.NewRegistry(), MaxDeliveries: 4})
	if err != nil || w.MaxDeliveries() != 4 {
		t.Errorf("valid config: %v, MaxDeliveries %d", err, w.MaxDeliveries())
	}
}

// A last delivery whose invocation deadline passes while it checks for a recorded result still
// records the failure: the check is part of recording and runs on the recording context (on a
// loaded Azurite that read outlasted the invocation's deadline and the delivery failed with it).
func TestWorker_LastDeliveryDeadlineDuringTheResultCheck(t *testing.T) {
	f := newFixture(t)
	f.createRun("slowcheck", synthetic.Params{Partitions: 2, WorkMs: 600_000})
	inv, cancel := context.WithTimeout(f.ctx, invocationDeadline)
	defer cancel()
	cfg := f.cfg
	cfg.Store = &ledgertest.Faulty{Store: f.store, Decide: func(op, name string) ledgertest.Fault {
		if op == "ReadResult" {
			<-inv.Done() // the read goes out after the invocation's deadline
		}
		return ledgertest.Pass
	}}
	w := f.newWorker(cfg)
	env := envelope("slowcheck", 0, 1)
	if err := w.HandlePartition(inv, env, work.Delivery{MessageID: env.MessageID(), Count: w.MaxDeliveries()}); !errors.Is(err, work.ErrGaveUp) {
		t.Fatalf("last delivery: got %v, want ErrGaveUp", err)
	}
	if r, err := f.store.ReadResult(f.ctx, "slowcheck", 0); err != nil || r.OK || !strings.Contains(r.Error, "deadline") {
		t.Fatalf("result %+v, %v; want the deadline recorded as the failure", r, err)
	}
}
