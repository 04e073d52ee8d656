package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/election/bloblease"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/blobstore"
	"github.com/batonfn/baton/internal/engine/transport/storagequeue"
	"github.com/batonfn/baton/internal/tools/azurite"
	"github.com/batonfn/baton/work"
)

// benchClock is the coordinators' clock in a heartbeat benchmark: frozen at a time (no run's
// bound ever passes while it is measured) or running at the real rate from a time (the
// heartbeat's driving budget is spent on it).
type benchClock struct {
	mu        sync.Mutex
	at, since time.Time // since zero: frozen at at
}

func (c *benchClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.since.IsZero() {
		return c.at
	}
	return c.at.Add(time.Since(c.since))
}

func (c *benchClock) freeze(t time.Time) { c.mu.Lock(); c.at, c.since = t, time.Time{}; c.mu.Unlock() }

func (c *benchClock) runFrom(t time.Time) { c.mu.Lock(); c.at, c.since = t, time.Now(); c.mu.Unlock() }

// heartbeatWorld is one ledger on Azurite's blob store (its runs and leases containers, and a
// work queue), every request counted per client: the runs container (the ledger), the leases
// container (the scheduler's and the runs' leases) and the queue.
type heartbeatWorld struct {
	b            *testing.B
	clock        *benchClock
	ledgerCalls  *countPolicy
	leaseCalls   *countPolicy
	queueCalls   *countPolicy
	runs, leases *container.Client
	queue        *azqueue.QueueClient
	jobs         *work.Registry
	store        *blobstore.Store
	runIDs       []string
	leaseDur     time.Duration
}

func newHeartbeatWorld(b *testing.B, t0 time.Time) *heartbeatWorld {
	b.Helper()
	srv := azurite.Shared(b)
	w := &heartbeatWorld{b: b, clock: &benchClock{}, ledgerCalls: &countPolicy{}, leaseCalls: &countPolicy{}, queueCalls: &countPolicy{},
		jobs: work.NewRegistry(), leaseDur: 30 * time.Second}
	w.clock.freeze(t0)
	w.jobs.Register("count", &countJob{})
	blobClient := func(p *countPolicy) *azblob.Client {
		c, err := azclient.Blob(srv.Storage(), &azblob.ClientOptions{ClientOptions: policy.ClientOptions{PerCallPolicies: []policy.Policy{p}}})
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	w.runs = blobClient(w.ledgerCalls).ServiceClient().NewContainerClient(azurite.UniqueName(b, "hruns"))
	w.leases = blobClient(w.leaseCalls).ServiceClient().NewContainerClient(azurite.UniqueName(b, "hlease"))
	qs, err := azclient.Queue(srv.Storage(), &azqueue.ClientOptions{ClientOptions: policy.ClientOptions{PerCallPolicies: []policy.Policy{w.queueCalls}}})
	if err != nil {
		b.Fatal(err)
	}
	w.queue = qs.NewQueueClient(azurite.UniqueName(b, "hwork"))
	w.store = blobstore.New(w.runs, blobstore.Options{Now: w.clock.Now})
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = w.runs.Delete(ctx, nil)
		_, _ = w.leases.Delete(ctx, nil)
		_, _ = w.queue.Delete(ctx, nil)
	})
	return w
}

// coordinator is an instance over the world's ledger, its checks and partitions sent by sender
// (the work queue when nil), heartbeating every period (a quarter of it, at least 5 s, is its
// driving budget).
func (w *heartbeatWorld) coordinator(name string, sender Sender, period time.Duration) *Coordinator {
	w.b.Helper()
	opts := bloblease.BlobLockOptions{Duration: w.leaseDur, Logger: slog.New(slog.DiscardHandler)}
	lock, err := bloblease.NewBlobLock(w.leases, "leader", opts)
	if err != nil {
		w.b.Fatal(err)
	}
	id := ledger.Holder{App: "bench", Instance: name, PID: 1}
	ld, err := election.NewLeader(election.LeaderConfig{Lock: lock, Identity: id, LeaseDuration: w.leaseDur,
		Locks:  func(name string) (election.Lock, error) { return bloblease.NewBlobLock(w.leases, name, opts) },
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		w.b.Fatal(err)
	}
	if sender == nil {
		sender = storagequeue.NewQueueSender(w.queue, storagequeue.QueueSenderOptions{})
	}
	c, err := New(Config{Leader: ld, Store: w.store, Sender: sender, Jobs: w.jobs, Identity: id, CheckRounds: 3,
		HeartbeatPeriod: period, Now: w.clock.Now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		w.b.Fatal(err)
	}
	return c
}

// seed creates active runs in progress whose start checks are lost (so only supervision can
// plan them), and finished records of earlier runs, 16 at a time; then it marks the index's
// backfill done, as a ledger indexed from the start.
func (w *heartbeatWorld) seed(active, finished int) {
	w.b.Helper()
	ctx := context.Background()
	starter := w.coordinator("starter", &memSender{}, time.Minute)
	if err := w.store.EnsureContainer(ctx); err != nil {
		w.b.Fatal(err)
	}
	var mu sync.Mutex
	var firstErr error
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range jobs {
				var err error
				if i < active {
					var out Outcome
					out, err = starter.StartManual(ctx, ManualRequest{Job: "count", Params: json.RawMessage(`{"n":1}`)})
					if err == nil {
						mu.Lock()
						w.runIDs = append(w.runIDs, out.Run)
						mu.Unlock()
					}
				} else {
					now := w.clock.Now().Add(-time.Hour)
					err = w.store.CreateManifest(ctx, &ledger.Manifest{RunID: ledger.ManualRunID("", now), Trigger: ledger.TriggerManual,
						Job: "count", Params: json.RawMessage(`{"n":1}`), State: ledger.StateSucceeded, PlanDone: true, Partitions: 1,
						Succeeded: 1, Created: now, Finished: now})
				}
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
				}
			}
		})
	}
	for i := range active + finished {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		w.b.Fatal(firstErr)
	}
	if err := w.store.WriteBackfill(ctx, ledger.Backfill{Done: true}); err != nil {
		w.b.Fatal(err)
	}
}

// counts is the requests of each client since the last reset.
type counts struct{ ledger, lease, queue int64 }

func (w *heartbeatWorld) take() counts {
	return counts{w.ledgerCalls.n.Swap(0), w.leaseCalls.n.Swap(0), w.queueCalls.n.Swap(0)}
}

// heartbeat beats once on c and fails the benchmark unless c held the scheduler lease and
// found due exactly the runs expected.
func (w *heartbeatWorld) heartbeat(c *Coordinator, due int) {
	w.b.Helper()
	out, err := c.Heartbeat(context.Background())
	if err != nil || out.Status != StatusStarted || out.Supervised != due {
		w.b.Fatalf("heartbeat: %+v, %v; want the lease held and %d runs due", out, err, due)
	}
}

// heartbeatsPerOp is how many heartbeats one iteration of a waiting case beats.
const heartbeatsPerOp = 10

// BenchmarkHeartbeat_ActiveRuns measures supervision's cost per heartbeat on the blob store
// (Azurite), with active=N runs in progress (ad-hoc runs whose start checks were lost) and, in
// one case, 1,000 finished runs beside them. A heartbeat without schedules is supervision
// alone: each schedule adds its state's read, and each occurrence decided a few calls.
//
//   - waiting: no run is due yet (the clock is frozen before their bound). The instance's
//     first heartbeat (its memory empty: it reads each run once) is reported as first-*; an
//     iteration is then heartbeatsPerOp heartbeats.
//   - due: every run is past its bound (its start + a check delay, and no planner took it);
//     an iteration is one heartbeat of a fresh instance on a freshly seeded ledger: it lists
//     the index, reads each run, and drives them one by one, planning each, until its budget
//     is spent (a quarter of the heartbeat's period, at least 5 s: 15 s at the 1-minute
//     heartbeat, 5 s at 20 s). driven/heartbeat counts the runs a planner took; the next
//     heartbeat drives the rest.
//
// ledger-calls are the runs container's requests, lease-calls the leases container's (the
// scheduler lease, and the runs' leases the driving takes), queue-calls the work queue's.
func BenchmarkHeartbeat_ActiveRuns(b *testing.B) {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct{ active, finished int }{{1, 0}, {100, 0}, {1000, 0}, {100, 1000}} {
		name := fmt.Sprintf("active=%d", tc.active)
		if tc.finished > 0 {
			name += fmt.Sprintf(",finished=%d", tc.finished)
		}
		b.Run(name+"/waiting", func(b *testing.B) {
			w := newHeartbeatWorld(b, t0)
			w.seed(tc.active, tc.finished)
			c := w.coordinator("bench", nil, time.Minute)
			w.take()
			start := time.Now()
			w.heartbeat(c, 0)
			first, firstTime := w.take(), time.Since(start)
			beats := 0
			var elapsed time.Duration
			for b.Loop() {
				start := time.Now()
				for range heartbeatsPerOp {
					w.heartbeat(c, 0)
				}
				elapsed += time.Since(start)
				beats += heartbeatsPerOp
			}
			n := w.take()
			per := float64(beats)
			b.ReportMetric(float64(elapsed.Microseconds())/1000/per, "ms/heartbeat")
			b.ReportMetric(float64(n.ledger)/per, "ledger-calls/heartbeat")
			b.ReportMetric(float64(n.lease)/per, "lease-calls/heartbeat")
			b.ReportMetric(float64(firstTime.Microseconds())/1000, "first-ms")
			b.ReportMetric(float64(first.ledger), "first-ledger-calls")
		})
		if tc.finished > 0 {
			continue
		}
		b.Run(name+"/due", func(b *testing.B) { benchDue(b, t0, tc.active, time.Minute) })
	}
	// A heartbeat every 20 s drives for 5 s at most (the floor, heartbeatSlice): the budget,
	// not the runs due, bounds the heartbeat.
	b.Run("active=1000/due,heartbeat=20s", func(b *testing.B) { benchDue(b, t0, 1000, 20*time.Second) })
}

// benchDue is BenchmarkHeartbeat_ActiveRuns's due case: active runs all past their bound, one
// heartbeat of a fresh instance heartbeating every period on a freshly seeded ledger per
// iteration.
func benchDue(b *testing.B, t0 time.Time, active int, period time.Duration) {
	var elapsed time.Duration
	var total counts
	driven := 0
	for range b.N {
		b.StopTimer()
		w := newHeartbeatWorld(b, t0)
		w.seed(active, 0)
		c := w.coordinator("bench", nil, period)
		w.clock.runFrom(t0.Add(c.checkDelay() + time.Minute))
		w.take()
		b.StartTimer()
		start := time.Now()
		out, err := c.Heartbeat(context.Background())
		elapsed += time.Since(start)
		b.StopTimer()
		// The heartbeat drives due runs until its budget is spent: all of them, or as many as
		// the budget allowed (the next heartbeat drives the rest).
		if err != nil || out.Status != StatusStarted || out.Supervised < 1 || out.Supervised > active {
			b.Fatalf("heartbeat: %+v, %v; want the lease held and 1 to %d runs driven", out, err, active)
		}
		n := w.take()
		took := 0
		total.ledger, total.lease, total.queue = total.ledger+n.ledger, total.lease+n.lease, total.queue+n.queue
		for _, run := range w.runIDs {
			m, err := w.store.ReadManifest(context.Background(), run)
			if err != nil {
				b.Fatal(err)
			}
			if m.Epoch > 0 { // a planner took it: only the heartbeat could
				driven++
				took++
			}
		}
		if took != out.Supervised {
			b.Fatalf("the heartbeat says it drove %d runs, %d were taken by a planner", out.Supervised, took)
		}
		b.StartTimer()
	}
	per := float64(b.N)
	b.ReportMetric(float64(elapsed.Microseconds())/1000/per, "ms/heartbeat")
	b.ReportMetric(float64(driven)/per, "driven/heartbeat")
	b.ReportMetric(float64(total.ledger)/per, "ledger-calls/heartbeat")
	b.ReportMetric(float64(total.lease)/per, "lease-calls/heartbeat")
	b.ReportMetric(float64(total.queue)/per, "queue-calls/heartbeat")
}
