package work_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/enginejob"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/ledgertest"
	"github.com/batonfn/baton/internal/engine/transport/transporttest"
	"github.com/batonfn/baton/work"
	"github.com/batonfn/baton/work/synthetic"
)

// bundleEnv is a worker over the ledger fake, with the synthetic job (a Merger), a retry
// sender, and a count of each store operation.
type bundleEnv struct {
	t      *testing.T
	ctx    context.Context
	fake   *ledgertest.Fake
	sender *transporttest.Recorder
	w      *work.Worker
	mu     sync.Mutex
	ops    map[string]int
	cfg    work.WorkerConfig // the worker's, for another
}

// newBundleEnv builds the env; tweaks adjust the worker's config last.
func newBundleEnv(t *testing.T, retries bool, tweaks ...func(*work.WorkerConfig)) *bundleEnv {
	e := &bundleEnv{t: t, ctx: context.Background(), fake: ledgertest.NewFake(ledgertest.Options{}),
		sender: &transporttest.Recorder{}, ops: map[string]int{}}
	store := &ledgertest.Faulty{Store: e.fake, Decide: func(op, name string) ledgertest.Fault {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.ops[op]++
		return ledgertest.Pass
	}}
	jobs := work.NewRegistry()
	jobs.Register(synthetic.Name, enginejob.Of(synthetic.New()))
	cfg := work.WorkerConfig{Store: store, Jobs: jobs, Holder: ledger.Holder{App: "t", Instance: "i", PID: 1}, MaxDeliveries: 5}
	if retries {
		cfg.Retries = e.sender
	}
	for _, tweak := range tweaks {
		tweak(&cfg)
	}
	e.cfg = cfg
	e.w = e.another()
	return e
}

// another is a new worker over the env's store and config: another process.
func (e *bundleEnv) another() *work.Worker {
	e.t.Helper()
	w, err := work.NewWorker(e.cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return w
}

// run records a planned synthetic run of n partitions folding into 4 partials in blocks of 8.
func (e *bundleEnv) run(id string, p synthetic.Params, mutate ...func(*ledger.Manifest)) {
	e.t.Helper()
	params, _ := json.Marshal(p)
	m := &ledger.Manifest{RunID: id, Trigger: ledger.TriggerManual, Epoch: 1, Segments: []ledger.Segment{{Epoch: 1}},
		Job: synthetic.Name, Params: params, State: ledger.StateRunning, Partitions: p.Partitions, PlanDone: true,
		BatchSize: 100, Checkpoint: ledger.Checkpoint{Batches: 1, Next: p.Partitions}, FoldShards: 4, FoldBlock: 8, DoneLayout: ledger.DoneStriped,
		Deadline: time.Now().Add(time.Hour), Expires: time.Now().Add(2 * time.Hour)}
	for _, fn := range mutate {
		fn(m)
	}
	if err := e.fake.CreateManifest(e.ctx, m); err != nil {
		e.t.Fatal(err)
	}
}

// bundle is the message of partitions first..first+count-1 of run, epoch 1.
func bundle(run string, first, count int) work.Envelope {
	env := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindPartition, Run: run, Epoch: 1, Part: first, Count: count}
	for i := first; i < first+count; i++ {
		env.Payloads = append(env.Payloads, json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)))
	}
	return env
}

func (e *bundleEnv) deliver(env work.Envelope, count int) error {
	return e.w.HandlePartition(e.ctx, env, work.Delivery{MessageID: env.MessageID(), Count: count})
}

// counting returns the store operations fn made.
func (e *bundleEnv) counting(fn func()) map[string]int {
	e.mu.Lock()
	e.ops = map[string]int{}
	e.mu.Unlock()
	fn()
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ops
}

func (e *bundleEnv) results(run string) []int {
	var got []int
	if err := e.fake.ListResults(e.ctx, run, func(r ledger.ResultRef) error { got = append(got, r.Index); return nil }); err != nil {
		e.t.Fatal(err)
	}
	return got
}

// A bundle appends its done records to the shard the run's layout names: striped, the 16
// consecutive bundles of 256 that a wave finishes together go to 16 different blobs; in the
// blocks layout of runs created before stripes, all to one. Both finish.
func TestWorker_BundlesAppendToTheirRunsDoneLayout(t *testing.T) {
	const n = ledger.DoneStripes * ledger.DoneUnit
	for _, lay := range []ledger.DoneLayout{ledger.DoneStriped, ledger.DoneBlocks} {
		t.Run(lay.String(), func(t *testing.T) {
			e := newBundleEnv(t, true)
			e.run("lay", synthetic.Params{Partitions: n}, func(m *ledger.Manifest) { m.DoneLayout = lay })
			for first := n - ledger.DoneUnit; first >= 0; first -= ledger.DoneUnit {
				if err := e.deliver(bundle("lay", first, ledger.DoneUnit), 1); err != nil {
					t.Fatalf("bundle at %d: %v", first, err)
				}
			}
			if rep, _, err := e.fake.ReadReport(e.ctx, "lay"); err != nil || rep.State != ledger.StateSucceeded || rep.Succeeded != n {
				t.Fatalf("report %s, %d succeeded (%v); want succeeded, %d", rep.State, rep.Succeeded, err, n)
			}
			shards := 0
			for s := range ledger.DoneStripes + 1 {
				idx, err := e.fake.ReadDone(e.ctx, "lay", s)
				if err != nil {
					t.Fatal(err)
				}
				if len(idx) > 0 {
					shards++
				}
				for _, i := range idx {
					if lay.Shard(i) != s {
						t.Fatalf("shard %d holds partition %d, which the %s layout gives shard %d", s, i, lay, lay.Shard(i))
					}
				}
			}
			if want := lay.Shards(n); shards != want {
				t.Errorf("records in %d shards, want %d", shards, want)
			}
		})
	}
}

// A run whose manifest names a done layout this version does not know (a newer version created
// it) still gets its results; no done record is appended, and the listing finishes it.
func TestWorker_UnknownDoneLayoutLeavesTheFinishToTheListing(t *testing.T) {
	e := newBundleEnv(t, true)
	e.run("future", synthetic.Params{Partitions: 16}, func(m *ledger.Manifest) { m.DoneLayout = 9 })
	ops := e.counting(func() {
		for first := 0; first < 16; first += 8 {
			if err := e.deliver(bundle("future", first, 8), 1); err != nil {
				t.Fatalf("bundle at %d: %v", first, err)
			}
		}
	})
	if ops["AppendDone"] != 0 || ops["PutResult"] != 16 {
		t.Errorf("store calls %v; want 16 results and no append", ops)
	}
	if got := e.results("future"); len(got) != 16 {
		t.Fatalf("%d results, want 16", len(got))
	}
	if done, err := e.w.TryFinish(e.ctx, "future"); done || err != nil {
		t.Errorf("TryFinish (counts first) = %v, %v; want false, nil: the counts cannot be read", done, err)
	}
	if done, err := e.w.TryFinishByListing(e.ctx, "future"); !done || err != nil {
		t.Errorf("TryFinishByListing = %v, %v; want true, nil", done, err)
	}
}

func TestWorker_BundleCostsOneAppendAndOneFoldForAllItsPartitions(t *testing.T) {
	e := newBundleEnv(t, true)
	e.run("b", synthetic.Params{Partitions: 24})
	// Bundles of 8 aligned on the fold block: each updates one partial, which, as its first
	// block, it creates without reading.
	for first := 0; first < 16; first += 8 {
		ops := e.counting(func() {
			if err := e.deliver(bundle("b", first, 8), 1); err != nil {
				t.Fatalf("bundle at %d: %v", first, err)
			}
		})
		if ops["PutResult"] != 8 || ops["AppendDone"] != 1 || ops["ReadPartial"] != 0 || ops["WritePartial"] != 1 || ops["ReadManifest"] > 1 {
			t.Errorf("bundle at %d: store calls %v; want 8 results, 1 append, 1 partial write and no read, at most 1 manifest read", first, ops)
		}
	}
	for i := 16; i < 24; i++ {
		env := bundle("b", i, 1)
		env.Count, env.Payload, env.Payloads = 0, env.Payloads[0], nil
		if err := e.deliver(env, 1); err != nil {
			t.Fatal(err)
		}
	}
	rep, _, err := e.fake.ReadReport(e.ctx, "b")
	if err != nil {
		t.Fatalf("report: %v", err)
	}
	var s synthetic.Summary
	if err := json.Unmarshal(rep.Aggregate, &s); err != nil {
		t.Fatal(err)
	}
	if rep.State != ledger.StateSucceeded || rep.Succeeded != 24 || s.OK != 24 || s.SumV != sumSquares(24) {
		t.Errorf("report %s with %d succeeded, summary %+v; want succeeded, 24, sumV %d", rep.State, rep.Succeeded, s, sumSquares(24))
	}
	if n, _ := e.fake.DoneCount(e.ctx, "b", 0); n != 24 {
		t.Errorf("%d done records, want 24", n)
	}
}

// A bundle of MaxBundle partitions (a job whose cap is above the default's) runs as any other:
// it spans four fold blocks and four done units, and costs one partial update per block and
// one done append per unit (a partial's first block creates it unread). A larger one is
// malformed.
func TestWorker_RunsBundlesUpToMaxBundle(t *testing.T) {
	const n = 2 * work.MaxBundle
	e := newBundleEnv(t, true)
	e.run("big", synthetic.Params{Partitions: n}, func(m *ledger.Manifest) { m.FoldBlock = work.DefaultFoldBlock })
	blocks := work.MaxBundle / work.DefaultFoldBlock
	for first := 0; first < n; first += work.MaxBundle {
		env := bundle("big", first, work.MaxBundle)
		body, err := env.Encode()
		if err != nil {
			t.Fatalf("encode a bundle of %d: %v", work.MaxBundle, err)
		}
		if env, err = work.DecodeEnvelope(body); err != nil {
			t.Fatalf("a bundle of %d is refused: %v", work.MaxBundle, err)
		}
		ops := e.counting(func() {
			if err := e.deliver(env, 1); err != nil {
				t.Fatalf("bundle at %d: %v", first, err)
			}
		})
		// The run's first 4 blocks (one per fold shard) create their partials without reading
		// them; later blocks read theirs. The last bundle also finishes the run, which reads
		// every partial once more.
		reads := blocks
		if first < 4*work.DefaultFoldBlock {
			reads = 0
		}
		if first+work.MaxBundle == n {
			reads += 4 // the run's fold shards
		}
		if ops["PutResult"] != work.MaxBundle || ops["AppendDone"] != blocks || ops["ReadPartial"] != reads || ops["WritePartial"] != blocks {
			t.Errorf("bundle at %d: store calls %v; want %d results, %d appends and partial writes, %d partial reads",
				first, ops, work.MaxBundle, blocks, reads)
		}
	}
	rep, _, err := e.fake.ReadReport(e.ctx, "big")
	if err != nil {
		t.Fatalf("report: %v", err)
	}
	var s synthetic.Summary
	if err := json.Unmarshal(rep.Aggregate, &s); err != nil {
		t.Fatal(err)
	}
	if rep.State != ledger.StateSucceeded || rep.Succeeded != n || s.OK != n || s.SumV != sumSquares(n) {
		t.Errorf("report %s with %d succeeded, summary %+v; want succeeded, %d, sumV %d", rep.State, rep.Succeeded, s, n, sumSquares(n))
	}
	if _, err := work.DecodeEnvelope([]byte(fmt.Sprintf(`{"baton":1,"kind":"partition","run":"big","epoch":1,"count":%d}`, work.MaxBundle+1))); !errors.Is(err, work.ErrMalformed) {
		t.Errorf("a bundle of %d: %v, want ErrMalformed", work.MaxBundle+1, err)
	}
}

func TestWorker_BundlePartitionFailingIsRetriedAlone(t *testing.T) {
	e := newBundleEnv(t, true)
	e.run("f", synthetic.Params{Partitions: 8, FailAlways: []int{3}, Permanent: []int{5}})
	if err := e.deliver(bundle("f", 0, 8), 1); err != nil {
		t.Fatalf("a bundle whose failing partition's retry is scheduled succeeds, got %v", err)
	}
	if got := e.results("f"); !slices.Equal(got, []int{0, 1, 2, 4, 5, 6, 7}) {
		t.Errorf("results %v, want every partition but 3 (5 failed permanently: recorded)", got)
	}
	sent := e.sender.Sent()
	if len(sent) != 1 || sent[0].ID != "f/3/e1/a2" || sent[0].NotBefore.IsZero() {
		t.Fatalf("sent %+v, want partition 3's second try alone, scheduled", sent)
	}
	retry, err := work.DecodeEnvelope(sent[0].Body)
	if err != nil || retry.Count != 0 || retry.Part != 3 || retry.Attempt != 2 || string(retry.Payload) != `{"i":3}` || len(retry.Errors) != 1 {
		t.Errorf("retry = %+v, %v; want a message of partition 3 alone, try 2, its payload and the first error", retry, err)
	}
	if n, _ := e.fake.DoneCount(e.ctx, "f", 0); n != 7 {
		t.Errorf("%d done records, want 7", n)
	}
}

func TestWorker_RedeliveredBundleIsSplitIntoSingles(t *testing.T) {
	e := newBundleEnv(t, true)
	e.run("s", synthetic.Params{Partitions: 8})
	// The first delivery recorded partitions 0-3 and died (as if killed): record them by hand.
	for i := range 4 {
		env := bundle("s", i, 1)
		env.Count, env.Payload, env.Payloads = 0, env.Payloads[0], nil
		if err := e.deliver(env, 1); err != nil {
			t.Fatal(err)
		}
	}
	ops := e.counting(func() {
		if err := e.deliver(bundle("s", 0, 8), 2); err != nil {
			t.Fatalf("split: %v", err)
		}
	})
	if ops["PutResult"] != 0 || ops["AppendDone"] != 0 {
		t.Errorf("the split recorded something: %v", ops)
	}
	sent := e.sender.Sent()
	if len(sent) != 8 {
		t.Fatalf("split sent %d messages, want 8", len(sent))
	}
	for k, msg := range sent {
		one, err := work.DecodeEnvelope(msg.Body)
		if err != nil {
			t.Fatal(err)
		}
		if one.Part != k || one.Count != 0 || one.Attempt != 2 || string(one.Payload) != fmt.Sprintf(`{"i":%d}`, k) ||
			msg.ID != fmt.Sprintf("s/%d/e1/a2", k) || !msg.NotBefore.IsZero() {
			t.Errorf("message %d: %+v (ID %s), want partition %d alone on try 2 with its payload, now", k, one, msg.ID, k)
		}
		// Deliver it: 0-3 find their results (read, not processed again); 4-7 are processed.
		ops := e.counting(func() {
			if err := e.w.HandlePartition(e.ctx, one, work.Delivery{MessageID: msg.ID, Count: 1}); err != nil {
				t.Fatalf("single %d: %v", k, err)
			}
		})
		if want := k >= 4; (ops["PutResult"] == 1) != want {
			t.Errorf("single %d wrote %d results; want a write only for a partition without one", k, ops["PutResult"])
		}
	}
	rep, _, err := e.fake.ReadReport(e.ctx, "s")
	if err != nil || rep.State != ledger.StateSucceeded || rep.Succeeded != 8 {
		t.Errorf("report %+v, %v; want succeeded with 8", rep, err)
	}
	// A split whose send fails fails the invocation: the bundle comes back again.
	e.sender.Fail = errors.New("queue down")
	if err := e.deliver(bundle("s", 0, 8), 3); err == nil {
		t.Error("a split that could not be sent succeeded")
	}
}

func TestWorker_RedeliveredBundleWithoutRetriesReadsResultsFirst(t *testing.T) {
	e := newBundleEnv(t, false)
	e.run("n", synthetic.Params{Partitions: 8, FailAlways: []int{6}})
	err := e.deliver(bundle("n", 0, 8), 1)
	if err == nil || errors.Is(err, work.ErrGaveUp) {
		t.Fatalf("first delivery with partition 6 failing and no retry sender: %v, want a transient failure", err)
	}
	if got := e.results("n"); !slices.Equal(got, []int{0, 1, 2, 3, 4, 5, 7}) {
		t.Fatalf("results %v, want all but 6", got)
	}
	ops := e.counting(func() {
		if err := e.deliver(bundle("n", 0, 8), 5); !errors.Is(err, work.ErrGaveUp) {
			t.Errorf("last delivery: %v, want ErrGaveUp for partition 6", err)
		}
	})
	if ops["PutResult"] != 1 || ops["ReadResult"] != 8 {
		t.Errorf("last delivery: %v; want the 8 results read first and only 6's written", ops)
	}
	rep, _, err := e.fake.ReadReport(e.ctx, "n")
	if err != nil || rep.State != ledger.StatePartial || rep.Failed != 1 || rep.Succeeded != 7 {
		t.Errorf("report %+v, %v; want partial with 7 succeeded and 1 failed", rep, err)
	}
}

// withJob registers job as the synthetic job's name in the worker's registry.
func withJob(job work.Job) func(*work.WorkerConfig) {
	return func(cfg *work.WorkerConfig) {
		jobs := work.NewRegistry()
		jobs.Register(synthetic.Name, job)
		cfg.Jobs = jobs
	}
}

// gatedJob is the synthetic job whose Process calls first go through gate.
type gatedJob struct {
	work.Job
	gate func(ctx context.Context, p work.Partition) error
}

func (j gatedJob) Process(ctx context.Context, p work.Partition) (json.RawMessage, error) {
	if err := j.gate(ctx, p); err != nil {
		return nil, err
	}
	return j.Job.Process(ctx, p)
}

// waitFor is the package tests' wait for a condition.
var waitFor = work.WaitFor

// A bundle of MaxBundle partitions runs at most BundleConcurrency of them at once, and that
// many: its size saves calls without multiplying what an instance runs at once.
func TestWorker_BundleRunsAtMostBundleConcurrencyPartitionsAtOnce(t *testing.T) {
	var inFlight, most atomic.Int64
	release := make(chan struct{})
	job := gatedJob{Job: enginejob.Of(synthetic.New()), gate: func(ctx context.Context, p work.Partition) error {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		return nil
	}}
	e := newBundleEnv(t, true, withJob(job))
	e.run("wide", synthetic.Params{Partitions: work.MaxBundle})
	done := make(chan error, 1)
	go func() { done <- e.deliver(bundle("wide", 0, work.MaxBundle), 1) }()
	waitFor(t, "the bundle's partitions to start", func() bool { return inFlight.Load() >= work.BundleConcurrency })
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("bundle: %v", err)
	}
	if got := most.Load(); got != work.BundleConcurrency {
		t.Errorf("at most %d partitions ran at once, want %d", got, work.BundleConcurrency)
	}
	if got := e.results("wide"); len(got) != work.MaxBundle {
		t.Errorf("%d results, want %d", len(got), work.MaxBundle)
	}
}

// A bundle's partitions not started when the invocation's context ends are not run: the
// delivery fails, and the bundle's redelivery sends them again one per message.
func TestWorker_BundlePartitionsNotStartedByTheDeadlineWaitForTheRedelivery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var started atomic.Int64
	job := gatedJob{Job: enginejob.Of(synthetic.New()), gate: func(pctx context.Context, p work.Partition) error {
		if started.Add(1) == work.BundleConcurrency {
			cancel() // the invocation's deadline, as the first BundleConcurrency run
		}
		<-pctx.Done()
		return pctx.Err()
	}}
	e := newBundleEnv(t, true, withJob(job))
	n := 2 * work.BundleConcurrency
	e.run("late", synthetic.Params{Partitions: n})
	env := bundle("late", 0, n)
	err := e.w.HandlePartition(ctx, env, work.Delivery{MessageID: env.MessageID(), Count: 1})
	if err == nil || !strings.Contains(err.Error(), "not started") {
		t.Fatalf("delivery: %v, want a failure naming the partitions not started", err)
	}
	if got := started.Load(); got != work.BundleConcurrency {
		t.Errorf("%d partitions started, want %d (none after the context ended)", got, work.BundleConcurrency)
	}
	if got := e.results("late"); len(got) != 0 {
		t.Errorf("results %v, want none", got)
	}
}

// A partition that runs longer than the worker's RecordTimeout still gets its result written:
// the recording's time starts when the recording does, not when the invocation did.
func TestWorker_PartitionOutlastingTheRecordTimeoutIsRecorded(t *testing.T) {
	for _, count := range []int{1, 4} {
		t.Run(fmt.Sprintf("count=%d", count), func(t *testing.T) {
			const timeout = 300 * time.Millisecond
			e := newBundleEnv(t, true, func(cfg *work.WorkerConfig) { cfg.RecordTimeout = timeout })
			e.run("long", synthetic.Params{Partitions: 4, WorkMs: int(3 * timeout / time.Millisecond)})
			env := bundle("long", 0, count)
			if count == 1 {
				env.Count, env.Payload, env.Payloads = 0, env.Payloads[0], nil
			}
			if err := e.deliver(env, 1); err != nil {
				t.Fatalf("delivery: %v", err)
			}
			if got := e.results("long"); len(got) != count {
				t.Errorf("results %v, want %d", got, count)
			}
			if n, _ := e.fake.DoneCount(e.ctx, "long", 0); n != int64(count) {
				t.Errorf("%d done records, want %d", n, count)
			}
		})
	}
}

// The delivery that completes a run finishes it from the worker's copy of the manifest, which
// says planning is done: neither the delivery nor the finish reads the manifest. A process
// with no copy reads it once, for the delivery, and the finish starts from that read.
func TestWorker_FinishStartsFromTheDeliverysCopyOfTheManifest(t *testing.T) {
	for _, warm := range []bool{true, false} {
		e := newBundleEnv(t, true)
		e.run("copy", synthetic.Params{Partitions: 16})
		if err := e.deliver(bundle("copy", 0, 8), 1); err != nil {
			t.Fatal(err)
		}
		if !warm {
			e.w = e.another() // another process, with no copy, delivers the rest
		}
		ops := e.counting(func() {
			if err := e.deliver(bundle("copy", 8, 8), 1); err != nil {
				t.Fatal(err)
			}
		})
		want := 0
		if !warm {
			want = 1
		}
		if ops["ReadManifest"] != want {
			t.Errorf("warm=%v: the last bundle and the finish read the manifest %d times, want %d (calls %v)", warm, ops["ReadManifest"], want, ops)
		}
		if m, err := e.fake.ReadManifest(e.ctx, "copy"); err != nil || m.State != ledger.StateSucceeded {
			t.Fatalf("warm=%v: run %s (%v), want succeeded", warm, m.State, err)
		}
	}
}
