package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/azurite"
	"github.com/batonfn/baton/internal/devhost"
)

// handoverTrials is the number of graceful handovers per iteration of BenchmarkHandover.
const handoverTrials = 20

// BenchmarkHandover measures a graceful in-process handover: leader A runs a task under
// Leader.RunAsLeader, ReleaseAll (what the handler does on SIGTERM) cancels it and releases the
// lease, then contender B acquires. Metrics: release-p50-ns (ReleaseAll call → return),
// handover-p50/p99-ns (ReleaseAll call → B holds the lease), as a fraction of the lease.
func BenchmarkHandover(b *testing.B) {
	var release, handover Samples
	for b.Loop() {
		c := blobClient(b, azurite.Shared(b), nil, false).ServiceClient().NewContainerClient(azurite.UniqueName(b, "handover"))
		newLock := func() *coordinator.BlobLock {
			lk, err := coordinator.NewBlobLock(c, "leader", coordinator.BlobLockOptions{Duration: clusterLease, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			return lk
		}
		lockA, lockB := newLock(), newLock()
		idB := coordinator.Identity{App: "bench", Instance: "b", PID: os.Getpid()}
		for i := range handoverTrials + 1 { // the first trial creates the blob and is not counted
			ctx := ctxFor(b, time.Minute)
			a, err := coordinator.NewLeader(coordinator.LeaderConfig{Lock: lockA, LeaseDuration: clusterLease,
				Identity: coordinator.Identity{App: "bench", Instance: "a", PID: os.Getpid()}, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			acquired, ran := make(chan struct{}), make(chan error, 1)
			go func() {
				ran <- a.RunAsLeader(ctx, func(ctx context.Context, _ coordinator.Lease, _ func()) error {
					close(acquired)
					<-ctx.Done()
					return ctx.Err()
				})
			}()
			select {
			case <-acquired:
			case err := <-ran:
				b.Fatalf("leader A did not acquire: %v", err)
			}
			t0 := time.Now()
			if err := a.ReleaseAll(ctx); err != nil {
				b.Fatalf("ReleaseAll: %v", err)
			}
			t1 := time.Now()
			l, err := lockB.Acquire(ctx, idB)
			if err != nil {
				b.Fatalf("B's Acquire right after ReleaseAll: %v", err)
			}
			t2 := time.Now()
			if err := <-ran; !errors.Is(err, coordinator.ErrHandover) {
				b.Fatalf("A's RunAsLeader = %v, want ErrHandover", err)
			}
			if err := lockB.Release(ctx, l); err != nil {
				b.Fatal(err)
			}
			if i > 0 {
				release.Add(t1.Sub(t0))
				handover.Add(t2.Sub(t0))
			}
		}
		_, _ = c.Delete(ctxFor(b, time.Minute), nil)
	}
	b.ReportMetric(float64(release.Percentile(50)), "release-p50-ns")
	b.ReportMetric(float64(handover.Percentile(50)), "handover-p50-ns")
	b.ReportMetric(float64(handover.Percentile(99)), "handover-p99-ns")
	b.ReportMetric(Ratio(handover.Percentile(50), clusterLease), "handover-vs-lease")
}

// BenchmarkLeaseLapse measures the vacancy a crash leaves at the lease level: A acquires and
// then vanishes without releasing (a kill -9 right after an acquisition or renewal); B tries
// every 100 ms until it wins. Baton itself never polls like this (a check message or the next
// tick contends instead), so this is the floor under every crash failover: lapse-s is the
// time from A's acquire to B's, against the 15 s lease. One trial per iteration.
func BenchmarkLeaseLapse(b *testing.B) {
	var lapse Samples
	for b.Loop() {
		c := blobClient(b, azurite.Shared(b), nil, false).ServiceClient().NewContainerClient(azurite.UniqueName(b, "lapse"))
		newLock := func() *coordinator.BlobLock {
			lk, err := coordinator.NewBlobLock(c, "leader", coordinator.BlobLockOptions{Duration: clusterLease, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			return lk
		}
		ctx := ctxFor(b, time.Minute)
		la, err := newLock().Acquire(ctx, coordinator.Identity{App: "bench", Instance: "a", PID: os.Getpid()})
		if err != nil {
			b.Fatal(err)
		}
		lockB := newLock()
		for {
			_, err := lockB.Acquire(ctx, coordinator.Identity{App: "bench", Instance: "b", PID: os.Getpid()})
			if err == nil {
				break
			}
			if !errors.As(err, new(*coordinator.HeldError)) {
				b.Fatalf("B's Acquire: %v", err)
			}
			select {
			case <-ctx.Done():
				b.Fatalf("A's lease never lapsed: %v", ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
		lapse.Add(time.Since(la.AcquiredAt))
		_, _ = c.Delete(ctxFor(b, time.Minute), nil)
	}
	b.ReportMetric(lapse.Percentile(50).Seconds(), "lapse-s")
	b.ReportMetric(clusterLease.Seconds(), "lease-s")
}

// failoverPartitions keeps the leader enqueueing well past the kill in every failover trial.
const failoverPartitions = 40000

// BenchmarkFailoverCrash kills (SIGKILL) the leading handler process mid-enqueue, at a fixed
// offset after it created the run, on a 2-instance local host with a 15 s lease, and times
// from the kill: the lease becoming free (seen by polling it every 10 ms), the next
// "leadership acquired", and the run's resumption by its check message (the dead-man's switch
// the leader scheduled at run creation for lease + 5 s). The leader renews every 4–5 s. Killed
// at 1 s, before its first renewal, its lease lapses at 15 s and the check at 20 s resumes the
// run: the usual case. Killed at 11 s, after its second renewal, its lease outlives that check,
// which looks again a lease + 5 s later: the worst case.
func BenchmarkFailoverCrash(b *testing.B) {
	for _, at := range []time.Duration{time.Second, 11 * time.Second} {
		b.Run(fmt.Sprintf("kill-at=%s", at), func(b *testing.B) {
			for b.Loop() {
				failoverTrial(b, at, (*devhost.Instance).Kill)
			}
		})
	}
}

// BenchmarkFailoverGraceful sends SIGTERM to the leading handler 1 s into the enqueue: it
// releases the lease on the way out; the run resumes when its check message arrives.
func BenchmarkFailoverGraceful(b *testing.B) {
	for b.Loop() {
		failoverTrial(b, time.Second, (*devhost.Instance).Term)
	}
}

// failoverTrial runs one failover on a fresh 2-instance cluster and reports its metrics.
func failoverTrial(b *testing.B, at time.Duration, stop func(*devhost.Instance) error) {
	b.Helper()
	c := startCluster(b, 2, fmt.Sprintf(`{"partitions":%d}`, failoverPartitions), false)
	run, _ := c.startRun(b)
	created := c.waitLine(b, time.Minute, "run created", func(l devhost.LogLine) bool {
		return l.Msg == "run created" && l.Str("run") == run
	})
	leader, epoch := created.Instance, created.Int("epoch")
	time.Sleep(time.Until(created.Time.Add(at)))
	m, err := c.store.ReadManifest(ctxFor(b, 10*time.Second), run)
	if err != nil || m.PlanDone {
		b.Fatalf("run %s finished enqueueing before the stop (%v): raise failoverPartitions", run, err)
	}
	tStop := time.Now()
	if err := stop(c.h.Instance(leader)); err != nil {
		b.Fatal(err)
	}
	tFree := c.waitLease(b, time.Minute, "free", func(st coordinator.LeaderState) bool { return !st.Held })
	resumed := c.waitLine(b, 2*time.Minute, "the run resumed by a check", func(l devhost.LogLine) bool {
		return l.Msg == "check: resuming a run its leader left mid-enqueue" && l.Str("run") == run
	})
	newEpoch := resumed.Int("epoch")
	acquired := c.waitLine(b, time.Second, "the new leader's acquisition", func(l devhost.LogLine) bool {
		return l.Msg == "leadership acquired" && l.Int("epoch") == newEpoch
	})
	if newEpoch <= epoch {
		b.Fatalf("resumed under epoch %d, not above the crashed leader's %d", newEpoch, epoch)
	}
	// The new leader records its segment in the manifest before enqueueing again.
	deadline := time.Now().Add(30 * time.Second)
	for {
		m, err := c.store.ReadManifest(ctxFor(b, 10*time.Second), run)
		if err == nil && m.Epoch >= newEpoch {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("manifest of %s not taken over by epoch %d: %+v, %v", run, newEpoch, m.Epoch, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	checkDue := created.Time.Add(clusterLease + 5*time.Second)
	b.Logf("run %s: %s (epoch %d) stopped at +%s with %d partitions enqueued; lease free +%s; %s acquired epoch %d +%s; resumed +%s (check due %s after the stop)",
		run, leader, epoch, secs(tStop.Sub(created.Time)), m.Checkpoint.Next, secs(tFree.Sub(tStop)), acquired.Instance, newEpoch,
		secs(acquired.Time.Sub(tStop)), secs(resumed.Time.Sub(tStop)), secs(checkDue.Sub(tStop)))
	b.ReportMetric(tStop.Sub(created.Time).Seconds(), "stop-at-s")
	b.ReportMetric(tFree.Sub(tStop).Seconds(), "lease-free-s")
	b.ReportMetric(acquired.Time.Sub(tStop).Seconds(), "new-leader-s")
	b.ReportMetric(resumed.Time.Sub(tStop).Seconds(), "resumed-s")
	b.ReportMetric(clusterLease.Seconds(), "lease-s")
	b.ReportMetric(resumed.Time.Sub(tStop).Seconds()/clusterLease.Seconds(), "resumed-vs-lease")
	c.close(b)
}
