package bench

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/enginejob"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/blobstore"
	"github.com/batonfn/baton/work"
	"github.com/batonfn/baton/work/synthetic"
)

// reportSeedConcurrency is how many seeding calls are in flight at once.
const reportSeedConcurrency = 32

// BenchmarkReportLatency measures the time from the last result to report.json for a complete
// synthetic run of 1,000, 10,000 and 100,000 partitions, with folding (the run's 32 partial
// aggregates are read) and without (FoldShards = 0: every result is listed and read), on the
// same stored results. One iteration per size on a fresh Azurite in memory:
//
//  1. seed: the manifest as a leader leaves it once everything is enqueued (FoldShards 32),
//     the results and done records of partitions 0..n-2, and the 32 partials those results
//     fold into (built with the job's Aggregate, exactly what folding them one by one makes);
//  2. after (folded): partition n-1 is delivered to Worker.HandlePartition; that delivery
//     records its result, folds it, appends its done record and finishes the run;
//  3. before (full read): the report is deleted, the manifest set back to running with
//     FoldShards 0, and Worker.TryFinish run — what the same last delivery does after its
//     result when the job does not fold.
//
// The two reports must agree (counts, state and aggregate), else the benchmark fails.
//
// Metrics: folded-last-delivery-ms (delivery → run final), folded-result-to-report-ms (the
// last result's finish time → the report's creation, both from the ledger), full-finish-ms
// (TryFinish → run final) and full-result-to-report-ms; for each, the storage calls made, the
// bytes the Go heap allocated, and the peak RSS of this process (VmHWM, reset with
// /proc/self/clear_refs just before, after a GC returned the seeding's memory to the OS):
// the growth of the aggregating process with n. seed-s is how long seeding took.
func BenchmarkReportLatency(b *testing.B) {
	for _, n := range sizes(1000, 10000, 100000) {
		b.Run(fmt.Sprintf("partitions=%d", n), func(b *testing.B) {
			for b.Loop() {
				reportLatency(b, n)
			}
		})
	}
}

func reportLatency(b *testing.B, n int) {
	b.Helper()
	srv := privateAzurite(b)
	defer srv.Stop()
	var calls counter
	cc := blobClient(b, srv, &calls, true).ServiceClient().NewContainerClient("runs")
	store := blobstore.New(cc, blobstore.Options{})
	ctx := ctxFor(b, 30*time.Minute)
	if err := store.EnsureContainer(ctx); err != nil {
		b.Fatal(err)
	}
	jobs := work.NewRegistry()
	job := enginejob.Of(synthetic.New())
	jobs.Register(synthetic.Name, job)
	w, err := work.NewWorker(work.WorkerConfig{Store: store, Jobs: jobs, Holder: ledger.Holder{App: "bench", Instance: "aggregator", PID: os.Getpid()},
		MaxDeliveries: config.DefaultMaxDeliveries, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}

	const run, batch = "latency", 250
	params, _ := json.Marshal(synthetic.Params{Partitions: n})
	m := &ledger.Manifest{RunID: run, Trigger: ledger.TriggerManual, Epoch: 1, Segments: []ledger.Segment{{Epoch: 1}},
		Job: synthetic.Name, Params: params, State: ledger.StateRunning, Partitions: n, PlanDone: true, BatchSize: batch,
		FoldShards: work.DefaultFoldShards, Checkpoint: ledger.Checkpoint{Batches: (n + batch - 1) / batch, Next: n},
		DoneLayout: ledger.DoneStriped, Created: time.Now().UTC()}
	if err := store.CreateManifest(ctx, m); err != nil {
		b.Fatal(err)
	}
	seedStart := time.Now()
	result := func(i int) ledger.Result {
		out, _ := json.Marshal(synthetic.Output{I: i, V: int64(i) * int64(i)})
		return ledger.Result{Run: run, Index: i, Epoch: 1, OK: true, Attempts: 1, Worker: ledger.Holder{App: "bench", Instance: "seed"}, Output: out,
			Finished: time.Now().UTC()}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, reportSeedConcurrency)
	for range reportSeedConcurrency {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n-1; i = int(next.Add(1) - 1) {
				if err := store.PutResult(ctx, result(i)); err != nil {
					errs <- fmt.Errorf("seed result %d: %w", i, err)
					return
				}
				if _, err := store.AppendDone(ctx, run, m.DoneLayout, 1, i); err != nil {
					errs <- fmt.Errorf("seed done %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	// The partials: shard s holds partitions i ≡ s (mod 32), position i / 32.
	info := work.RunInfo{Run: run, Job: synthetic.Name, Params: params, Partitions: n}
	for s := range work.DefaultFoldShards {
		p := ledger.Partial{Run: run, Shard: s}
		var rs []ledger.Result
		for i := s; i < n-1; i += work.DefaultFoldShards {
			rs = append(rs, result(i))
			p.Mark(i / work.DefaultFoldShards)
		}
		p.Count = len(rs)
		agg, err := job.Aggregate(ctx, info, func(yield func(ledger.Result, error) bool) {
			for _, r := range rs {
				if !yield(r, nil) {
					return
				}
			}
		})
		if err != nil {
			b.Fatal(err)
		}
		p.Aggregate = agg
		if err := store.WritePartial(ctx, p, ""); err != nil {
			b.Fatalf("seed partial %d: %v", s, err)
		}
	}
	seed := time.Since(seedStart)
	b.Logf("seeded %d results, done records and %d partials in %s", n-1, work.DefaultFoldShards, seed.Round(time.Millisecond))

	// measure runs step with calls, allocations and peak RSS counted from a clean slate.
	measure := func(name string, step func() error) (time.Duration, time.Duration) {
		runtime.GC()
		debug.FreeOSMemory()
		if err := ResetPeakRSS(os.Getpid()); err != nil {
			b.Logf("peak RSS is not reset (%v): it includes the seeding", err)
		}
		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		calls.n.Store(0)
		t0 := time.Now()
		if err := step(); err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		took := time.Since(t0)
		runtime.ReadMemStats(&ms1)
		st, err := ReadProc(os.Getpid())
		if err != nil {
			b.Fatal(err)
		}
		fin, err := store.ReadManifest(ctx, run)
		if err != nil || fin.State != ledger.StateSucceeded || fin.Succeeded != n {
			b.Fatalf("%s: the run is %s with %d succeeded (%v), want succeeded with %d", name, fin.State, fin.Succeeded, err, n)
		}
		rep, _, err := store.ReadReport(ctx, run)
		if err != nil {
			b.Fatal(err)
		}
		results := ledger.NewReader(store, run) // results on their own and in blocks
		last, err := results.Read(ctx, n-1)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(calls.n.Load()), name+"-calls")
		b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/(1<<20), name+"-alloc-MiB")
		b.ReportMetric(float64(st.PeakRSS)/(1<<20), name+"-peak-rss-MiB")
		return took, rep.Created.Sub(last.Finished)
	}

	// After: the last partition's delivery folds its result and finishes from the partials.
	lastDelivery, foldedLatency := measure("folded", func() error {
		env := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindPartition, Run: run, Epoch: 1, Part: n - 1,
			Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, n-1))}
		return w.HandlePartition(ctx, env, work.Delivery{MessageID: env.MessageID(), Count: 1})
	})
	folded, _, err := store.ReadReport(ctx, run)
	if err != nil {
		b.Fatal(err)
	}

	// Before: the same complete run finished by the full read.
	if _, err := cc.NewBlobClient(run+"/report.json").Delete(ctx, nil); err != nil {
		b.Fatalf("delete the report: %v", err)
	}
	if _, err := store.UpdateManifest(ctx, run, ledger.NoFence, func(m *ledger.Manifest) error {
		m.State, m.Finished, m.Succeeded, m.Failed, m.FoldShards = ledger.StateRunning, time.Time{}, 0, 0, 0
		return nil
	}); err != nil {
		b.Fatalf("reset the manifest: %v", err)
	}
	var fullStart time.Time
	fullFinish, _ := measure("full", func() error {
		fullStart = time.Now()
		done, err := w.TryFinish(ctx, run)
		if err == nil && !done {
			err = fmt.Errorf("TryFinish did not finish the complete run")
		}
		return err
	})
	full, _, err := store.ReadReport(ctx, run)
	if err != nil {
		b.Fatal(err)
	}
	fullLatency := full.Created.Sub(fullStart)
	if folded.State != full.State || folded.Succeeded != full.Succeeded || folded.Failed != full.Failed ||
		string(folded.Aggregate) != string(full.Aggregate) {
		b.Fatalf("the folded report (%s, %d ok, %d failed, %s) differs from the full read's (%s, %d ok, %d failed, %s)",
			folded.State, folded.Succeeded, folded.Failed, folded.Aggregate, full.State, full.Succeeded, full.Failed, full.Aggregate)
	}
	b.Logf("n=%d: folded: last delivery %s, last result → report %s; full read: %s (report written %s after TryFinish began)",
		n, lastDelivery.Round(time.Millisecond), foldedLatency.Round(time.Millisecond), fullFinish.Round(time.Millisecond),
		fullLatency.Round(time.Millisecond))
	b.ReportMetric(float64(lastDelivery.Milliseconds()), "folded-last-delivery-ms")
	b.ReportMetric(float64(foldedLatency.Milliseconds()), "folded-result-to-report-ms")
	b.ReportMetric(float64(fullFinish.Milliseconds()), "full-finish-ms")
	b.ReportMetric(float64(fullLatency.Milliseconds()), "full-result-to-report-ms")
	b.ReportMetric(seed.Seconds(), "seed-s")
}
