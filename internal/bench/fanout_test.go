package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/enginejob"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/election/bloblease"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/blobstore"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/internal/engine/transport/storagequeue"
	"github.com/batonfn/baton/internal/tools/azurite"
	"github.com/batonfn/baton/work"
	"github.com/batonfn/baton/work/synthetic"
)

// BenchmarkFanOut measures a leader planning and enqueueing a synthetic run of 1,000 and
// 10,000 partitions on the Storage-queue transport, wired as the handler wires it (15 s lease,
// QueueSender defaults, plan batches of config.DefaultEnqueueBatch, the SDK's default HTTP
// client): the run is created (an ad-hoc run, Coordinator.StartManual) and its start check
// delivered (Coordinator.Check), which takes the run's own lease, plans and sends every
// partition, and releases the lease. One run per iteration on a fresh Azurite.
//
// Metrics: partitions/s from the start to the release; the same rate over the first and the
// last tenth of the partitions sent (Azurite's in-memory queue slows down as it fills); leader
// blob and queue calls per partition; CPU of Azurite and of the leader (this process) as a
// percentage of one core.
func BenchmarkFanOut(b *testing.B) {
	for _, n := range sizes(1000, 10000) {
		b.Run(fmt.Sprintf("partitions=%d", n), func(b *testing.B) {
			for b.Loop() {
				fanOut(b, n)
			}
		})
	}
}

// BenchmarkFanOut100000 is BenchmarkFanOut for 100,000 partitions (about three minutes here).
func BenchmarkFanOut100000(b *testing.B) {
	if testing.Short() {
		b.Skip("-short: BenchmarkFanOut runs the same code on 1,000 partitions")
	}
	for b.Loop() {
		fanOut(b, 100000)
	}
}

// timedSender wraps the queue sender and notes when each Send (one plan batch) completed.
type timedSender struct {
	next coordinator.Sender

	mu     sync.Mutex
	start  time.Time
	points []sendPoint
	sent   int // partitions, counted from the envelopes (a bundle carries several)
	msgs   int // partition messages
	checks int // check messages
	bad    error
}

// sendPoint is the number of partitions sent when a Send completed.
type sendPoint struct {
	at   time.Time
	sent int
}

func (s *timedSender) Send(ctx context.Context, msgs []transport.Message) error {
	s.mu.Lock()
	if s.start.IsZero() {
		s.start = time.Now()
	}
	s.mu.Unlock()
	if err := s.next.Send(ctx, msgs); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		env, err := work.DecodeEnvelope(m.Body)
		switch {
		case err != nil:
			s.bad = fmt.Errorf("message %s: %w", m.ID, err)
		case env.Kind == work.KindPartition:
			s.msgs++
			s.sent += max(env.Count, 1)
		case env.Kind == work.KindCheck:
			s.checks++
		}
	}
	s.points = append(s.points, sendPoint{time.Now(), s.sent})
	return nil
}

// edgeRates are the partitions/s of the first Sends that reach a tenth of the partitions and
// of the last Sends from nine tenths on, at plan-batch granularity.
func (s *timedSender) edgeRates() (first, last float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.points) == 0 {
		return 0, 0
	}
	total := s.points[len(s.points)-1].sent
	prev := sendPoint{at: s.start}
	for _, p := range s.points {
		if p.sent > 0 && p.sent*10 >= total {
			first = float64(p.sent) / p.at.Sub(s.start).Seconds()
			break
		}
	}
	for _, p := range s.points {
		if p.sent*10 <= total*9 && p.sent < total {
			prev = p
		}
	}
	end := s.points[len(s.points)-1]
	last = float64(end.sent-prev.sent) / end.at.Sub(prev.at).Seconds()
	return first, last
}

func fanOut(b *testing.B, n int) {
	b.Helper()
	t0 := time.Now()
	srv := privateAzurite(b)
	b.Logf("azurite ready in %s", time.Since(t0).Round(time.Millisecond))
	defer func() {
		t0 := time.Now()
		srv.Stop()
		b.Logf("azurite stopped in %s", time.Since(t0).Round(time.Millisecond))
	}()
	azuriteStats := azuriteProc(b, srv)
	var blobCalls, queueCalls counter
	blobs := blobClient(b, srv, &blobCalls, false).ServiceClient()
	q := queueClient(b, srv, &queueCalls, false).NewQueueClient(azurite.UniqueName(b, "work"))
	quiet := slog.New(slog.DiscardHandler)
	id := ledger.Holder{App: "bench", Instance: "leader", PID: os.Getpid()}

	leases := blobs.NewContainerClient("leases")
	lockOpts := bloblease.BlobLockOptions{Duration: clusterLease, Logger: quiet}
	lock, err := bloblease.NewBlobLock(leases, "baton-leader", lockOpts)
	if err != nil {
		b.Fatal(err)
	}
	leader, err := election.NewLeader(election.LeaderConfig{Lock: lock, Identity: id, LeaseDuration: clusterLease, Logger: quiet,
		Locks: func(name string) (election.Lock, error) { return bloblease.NewBlobLock(leases, name, lockOpts) }})
	if err != nil {
		b.Fatal(err)
	}
	store := blobstore.New(blobs.NewContainerClient("runs"), blobstore.Options{})
	jobs := work.NewRegistry()
	jobs.Register(synthetic.Name, enginejob.Of(synthetic.New()))
	sender := &timedSender{next: storagequeue.NewQueueSender(q, storagequeue.QueueSenderOptions{})}
	coord, err := coordinator.New(coordinator.Config{Leader: leader, Store: store, Sender: sender, Jobs: jobs,
		Identity: id, BatchSize: config.DefaultEnqueueBatch, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}

	ctx := ctxFor(b, 15*time.Minute)
	az0, self0 := azuriteStats(), selfCPU()
	start := time.Now()
	out, err := coord.StartManual(ctx, coordinator.ManualRequest{Job: synthetic.Name, Params: json.RawMessage(fmt.Sprintf(`{"partitions":%d}`, n))})
	if err != nil || out.Status != coordinator.StatusStarted {
		b.Fatalf("start: %+v, %v", out, err)
	}
	check := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindCheck, Run: out.Run, Round: 1}
	if err := coord.Check(ctx, check, work.Delivery{Count: 1}); err != nil {
		b.Fatalf("start check: %v", err)
	}
	wall := time.Since(start)
	az1, self1 := azuriteStats(), selfCPU()
	m, err := store.ReadManifest(ctx, out.Run)
	if err != nil || !m.PlanDone || m.Partitions != n {
		b.Fatalf("manifest after the start check: plan done %v, %d partitions (%v); want %d", m.PlanDone, m.Partitions, err, n)
	}
	// Without a control queue the checks travel on the work queue (the start check, the
	// chain's next one), all through the sender.
	// Partitions go in bundles: the sender counts the partitions the envelopes carry.
	sender.mu.Lock()
	parts, msgs, checks, bad := sender.sent, sender.msgs, sender.checks, sender.bad
	sender.mu.Unlock()
	if bad != nil || parts != n {
		b.Fatalf("the leader sent %d partitions in %d messages (%v), want %d partitions", parts, msgs, bad, n)
	}
	props, err := q.GetProperties(ctx, nil)
	if err != nil || props.ApproximateMessagesCount == nil || int(*props.ApproximateMessagesCount) != msgs+checks {
		got := -1
		if props.ApproximateMessagesCount != nil {
			got = int(*props.ApproximateMessagesCount)
		}
		b.Fatalf("queue holds %d messages (%v), want the %d partition messages and %d checks sent", got, err, msgs, checks)
	}
	b.ReportMetric(float64(n)/float64(msgs), "partitions/message")
	b.ReportMetric(float64(n)/wall.Seconds(), "partitions/s")
	first, last := sender.edgeRates()
	b.ReportMetric(first, "first-tenth-partitions/s")
	b.ReportMetric(last, "last-tenth-partitions/s")
	b.ReportMetric(float64(blobCalls.n.Load())/float64(n), "leader-blob-calls/partition")
	// The queue client also made the GetProperties above: leave it out.
	b.ReportMetric(float64(queueCalls.n.Load()-1)/float64(n), "leader-queue-calls/partition")
	b.ReportMetric(cpuShare(az1.CPU-az0.CPU, wall), "azurite-cpu-%")
	b.ReportMetric(cpuShare(self1-self0, wall), "leader-cpu-%")
}
