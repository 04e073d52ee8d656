package work_test

import (
	"context"
	"encoding/json"
	"iter"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/work"
	"github.com/batonfn/baton/work/synthetic"
)

// holdJob's Process runs until its context ends (or, for odd partitions, succeeds at once).
type holdJob struct {
	started, stopped atomic.Int32
}

func (j *holdJob) Plan(context.Context, json.RawMessage, string, func(json.RawMessage, string) error) error {
	return nil
}

func (j *holdJob) Process(ctx context.Context, p work.Partition) (json.RawMessage, error) {
	if p.Index%2 == 1 {
		return json.RawMessage(`1`), nil
	}
	j.started.Add(1)
	<-ctx.Done()
	j.stopped.Add(1)
	return nil, context.Cause(ctx)
}

func (j *holdJob) Aggregate(context.Context, work.RunInfo, iter.Seq2[ledger.Result, error]) (json.RawMessage, error) {
	return json.RawMessage(`{}`), nil
}

// A bundle in flight when its run gets a Stop: the partitions still running see their
// context cancelled with ErrRunStopped within the poll, their outcome is not recorded, the
// ones that finished before are, and the delivery completes (nothing to retry). A later
// delivery of the run is dropped unprocessed.
func TestWorker_StopCancelsThePartitionsInFlight(t *testing.T) {
	f := newFixture(t)
	job := &holdJob{}
	jobs := work.NewRegistry()
	jobs.Register("hold", job)
	cfg := f.cfg
	cfg.Jobs, cfg.StopPoll = jobs, 20*time.Millisecond
	w := f.newWorker(cfg)
	f.createRun("r-stop", synthetic.Params{Partitions: 8}, func(m *ledger.Manifest) { m.Job, m.Params = "hold", nil })

	env := bundle("r-stop", 0, 8)
	done := make(chan error, 1)
	go func() { done <- w.HandlePartition(f.ctx, env, work.Delivery{MessageID: env.MessageID(), Count: 1}) }()
	work.WaitFor(t, "the even partitions to start", func() bool { return job.started.Load() == 4 })
	if _, err := f.store.UpdateManifest(f.ctx, "r-stop", ledger.NoFence, func(m *ledger.Manifest) error {
		m.Stop = &ledger.Stop{State: ledger.StateCancelled, By: "alice", At: time.Now().UTC()}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the stopped delivery: %v, want nil (nothing to retry)", err)
		}
	case <-f.ctx.Done():
		t.Fatal("the delivery never returned after the stop")
	}
	if got := job.stopped.Load(); got != 4 {
		t.Fatalf("%d partitions saw their context end, want 4", got)
	}
	if got := f.results("r-stop"); len(got) != 4 || got[0] != 1 || got[3] != 7 {
		t.Fatalf("results %v, want the odd partitions only", got)
	}
	// The next delivery of the run is dropped without running anything.
	next := envelope("r-stop", 2, 1)
	if err := w.HandlePartition(f.ctx, next, work.Delivery{MessageID: "again", Count: 1}); err != nil {
		t.Fatal(err)
	}
	if got := job.started.Load(); got != 4 {
		t.Fatalf("%d partitions started, want no more after the stop", got)
	}
}
