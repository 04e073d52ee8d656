package work_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/enginejob"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/blobstore"
	"github.com/batonfn/baton/internal/tools/azurite"
	"github.com/batonfn/baton/work"
	"github.com/batonfn/baton/work/synthetic"
)

// BenchmarkWorker_StorageCallsPerPartition processes b.N synthetic partitions (no job I/O) one
// after another and reports the worker's storage calls per partition: the mean (including the
// done shard's creation), the most any partition but the first and last made (the steady
// state; the goal is ≤ 3), and the finish's calls (the aggregation reads every result) per
// partition.
func BenchmarkWorker_StorageCallsPerPartition(b *testing.B) {
	n := min(b.N, synthetic.MaxPartitions)
	f := newFixture(b)
	run := fmt.Sprintf("calls-%d", n)
	f.createRun(run, synthetic.Params{Partitions: n}, func(m *ledger.Manifest) { m.Deadline = time.Now().Add(time.Hour) })
	per := make([]int64, n)
	start := f.calls.n.Load()
	b.ResetTimer()
	for i := range n {
		before := f.calls.n.Load()
		f.mustDeliver(run, i, 1)
		per[i] = f.calls.n.Load() - before
	}
	b.StopTimer()
	// The last partition also finishes the run, which reads every result (one call per
	// partition): report that apart from the per-partition cost.
	total := f.calls.n.Load() - start
	finish := per[n-1] - min(per[n-1], 3)
	b.ReportMetric(float64(total-finish)/float64(n), "calls/partition")
	b.ReportMetric(float64(finish)/float64(n), "finish-calls/partition")
	if n > 2 {
		b.ReportMetric(float64(slices.Max(per[1:n-1])), "max-calls/partition")
	}
	if m := f.manifest(run); m.State != ledger.StateSucceeded {
		b.Fatalf("run ended %s, want succeeded", m.State)
	}
}

// tryFinishSeed holds a run of 10,000 recorded results, seeded once per benchmark binary.
var tryFinishSeed struct {
	once  sync.Once
	store *blobstore.Store
	cc    *container.Client
	err   error
}

const seedPartitions = 10_000

func seedTryFinish(b *testing.B) *blobstore.Store {
	b.Helper()
	client, _ := countingClient(b)
	tryFinishSeed.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		tryFinishSeed.cc = client.ServiceClient().NewContainerClient(azurite.UniqueName(b, "agg"))
		store := blobstore.New(tryFinishSeed.cc, blobstore.Options{})
		if tryFinishSeed.err = store.EnsureContainer(ctx); tryFinishSeed.err != nil {
			return
		}
		m := &ledger.Manifest{RunID: "agg", Trigger: ledger.TriggerManual, Epoch: 1, Segments: []ledger.Segment{{Epoch: 1}},
			Job: synthetic.Name, Params: []byte(fmt.Sprintf(`{"partitions":%d}`, seedPartitions)), State: ledger.StateRunning,
			Partitions: seedPartitions, PlanDone: true, BatchSize: 100, DoneLayout: ledger.DoneStriped}
		if tryFinishSeed.err = store.CreateManifest(ctx, m); tryFinishSeed.err != nil {
			return
		}
		started := time.Now()
		var next atomic.Int64
		errs := make([]error, 32)
		var wg sync.WaitGroup
		for k := range errs {
			wg.Go(func() {
				for i := int(next.Add(1) - 1); i < seedPartitions && errs[k] == nil; i = int(next.Add(1) - 1) {
					r := ledger.Result{Run: "agg", Index: i, Epoch: 1, OK: true, Attempts: 1,
						Output: fmt.Appendf(nil, `{"i":%d,"v":%d}`, i, int64(i)*int64(i))}
					if errs[k] = store.PutResult(ctx, r); errs[k] == nil {
						_, errs[k] = store.AppendDone(ctx, "agg", ledger.DoneStriped, 1, i)
					}
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				tryFinishSeed.err = err
				return
			}
		}
		b.Logf("seeded %d results and done records in %v", seedPartitions, time.Since(started).Round(time.Millisecond))
		tryFinishSeed.store = store
	})
	if tryFinishSeed.err != nil {
		b.Fatalf("seed: %v", tryFinishSeed.err)
	}
	return tryFinishSeed.store
}

// BenchmarkTryFinish_10000 times one aggregation of a complete 10,000-partition run: the
// manifest read, done-shard checks, the results listing, the report claim, reading every
// result (16 at a time) through the synthetic Aggregate, the report and the manifest update.
func BenchmarkTryFinish_10000(b *testing.B) {
	store := seedTryFinish(b)
	ctx := context.Background()
	jobs := work.NewRegistry()
	jobs.Register(synthetic.Name, enginejob.Of(synthetic.New()))
	w, err := work.NewWorker(work.WorkerConfig{Store: store, Jobs: jobs, MaxDeliveries: 5})
	if err != nil {
		b.Fatal(err)
	}
	reset := func() {
		if _, err := tryFinishSeed.cc.NewBlobClient("agg/report.json").Delete(ctx, nil); err != nil {
			b.Fatalf("reset report: %v", err)
		}
		if _, err := store.UpdateManifest(ctx, "agg", ledger.NoFence, func(m *ledger.Manifest) error {
			m.State, m.Finished, m.Succeeded, m.Failed = ledger.StateRunning, time.Time{}, 0, 0
			return nil
		}); err != nil {
			b.Fatalf("reset manifest: %v", err)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		if i > 0 {
			b.StopTimer()
			reset()
			b.StartTimer()
		}
		done, err := w.TryFinish(ctx, "agg")
		if err != nil || !done {
			b.Fatalf("TryFinish = %v, %v; want true", done, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(seedPartitions)*float64(b.N)/b.Elapsed().Seconds(), "results/s")
	m, err := store.ReadManifest(ctx, "agg")
	if err != nil || m.State != ledger.StateSucceeded || m.Succeeded != seedPartitions {
		b.Fatalf("manifest %s with %d succeeded (%v), want succeeded with %d", m.State, m.Succeeded, err, seedPartitions)
	}
	reset()
}

// BenchmarkWorker_StorageCallsPerBundledPartition delivers a run of b.N synthetic partitions
// (no job I/O; a Merger, so results fold into 32 partials in blocks of 256) in bundles of
// DefaultMaxBundle (256) — the leader's default for a full plan batch — and reports every
// storage call per partition:
// results, the fold (one partial read and write per bundle), the done appends (one per bundle),
// the manifest reads (once per process while the planned run's manifest is cached; /planning:
// once per bundle, plus a re-read when a bundle's append may complete a shard) and the finish.
// results=block records each bundle's results in one block (a batch planned with spans);
// results=own one result per partition (a batch planned before spans), side by side.
func BenchmarkWorker_StorageCallsPerBundledPartition(b *testing.B) {
	for _, blocks := range []bool{true, false} {
		for _, planned := range []bool{true, false} {
			name := "planned"
			if !planned {
				name = "planning"
			}
			results := "results=block"
			if !blocks {
				results = "results=own"
			}
			b.Run(results+"/"+name, func(b *testing.B) { benchBundled(b, name, planned, blocks) })
		}
	}
}

func benchBundled(b *testing.B, name string, planned, blocks bool) {
	const size = work.DefaultMaxBundle
	n := (min(b.N, synthetic.MaxPartitions) + size - 1) / size * size
	f := newFixture(b)
	jobs := work.NewRegistry()
	jobs.Register(synthetic.Name, enginejob.Of(synthetic.New()))
	cfg := f.cfg
	cfg.Jobs = jobs
	w := f.newWorker(cfg)
	run := fmt.Sprintf("bundled-%s-%v-%d", name, blocks, n)
	f.createRun(run, synthetic.Params{Partitions: n}, func(m *ledger.Manifest) {
		m.Deadline = time.Now().Add(time.Hour)
		m.FoldShards, m.FoldBlock = work.DefaultFoldShards, work.DefaultFoldBlock
		if !planned {
			m.PlanDone, m.Partitions, m.Checkpoint.Next = false, 0, n
		}
	})
	start := f.calls.n.Load()
	b.ResetTimer()
	for first := 0; first < n; first += size {
		env := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindPartition, Run: run, Epoch: 1, Part: first, Count: size}
		if blocks {
			env.Block = size
		}
		for i := first; i < first+size; i++ {
			env.Payloads = append(env.Payloads, envelope(run, i, 1).Payload)
		}
		if err := w.HandlePartition(f.ctx, env, work.Delivery{MessageID: env.MessageID(), Count: 1}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(f.calls.n.Load()-start)/float64(n), "calls/partition")
	if planned {
		if m := f.manifest(run); m.State != ledger.StateSucceeded {
			b.Fatalf("run ended %s (%s), want succeeded", m.State, m.Reason)
		}
	}
}
