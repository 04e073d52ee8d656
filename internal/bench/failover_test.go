package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/election/bloblease"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/internal/engine/transport/storagequeue"
	"github.com/batonfn/baton/internal/tools/azurite"
	"github.com/batonfn/baton/internal/tools/devhost"
	"github.com/batonfn/baton/work"
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
// local host with a 15 s lease, whose planner (the holder of the run's own lease) is stopped
// again and again mid-enqueue.
const (
	failoverKills   = 20     // kill -9s of the leading handler
	failoverTerms   = 10     // SIGTERMs of the leading handler: every third stop
	failoverBacklog = 10_000 // partitions waiting in the work queue before the run starts
	// failoverBatch makes the run's leaders enqueue slowly (a few hundred partitions a second), so
	// the backlog stays near failoverBacklog: every Azurite dequeue, on any queue of the
	// account, scans all of its messages, so a backlog growing without bound would measure
	// Azurite, not Baton.
	failoverBatch = 2
	// failoverPartitions keeps the run planning through every stop.
	failoverPartitions = 100_000
)

// resumeLine is what the coordinator logs when a check takes over a run left mid-enqueue.
const resumeLine = "check: resuming a run its leader left mid-enqueue"

// BenchmarkFailover stops the leading handler process mid-enqueue failoverKills times with
// SIGKILL and failoverTerms times with SIGTERM, interleaved (kill, kill, SIGTERM, ...) so that
// both kinds meet the same range of backlogs, each 0.5–5.5 s (uniformly random, so at
// every phase of its 4–5 s renew interval) after it took the lease, and times the run's
// resumption by another instance's check. The work queue has no consumer (WorkQueue is
// disabled): failoverBacklog partitions of another run wait in it from the start, and the
// run's own partitions pile up behind them, while the checks travel on the control queue.
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
		config.SettingEnqueueBatch:        fmt.Sprint(failoverBatch),
		// No waves: with nobody working the queue, a capped backlog would end each leadership
		// at the cap (release, wave check) instead of keeping the run mid-enqueue.
		config.SettingMaxBacklog: "0",
	})
	backlogSize := sized(failoverBacklog, 500)
	c.fillWorkQueue(b, backlogSize)
	run, _ := c.startRun(b)
	// The run's first planner: the start check that took the run's own lease.
	created := c.waitLine(b, time.Minute, "planning the run", func(l devhost.LogLine) bool {
		return l.Msg == "planning the run" && l.Str("run") == run
	})
	leader, epoch, since := created.Instance, created.Int("epoch"), created.Time
	start := since
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 13))
	var afterExpiry, afterKill, handover Samples
	var backlog []int
	for i := range sized(failoverKills+failoverTerms, 3) {
		graceful := i%3 == 2
		time.Sleep(time.Until(since.Add(500*time.Millisecond + time.Duration(rng.Int64N(int64(5*time.Second))))))
		m, err := c.store.ReadManifest(ctxFor(b, 10*time.Second), run)
		if err != nil || m.PlanDone || m.Epoch != epoch {
			b.Fatalf("stop %d: run %s planDone %v epoch %d (want %d), %v: raise failoverPartitions", i, run, m.PlanDone, m.Epoch, epoch, err)
		}
		backlog = append(backlog, backlogSize+m.Checkpoint.Next)
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
			expiry := c.lastConfirmed(b, run, leader, epoch).Add(clusterLease)
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
			strings.HasPrefix(l.Msg, "handover: check sent")) {
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

// fillWorkQueue sends n partition messages of a run nobody processes to the work queue.
func (c *cluster) fillWorkQueue(b *testing.B, n int) {
	b.Helper()
	cfg := c.h.Config()
	qs, err := azclient.Queue(cfg.Storage, nil)
	if err != nil {
		b.Fatal(err)
	}
	s := storagequeue.NewQueueSender(qs.NewQueueClient(cfg.WorkQueue), storagequeue.QueueSenderOptions{})
	defer s.Close(context.Background())
	ctx := ctxFor(b, 5*time.Minute)
	for first := 0; first < n; first += 500 {
		var msgs []transport.Message
		for i := first; i < min(first+500, n); i++ {
			env := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindPartition, Run: "backlog", Epoch: 1, Part: i,
				Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
			body, err := env.Encode()
			if err != nil {
				b.Fatal(err)
			}
			msgs = append(msgs, transport.Message{ID: env.MessageID(), Body: body})
		}
		if err := s.Send(ctx, msgs); err != nil {
			b.Fatalf("fill the work queue: %v", err)
		}
	}
}

// lastConfirmed is when the planner of epoch on instance last had run's own lease confirmed:
// its last renewal line, else its acquisition line (each logged once the storage call returned).
func (c *cluster) lastConfirmed(b *testing.B, run, instance string, epoch int64) time.Time {
	b.Helper()
	var at time.Time
	for _, l := range c.h.Lines() {
		if l.Instance == instance && l.Str("lease") == ledger.RunLeaseName(run) && l.Int("epoch") == epoch &&
			(l.Msg == "lease renewed" || l.Msg == "leadership acquired") && l.Time.After(at) {
			at = l.Time
		}
	}
	if at.IsZero() {
		b.Fatalf("no acquisition or renewal of epoch %d of %s by %s in the log %s", epoch, ledger.RunLeaseName(run), instance, c.logPath)
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
