package bench

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/enginejob"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/blobstore"
	"github.com/batonfn/baton/work"
	"github.com/batonfn/baton/work/synthetic"
)

// faninConcurrency is how many partitions the worker processes at once: the queue trigger's
// batchSize (host.json) of one instance.
const faninConcurrency = 16

// BenchmarkFanIn measures the worker side of a run of 1,000 and 10,000 synthetic no-op
// partitions (the job does no I/O, so every storage call is the worker's own). One run per
// iteration on a fresh Azurite: partitions 0..n-2 go through Worker.HandlePartition,
// faninConcurrency at a time; then the last partition is delivered alone, and its delivery
// finds every result in and aggregates the run.
//
// Metrics: worker-partitions/s and calls/partition over the n-1 partitions; for the last one,
// last-delivery-ms (delivery → report written and run final), last-result-to-report-ms (its
// result's finish time → the report's creation, from the ledger) and finish-calls (storage
// calls of the delivery that finished the run).
func BenchmarkFanIn(b *testing.B) {
	for _, n := range sizes(1000, 10000) {
		b.Run(fmt.Sprintf("partitions=%d", n), func(b *testing.B) {
			for b.Loop() {
				fanIn(b, n)
			}
		})
	}
}

func fanIn(b *testing.B, n int) {
	b.Helper()
	srv := privateAzurite(b)
	defer srv.Stop()
	azuriteStats := azuriteProc(b, srv)
	var calls counter
	store := blobstore.New(blobClient(b, srv, &calls, false).ServiceClient().NewContainerClient("runs"), blobstore.Options{})
	ctx := ctxFor(b, 15*time.Minute)
	if err := store.EnsureContainer(ctx); err != nil {
		b.Fatal(err)
	}
	jobs := work.NewRegistry()
	jobs.Register(synthetic.Name, enginejob.Of(synthetic.New()))
	w, err := work.NewWorker(work.WorkerConfig{Store: store, Jobs: jobs, Holder: ledger.Holder{App: "bench", Instance: "worker", PID: os.Getpid()}, MaxDeliveries: 5,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}

	// The manifest as a leader leaves it once every partition is enqueued.
	const run, batch = "fanin", 250
	params, _ := json.Marshal(synthetic.Params{Partitions: n})
	m := &ledger.Manifest{RunID: run, Trigger: ledger.TriggerManual, Epoch: 1, Segments: []ledger.Segment{{Epoch: 1}},
		Job: synthetic.Name, Params: params, State: ledger.StateRunning, Partitions: n, PlanDone: true, BatchSize: batch,
		Checkpoint: ledger.Checkpoint{Batches: (n + batch - 1) / batch, Next: n}, DoneLayout: ledger.DoneStriped,
		Created: time.Now().UTC()}
	if err := store.CreateManifest(ctx, m); err != nil {
		b.Fatal(err)
	}
	deliver := func(i int) error {
		env := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindPartition, Run: run, Epoch: 1, Part: i,
			Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
		return w.HandlePartition(ctx, env, work.Delivery{MessageID: env.MessageID(), Count: 1})
	}

	calls.n.Store(0)
	az0, self0 := azuriteStats(), selfCPU()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, faninConcurrency)
	for range faninConcurrency {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n-1; i = int(next.Add(1) - 1) {
				if err := deliver(i); err != nil {
					errs <- fmt.Errorf("partition %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	az1, self1 := azuriteStats(), selfCPU()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	bulkCalls := calls.n.Load()

	calls.n.Store(0)
	t0 := time.Now()
	if err := deliver(n - 1); err != nil {
		b.Fatalf("last partition: %v", err)
	}
	lastDelivery := time.Since(t0)
	finishCalls := calls.n.Load()

	fin, err := store.ReadManifest(ctx, run)
	if err != nil || fin.State != ledger.StateSucceeded || fin.Succeeded != n {
		b.Fatalf("after the last partition the run is %s with %d succeeded (%v), want succeeded with %d", fin.State, fin.Succeeded, err, n)
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
	b.ReportMetric(float64(n-1)/wall.Seconds(), "worker-partitions/s")
	b.ReportMetric(float64(bulkCalls)/float64(n-1), "calls/partition")
	b.ReportMetric(float64(lastDelivery.Milliseconds()), "last-delivery-ms")
	b.ReportMetric(float64(rep.Created.Sub(last.Finished).Milliseconds()), "last-result-to-report-ms")
	b.ReportMetric(float64(finishCalls), "finish-calls")
	b.ReportMetric(cpuShare(az1.CPU-az0.CPU, wall), "azurite-cpu-%")
	b.ReportMetric(cpuShare(self1-self0, wall), "worker-cpu-%")
}
