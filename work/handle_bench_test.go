package work_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/ledgertest"
	"github.com/batonfn/baton/internal/enginejob"
	"github.com/batonfn/baton/work"
	"github.com/batonfn/baton/work/synthetic"
)

// benchWorker is a worker over an in-memory ledger holding a planned synthetic run of
// synthetic.MaxPartitions partitions (none of the benchmark's deliveries finishes it), with
// tweak applied to its config.
func benchWorker(b *testing.B, tweak func(*work.WorkerConfig)) (*work.Worker, string) {
	b.Helper()
	ctx := context.Background()
	fake := ledgertest.NewFake(ledgertest.Options{})
	jobs := work.NewRegistry()
	jobs.Register(synthetic.Name, enginejob.Of(synthetic.New()))
	cfg := work.WorkerConfig{Store: fake, Jobs: jobs, Holder: ledger.Holder{App: "b", Instance: "i", PID: 1}, MaxDeliveries: 5}
	if tweak != nil {
		tweak(&cfg)
	}
	w, err := work.NewWorker(cfg)
	if err != nil {
		b.Fatal(err)
	}
	const run = "bench-hot"
	params, _ := json.Marshal(synthetic.Params{Partitions: synthetic.MaxPartitions})
	m := &ledger.Manifest{RunID: run, Trigger: ledger.TriggerManual, Epoch: 1, Segments: []ledger.Segment{{Epoch: 1}},
		Job: synthetic.Name, Params: params, State: ledger.StateRunning, Partitions: synthetic.MaxPartitions, PlanDone: true,
		BatchSize: 2048, Checkpoint: ledger.Checkpoint{Batches: 1, Next: synthetic.MaxPartitions}, FoldShards: 4, FoldBlock: 8,
		DoneLayout: ledger.DoneStriped, Deadline: time.Now().Add(time.Hour), Expires: time.Now().Add(2 * time.Hour)}
	if err := fake.CreateManifest(ctx, m); err != nil {
		b.Fatal(err)
	}
	return w, run
}

// benchHandle delivers b.N single-partition messages, each a new partition, and reports the
// worker's allocations per message (the engine's hot path on an in-memory ledger).
func benchHandle(b *testing.B, w *work.Worker, run string) {
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		env := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindPartition, Run: run, Epoch: 1,
			Part: i % synthetic.MaxPartitions, Parts: synthetic.MaxPartitions}
		if err := w.HandlePartition(ctx, env, work.Delivery{Count: 1, Try: 1}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandlePartition_Off is the worker's cost per message with telemetry off: run on the
// commit before telemetry and after it, it shows what off costs (see docs/configuration.md).
func BenchmarkHandlePartition_Off(b *testing.B) {
	w, run := benchWorker(b, nil)
	benchHandle(b, w, run)
}
