package work_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/work"
)

// finishResult is what a TryFinish call in its own goroutine returned.
type finishResult struct {
	done bool
	err  error
}

// tryFinishAsync runs w.TryFinish(run) in a goroutine and returns where its answer arrives.
func tryFinishAsync(ctx context.Context, w *work.Worker, run string) <-chan finishResult {
	out := make(chan finishResult, 1)
	go func() {
		done, err := w.TryFinish(ctx, run)
		out <- finishResult{done, err}
	}()
	return out
}

// receive waits for a TryFinish's answer.
func receive(t *testing.T, what string, ch <-chan finishResult) finishResult {
	t.Helper()
	var r finishResult
	got := false
	work.WaitFor(t, what, func() bool {
		select {
		case r = <-ch:
			got = true
		default:
		}
		return got
	})
	return r
}

// An aggregation that outlasts StaleClaim many times over keeps its claim: its aggregator
// renews it while Aggregate runs, so another worker that sees the claim (at any time after
// the renewal) leaves it, and the final report is written under the last renewal's ETag.
// Before renewals, a claim went stale StaleClaim after it was taken, however alive its
// aggregator was; and with the claim's first ETag the final write would fail after a renewal.
func TestTryFinish_AggregatorRenewsItsClaimWhileItWorks(t *testing.T) {
	const n = 4
	f := newFixture(t)
	t0 := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	f.setClock(t0)
	f.cfg.StaleClaim = 30 * time.Millisecond // renewed every 10 ms of real time
	other := f.cfg
	other.Holder.Instance = "other"
	a, b := f.newWorker(f.cfg), f.newWorker(other)
	f.completeRun("renew", n)
	entered, release := make(chan struct{}), make(chan struct{})
	f.job.beforeAggregate = func(_ context.Context, call int64) error {
		if call == 1 {
			close(entered)
			<-release
		}
		return nil
	}
	answer := tryFinishAsync(f.ctx, a, "renew")
	<-entered

	later := t0.Add(time.Hour) // far past StaleClaim since the claim was taken
	f.setClock(later)
	work.WaitFor(t, "a renewal of the claim at the later time", func() bool {
		rep, _, err := f.store.ReadReport(f.ctx, "renew")
		return err == nil && rep.Renewed.Equal(later) && rep.Created.Equal(t0)
	})
	if done, err := b.TryFinish(f.ctx, "renew"); done || err != nil {
		t.Errorf("another worker's TryFinish during the aggregation = %v, %v; want false, nil (the claim is fresh)", done, err)
	}
	close(release)
	if r := receive(t, "the aggregator's TryFinish", answer); !r.done || r.err != nil {
		t.Fatalf("aggregator's TryFinish = %v, %v; want true, nil", r.done, r.err)
	}
	rep, _ := f.report("renew")
	if rep.Aggregator != a.Holder() || rep.State != ledger.StateSucceeded {
		t.Errorf("report %s by %v; want succeeded by the aggregator", rep.State, rep.Aggregator)
	}
	checkSucceeded(t, f, "renew", n)
}

// An aggregator whose renewals stopped reaching the ledger for StaleClaim (here: its clock is
// an hour behind, as a process paused that long would be) is taken over; it learns so at its
// next renewal and stops its aggregation instead of running it to a report it cannot write.
// The run is finished once, by the worker that took over.
func TestTryFinish_AggregatorThatLostItsClaimStops(t *testing.T) {
	const n = 4
	f := newFixture(t)
	f.cfg.StaleClaim = 300 * time.Millisecond // renewed every 100 ms
	behind := f.cfg
	behind.Now = func() time.Time { return time.Now().Add(-time.Hour) }
	other := f.cfg
	other.Holder.Instance = "other"
	a, b := f.newWorker(behind), f.newWorker(other)
	f.completeRun("lose", n)
	entered := make(chan struct{})
	f.job.beforeAggregate = func(ctx context.Context, call int64) error {
		if call == 1 { // the stalled aggregator: works until it is stopped
			close(entered)
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
	answer := tryFinishAsync(f.ctx, a, "lose")
	<-entered

	// The other worker sees a claim an hour old: it takes it over (retrying while a renewal
	// wins the race for the blob) and finishes the run.
	work.WaitFor(t, "the other worker to take the claim over and finish", func() bool {
		done, err := b.TryFinish(f.ctx, "lose")
		if err != nil {
			t.Fatalf("other worker's TryFinish: %v", err)
		}
		return done
	})
	if r := receive(t, "the stalled aggregator to stop", answer); r.done || r.err != nil {
		t.Errorf("stalled aggregator's TryFinish = %v, %v; want false, nil (it lost the claim)", r.done, r.err)
	}
	if got := f.logs.count("lost the report claim while aggregating: another worker took it over and finishes the run"); got != 1 {
		t.Errorf("the lost claim was logged %d times, want once", got)
	}
	rep, sum := f.report("lose")
	if rep.Aggregator != b.Holder() || rep.State != ledger.StateSucceeded || rep.Succeeded != n || sum.SumV != sumSquares(n) {
		t.Errorf("report %s by %v, %d succeeded, sumV %d; want succeeded by the worker that took over, %d, %d",
			rep.State, rep.Aggregator, rep.Succeeded, sum.SumV, n, sumSquares(n))
	}
	if m := f.manifest("lose"); m.State != ledger.StateSucceeded || m.Succeeded != n {
		t.Errorf("manifest %s, %d succeeded; want succeeded, %d", m.State, m.Succeeded, n)
	}
}
