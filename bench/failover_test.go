package bench

import (
	"context"
	"errors"
	"fmt"
	"github.com/batonfn/baton/election"
	"github.com/batonfn/baton/election/bloblease"
	"log/slog"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/config"
	"github.com/batonfn/baton/internal/azurite"
	"github.com/batonfn/baton/internal/devhost"
	"github.com/batonfn/baton/ledger"
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
		newLock := func() *bloblease.BlobLock {
			lk, err := bloblease.NewBlobLock(c, "leader", bloblease.BlobLockOptions{Duration: clusterLease, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			return lk
		}
		lockA, lockB := newLock(), newLock()
		idB := ledger.Holder{App: "bench", Instance: "b", PID: os.Getpid()}
		for i := range handoverTrials + 1 { // the first trial creates the blob and is not counted
			ctx := ctxFor(b, time.Minute)
			a, err := election.NewLeader(election.LeaderConfig{Lock: lockA, LeaseDuration: clusterLease,
				Identity: ledger.Holder{App: "bench", Instance: "a", PID: os.Getpid()}, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			acquired, ran := make(chan struct{}), make(chan error, 1)
			go func() {
				ran <- a.RunAsLeader(ctx, func(ctx context.Context, _ election.Lease, _ func()) error {
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
			if err := <-ran; !errors.Is(err, election.ErrHandover) {
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
		newLock := func() *bloblease.BlobLock {
			lk, err := bloblease.NewBlobLock(c, "leader", bloblease.BlobLockOptions{Duration: clusterLease, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			return lk
		}
		ctx := ctxFor(b, time.Minute)
		la, err := newLock().Acquire(ctx, ledger.Holder{App: "bench", Instance: "a", PID: os.Getpid()})
		if err != nil {
			b.Fatal(err)
		}
		lockB := newLock()
		for {
			_, err := lockB.Acquire(ctx, ledger.Holder{App: "bench", Instance: "b", PID: os.Getpid()})
			if err == nil {
				break
			}
			if !errors.As(err, new(*election.HeldError)) {
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

// Failover chain: one run that never finishes planning during the benchmark, on a 3-instance
// local host with a 15 s lease, whose leader is stopped again and again mid-enqueue.
const (
	failoverKills   = 20     // kill -9s of the leading handler
	failoverTerms   = 10     // SIGTERMs of the leading handler, after the kills
	failoverBacklog = 10_000 // partitions in the work queue before the first stop
	// failoverPartitions keeps the run planning through every stop (about 1,000 enqueued per
	// second; each leader leads 0.5–5.5 s before it is stopped).
	failoverPartitions = 300_000
)

// resumeLine is what the coordinator logs when a check takes over a run left mid-enqueue.
const resumeLine = "check: resuming a run its leader left mid-enqueue"

// BenchmarkFailover stops the leading handler process mid-enqueue failoverKills times with
// SIGKILL and then failoverTerms times with SIGTERM, each 0.5–5.5 s (uniformly random, so at
// every phase of its 4–5 s renew interval) after it took the lease, and times the run's
// resumption by another instance's check. The work queue has no consumer (WorkQueue is
// disabled), so it holds the whole backlog — at least failoverBacklog partitions, growing with
// every leader — while the checks travel on the control queue.
//
// Metrics: after-expiry-* is resumed − the killed leader's lease expiry (its last acquire or
// renewal, as logged once confirmed, + the lease); after-kill-* is resumed − kill; handover-*
// is resumed − SIGTERM. control-msgs-per-leader-min counts the check messages the leaders
// scheduled (lease probes, chain checks, handover checks) per minute of enqueueing.
func BenchmarkFailover(b *testing.B) {
	for b.Loop() {
		failoverChain(b)
	}
}

func failoverChain(b *testing.B) {
	c := startClusterWith(b, 3, fmt.Sprintf(`{"partitions":%d}`, failoverPartitions), false, map[string]string{
		config.SettingLogLevel:            "debug", // renewals are logged at debug
		"AzureWebJobs.WorkQueue.Disabled": "true",
	})
	run, _ := c.startRun(b)
	created := c.waitLine(b, time.Minute, "run created", func(l devhost.LogLine) bool {
		return l.Msg == "run created" && l.Str("run") == run
	})
	c.waitManifest(b, run, 2*time.Minute, fmt.Sprintf("%d partitions enqueued", failoverBacklog), func(m ledger.Manifest) bool {
		return m.Checkpoint.Next >= failoverBacklog
	})
	leader, epoch, since := created.Instance, created.Int("epoch"), time.Now()
	start := since
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 13))
	var afterExpiry, afterKill, handover Samples
	var backlog []int
	for i := range failoverKills + failoverTerms {
		graceful := i >= failoverKills
		time.Sleep(time.Until(since.Add(500*time.Millisecond + time.Duration(rng.Int64N(int64(5*time.Second))))))
		m, err := c.store.ReadManifest(ctxFor(b, 10*time.Second), run)
		if err != nil || m.PlanDone || m.Epoch != epoch {
			b.Fatalf("stop %d: run %s planDone %v epoch %d (want %d), %v: raise failoverPartitions", i, run, m.PlanDone, m.Epoch, epoch, err)
		}
		backlog = append(backlog, m.Checkpoint.Next)
		in := c.h.Instance(leader)
		_, oldPID := in.State()
		tStop := time.Now()
		stop := in.Kill
		if graceful {
			stop = in.Term
		}
		if err := stop(); err != nil {
			b.Fatal(err)
		}
		resumed := c.waitLine(b, 2*time.Minute, "the run resumed by a check", func(l devhost.LogLine) bool {
			return l.Msg == resumeLine && l.Str("run") == run && l.Int("epoch") > epoch
		})
		if graceful {
			handover.Add(resumed.Time.Sub(tStop))
		} else {
			expiry := c.lastConfirmed(b, leader, epoch).Add(clusterLease)
			afterExpiry.Add(resumed.Time.Sub(expiry))
			afterKill.Add(resumed.Time.Sub(tStop))
		}
		b.Logf("stop %d (%s): %s epoch %d at %d enqueued, %s into its leadership; resumed by %s epoch %d %s after the stop",
			i+1, map[bool]string{false: "kill -9", true: "SIGTERM"}[graceful], leader, epoch, m.Checkpoint.Next,
			secs(tStop.Sub(since)), resumed.Instance, resumed.Int("epoch"), secs(resumed.Time.Sub(tStop)))
		c.waitRunning(b, in, oldPID)
		leader, epoch, since = resumed.Instance, resumed.Int("epoch"), resumed.Time
	}
	elapsed := time.Since(start)
	control := 0
	for _, l := range c.h.Lines() {
		if l.Str("run") == run && (l.Msg == "lease probe scheduled" || l.Msg == "check scheduled" ||
			strings.HasPrefix(l.Msg, "handover: lease released")) {
			control++
		}
	}
	sort.Ints(backlog)
	b.Logf("backlog in the work queue at the stops: %d–%d partitions; %d control messages in %s",
		backlog[0], backlog[len(backlog)-1], control, secs(elapsed))
	b.ReportMetric(float64(afterExpiry.Len()), "kills")
	b.ReportMetric(afterExpiry.Percentile(50).Seconds(), "after-expiry-p50-s")
	b.ReportMetric(afterExpiry.Percentile(95).Seconds(), "after-expiry-p95-s")
	b.ReportMetric(afterExpiry.Percentile(100).Seconds(), "after-expiry-max-s")
	b.ReportMetric(afterKill.Percentile(50).Seconds(), "after-kill-p50-s")
	b.ReportMetric(afterKill.Percentile(95).Seconds(), "after-kill-p95-s")
	b.ReportMetric(afterKill.Percentile(100).Seconds(), "after-kill-max-s")
	b.ReportMetric(float64(handover.Len()), "terms")
	b.ReportMetric(handover.Percentile(50).Seconds(), "handover-p50-s")
	b.ReportMetric(handover.Percentile(95).Seconds(), "handover-p95-s")
	b.ReportMetric(float64(backlog[0]), "min-backlog")
	b.ReportMetric(float64(control)/elapsed.Minutes(), "control-msgs-per-leader-min")
	b.ReportMetric(clusterLease.Seconds(), "lease-s")
	c.close(b)
}

// waitManifest polls the run's manifest until cond holds.
func (c *cluster) waitManifest(b *testing.B, run string, d time.Duration, what string, cond func(ledger.Manifest) bool) ledger.Manifest {
	b.Helper()
	ctx := ctxFor(b, d)
	for {
		m, err := c.store.ReadManifest(ctx, run)
		if err == nil && cond(m) {
			return m
		}
		select {
		case <-ctx.Done():
			b.Fatalf("run %s: waiting for %s: %v (last %+v, %v; log: %s)", run, what, ctx.Err(), m.Checkpoint, err, c.logPath)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// lastConfirmed is when the leader of epoch on instance last had its lease confirmed: its last
// renewal line, else its acquisition line (each logged once the storage call returned).
func (c *cluster) lastConfirmed(b *testing.B, instance string, epoch int64) time.Time {
	b.Helper()
	var at time.Time
	for _, l := range c.h.Lines() {
		if l.Instance == instance && l.Int("epoch") == epoch && (l.Msg == "lease renewed" || l.Msg == "leadership acquired") && l.Time.After(at) {
			at = l.Time
		}
	}
	if at.IsZero() {
		b.Fatalf("no acquisition or renewal of epoch %d by %s in the log %s", epoch, instance, c.logPath)
	}
	return at
}

// waitRunning waits for a stopped instance to run a new process (not oldPID), reviving it
// when the host gave it up (three exits within its window).
func (c *cluster) waitRunning(b *testing.B, in *devhost.Instance, oldPID int) {
	b.Helper()
	ctx := ctxFor(b, time.Minute)
	revived := false
	for {
		switch st, pid := in.State(); {
		case st == devhost.StateRunning && pid != oldPID:
			return
		case st == devhost.StateFailed && !revived:
			if err := in.Restart(ctx); err != nil {
				b.Fatalf("revive %s: %v", in.Name(), err)
			}
			revived = true
		}
		select {
		case <-ctx.Done():
			b.Fatalf("%s did not come back: %v", in.Name(), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
