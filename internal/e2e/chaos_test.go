package e2e_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/tools/azurite"
	"github.com/batonfn/baton/internal/tools/devhost"
	"github.com/batonfn/baton/internal/tools/soak"
	"github.com/batonfn/baton/work"
)

// slowEnqueue makes the leader's enqueue take a while: 400 partitions, 4 per batch (100 plan
// batches, each stored, sent and checkpointed).
//
// slowEnqueueBudget bounds such a run, with a takeover: the leader paces its enqueue when
// storage shows strain, up to 2 s before each batch, and on a loaded machine Azurite does
// (a load average of 13 on 2 cores paced every batch by the full 2 s, 200 s for the 100), so
// the budget is that plus the run's own time and a failover, not what a quiet machine takes.
const (
	slowEnqueueParts  = 400
	slowEnqueueParams = `{"partitions":400}`
	slowEnqueueBatch  = 4
	slowEnqueueBudget = 6 * time.Minute
)

// waitMidEnqueue waits until the run has checkpointed at least `batches` plan batches while
// planning is still going on, and returns that manifest.
func waitMidEnqueue(ctx context.Context, t *testing.T, c *cluster, run string, batches int) ledger.Manifest {
	t.Helper()
	var m ledger.Manifest
	err := waitFor(ctx, 5*time.Millisecond, "run "+run+" mid-enqueue", func() (bool, error) {
		var err error
		m, err = c.store.ReadManifest(ctx, run)
		if err != nil {
			return false, nil
		}
		if m.PlanDone {
			return false, fmt.Errorf("planning finished before the chaos could strike (checkpoint %+v): make the enqueue slower", m.Checkpoint)
		}
		return m.Checkpoint.Batches >= batches, nil
	})
	if err != nil || m.PlanDone {
		t.Fatalf("%v", err)
	}
	return m
}

// planner starts a run now and waits for its planning to begin: the line "planning the run",
// logged by the check that took the run's own lease (leases/runs/<run>). It returns the run, a
// sampler of the run's lease blob (started before the planning could begin) and that line,
// whose epoch is the planner's on the run's lease.
func planner(ctx context.Context, t *testing.T, c *cluster) (string, *leaseSampler, devhost.LogLine) {
	t.Helper()
	run := c.startRun(ctx)
	rs := c.sampleRun(run)
	l, err := c.h.WaitLine(ctx, func(l devhost.LogLine) bool { return l.Msg == "planning the run" && l.Str("run") == run })
	if err != nil {
		t.Fatal(err)
	}
	return run, rs, l
}

// TestChaos_KillLeaderMidEnqueue: kill -9 the run's planner while it is enqueueing. The lease
// probe it scheduled at its last renewal of the run's lease arrives on the control queue just
// after that lease lapses (the lease's floor), takes the run's lease, resumes from the
// checkpoint under a new epoch of it (through the ControlQueue function), and the run
// completes with every partition.
func TestChaos_KillLeaderMidEnqueue(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{params: slowEnqueueParams, batch: slowEnqueueBatch})
	ctx := testCtx(t, slowEnqueueBudget)
	run, rs, created := planner(ctx, t, c)
	before := waitMidEnqueue(ctx, t, c, run, 3)
	killedAt := time.Now()
	if err := c.h.Instance(created.Instance).Kill(); err != nil {
		t.Fatal(err)
	}
	takeover, err := rs.waitEpoch(ctx, created.Int("epoch"))
	if err != nil {
		t.Fatal(err)
	}
	failover := takeover.At.Sub(killedAt)
	m, err := c.waitFinal(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	done := time.Since(killedAt)
	ts := checkLeadership(t, c)
	checkNoPolling(t, c, ts)
	fig := checkRun(t, c, run, runWant{partitions: slowEnqueueParts, state: ledger.StateSucceeded}, ts)
	failovers := checkSegments(t, run, m.Segments, 2, ts)
	if len(m.Segments) < 2 || m.Segments[0].Epoch != created.Int("epoch") || m.Segments[1].From < before.Checkpoint.Next {
		t.Errorf("segments %v: want the dead planner's from 0 and one takeover from at least its checkpoint %d", m.Segments, before.Checkpoint.Next)
	}
	afterExpiry := checkProbeResume(t, c, run, created)
	figures(t, "run=%s partitions=%d killed=%s at checkpoint %d/%d, takeover of the run's lease after %s by %s (epoch %d → %d) %s after the lease lapsed, resumed from %d, run done %s after the kill, duplicates=%d staleDropped=%d preTakeoverResults=%d redeliveries=%d leaseLossesUnderLoad=%d",
		run, fig.Partitions, created.Instance, before.Checkpoint.Next, slowEnqueueParts, failover.Round(time.Millisecond), takeover.State.Holder,
		created.Int("epoch"), takeover.State.Epoch, afterExpiry.Round(time.Millisecond), m.Segments[min(1, len(m.Segments)-1)].From, done.Round(time.Millisecond), fig.Duplicates, fig.StaleDropped, fig.PreTakeover, fig.Redelivered, failovers)
}

// TestChaos_KillWorkerMidPartition: kill -9 an instance while it processes partitions. The
// host fails those invocations, the messages come back after visibilityTimeout (at once with
// the Service Bus delivery: abandoned) with a higher DequeueCount (DeliveryCount), another
// delivery processes them, and the run completes. It runs over both deliveries (deliveries).
func TestChaos_KillWorkerMidPartition(t *testing.T) {
	t.Parallel()
	for _, d := range deliveries() {
		t.Run(string(d), func(t *testing.T) { killWorkerMidPartition(t, d) })
	}
}

func killWorkerMidPartition(t *testing.T, d devhost.Delivery) {
	t.Parallel()
	c := startCluster(t, clusterOpts{params: `{"partitions":6,"workMs":3000}`, delivery: d})
	ctx := testCtx(t, 2*time.Minute)
	run := c.startRun(ctx)
	victim := killWorkerInFlight(ctx, t, c)
	killedAt := time.Now()
	if _, err := c.waitFinal(ctx, run); err != nil {
		t.Fatal(err)
	}
	done := time.Since(killedAt)
	ts := checkLeadership(t, c)
	checkNoPolling(t, c, ts)
	fig := checkRun(t, c, run, runWant{partitions: 6, state: ledger.StateSucceeded}, ts)

	// The partitions the killed process held, and their redeliveries.
	recs := c.Records()
	lost := map[int]devhost.InvokeRecord{}
	for _, r := range recs {
		if env, _, ok := envelopeOf(r); ok && r.PID == victim.PID && r.Err != nil && env.Kind == work.KindPartition {
			lost[env.Part] = r
		}
	}
	if len(lost) == 0 {
		t.Fatalf("no failed partition invocation on the killed pid %d", victim.PID)
	}
	var delays []string
	results := ledger.NewReader(c.store, run) // results on their own and in blocks
	for part, failed := range lost {
		res, err := results.Read(ctx, part)
		if err != nil {
			t.Fatal(err)
		}
		if res.Attempts < 2 {
			t.Errorf("partition %d was in flight on the killed instance, but its result records %d attempt(s)", part, res.Attempts)
		}
		// again is the first delivery after the failed one, whatever its outcome (under load
		// it may fail too); the run's completion says a later one succeeded.
		var again *devhost.InvokeRecord
		for i := range recs {
			if env, count, ok := envelopeOf(recs[i]); ok && env.Part == part && env.Run == run && count >= 2 &&
				(again == nil || recs[i].Started.Before(again.Started)) {
				again = &recs[i]
			}
		}
		if again == nil {
			t.Errorf("partition %d: never delivered again", part)
			continue
		}
		_, againCount, _ := envelopeOf(*again)
		gap := again.Started.Sub(failed.End)
		// Each delivery's way back has a bound only one side of which is a behaviour: a Storage
		// message is hidden for visibilityTimeout, so never back sooner; an abandoned Service
		// Bus message is back at once, and the only other way back is its lock lapsing, so
		// sooner than half the lock says it was abandoned. How much sooner is the machine's
		// speed (a loaded machine stalls Azurite for seconds), which the devhost's own tests
		// measure on a quiet one.
		switch {
		case c.delivery == devhost.DeliveryServiceBus && (gap >= devhost.DefaultLockDuration/2 || againCount != 2):
			t.Errorf("partition %d redelivered %s after the failure with DeliveryCount %d, want it abandoned: delivery 2, long before its %s lock lapsed (visibilityTimeout %s does not apply)", part, gap, againCount, devhost.DefaultLockDuration, visibility)
		case c.delivery != devhost.DeliveryServiceBus && gap < visibility-500*time.Millisecond:
			t.Errorf("partition %d redelivered %s after the failure, before visibilityTimeout %s", part, gap, visibility)
		}
		delays = append(delays, fmt.Sprintf("p%d:%s", part, gap.Round(time.Millisecond)))
	}
	figures(t, "run=%s partitions=6 killed %s (pid %d) holding %d partition(s), redelivered after [%s], run done %s after the kill, duplicates=%d redeliveries=%d",
		run, victim.Instance, victim.PID, len(lost), strings.Join(delays, " "), done.Round(time.Millisecond), fig.Duplicates, fig.Redelivered)
}

// killWorkerInFlight waits until a work invocation has been in flight for a second (the
// cluster's one run's partitions), kills its instance (SIGKILL) and returns the invocation.
func killWorkerInFlight(ctx context.Context, t *testing.T, c *cluster) devhost.Invocation {
	t.Helper()
	var victim devhost.Invocation
	if err := waitFor(ctx, 20*time.Millisecond, "a work invocation in flight for a second", func() (bool, error) {
		for _, inv := range c.h.InFlight() {
			if inv.Function == c.workFunction() && time.Since(inv.Started) > time.Second {
				victim = inv
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.h.Instance(victim.Instance).Kill(); err != nil {
		t.Fatal(err)
	}
	return victim
}

// manifestWatch samples a run's manifest every 50 ms.
type manifestWatch struct {
	mu      sync.Mutex
	samples []ledger.Manifest
	stop    context.CancelFunc
	done    chan struct{}
}

func watchManifest(c *cluster, run string) *manifestWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &manifestWatch{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			if m, err := c.store.ReadManifest(ctx, run); err == nil {
				w.mu.Lock()
				w.samples = append(w.samples, m)
				w.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *manifestWatch) all() []ledger.Manifest {
	w.stop()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.samples
}

// TestChaos_PauseLeaderFencing: SIGSTOP the run's planner mid-enqueue past its lease; a lease
// probe takes the run's lease over under a new epoch; SIGCONT the old planner while the new one
// works. The old planner must notice within a renew interval, and nothing it writes late
// changes the run: the manifest never goes back to its epoch, the checkpoint never moves back,
// no result carries a stale epoch.
func TestChaos_PauseLeaderFencing(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{params: slowEnqueueParams, batch: slowEnqueueBatch})
	ctx := testCtx(t, slowEnqueueBudget)
	run, rs, created := planner(ctx, t, c)
	oldEpoch := created.Int("epoch")
	waitMidEnqueue(ctx, t, c, run, 3)
	watch := watchManifest(c, run)
	pausedAt := time.Now()
	if err := c.h.Do(ctx, created.Instance, devhost.ActionStop); err != nil {
		t.Fatal(err)
	}
	takeover, err := rs.waitEpoch(ctx, oldEpoch)
	if err != nil {
		t.Fatal(err)
	}
	// Let the new leader checkpoint at least once under its epoch, then wake the old one.
	if err := waitFor(ctx, 10*time.Millisecond, "the new leader checkpoints", func() (bool, error) {
		m, err := c.store.ReadManifest(ctx, run)
		return err == nil && m.Epoch == takeover.State.Epoch && len(m.Segments) >= 2 && m.Checkpoint.Next > m.Segments[len(m.Segments)-1].From, nil
	}); err != nil {
		t.Fatal(err)
	}
	resumedAt := time.Now()
	if err := c.h.Do(ctx, created.Instance, devhost.ActionCont); err != nil {
		t.Fatal(err)
	}
	lostLine, err := c.h.WaitLine(ctx, func(l devhost.LogLine) bool {
		return l.Instance == created.Instance && l.PID == created.PID && l.Int("epoch") == oldEpoch && l.Str("lease") == ledger.RunLeaseName(run) &&
			(strings.HasPrefix(l.Msg, "lease renewal failed") || strings.HasPrefix(l.Msg, "leadership lost") ||
				l.Msg == "leadership ended: lease already gone at release")
	})
	if err != nil {
		t.Fatalf("the resumed leader never noticed it lost the lease: %v", err)
	}
	noticed := lostLine.Time.Sub(resumedAt)
	if noticed > renewInterval+2*time.Second {
		t.Errorf("invariant 5: the old leader noticed the loss %s after resuming, want within a renew interval (%s)", noticed, renewInterval)
	}
	m, err := c.waitFinal(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	samples := watch.all()

	ts := checkLeadership(t, c)
	checkNoPolling(t, c, ts)
	fig := checkRun(t, c, run, runWant{partitions: slowEnqueueParts, state: ledger.StateSucceeded}, ts)
	// Fencing, from the ledger: once the new epoch is in the manifest, nothing goes back.
	var seenNew bool
	var lastBatches int
	for _, s := range samples {
		if s.Epoch == takeover.State.Epoch {
			seenNew = true
		}
		if seenNew && (s.Epoch < takeover.State.Epoch || s.Leader.Instance != takeover.State.Holder.Instance || s.Leader.PID != takeover.State.Holder.PID) {
			t.Errorf("fencing: manifest went back to epoch %d / leader %+v after the takeover", s.Epoch, s.Leader)
		}
		if s.Checkpoint.Batches < lastBatches {
			t.Errorf("fencing: checkpoint moved back from %d to %d batches", lastBatches, s.Checkpoint.Batches)
		}
		lastBatches = max(lastBatches, s.Checkpoint.Batches)
	}
	if !seenNew {
		t.Error("the manifest sampler never saw the new epoch")
	}
	checkSegments(t, run, m.Segments, 2, ts)
	if len(m.Segments) < 2 || m.Segments[0].Epoch != oldEpoch || m.Segments[1].Epoch != takeover.State.Epoch {
		t.Errorf("segments %v, want [{%d 0} {%d …}]", m.Segments, oldEpoch, takeover.State.Epoch)
	}
	var fenced int
	for _, l := range c.h.Lines() {
		if l.PID == created.PID && strings.Contains(l.Raw, "fenced by a newer epoch") {
			fenced++
		}
	}
	figures(t, "run=%s partitions=%d paused %s (epoch %d) for %s, takeover after %s by %s (epoch %d), old leader noticed %s after SIGCONT (%q), fenced writes refused=%d, staleDropped=%d, duplicates=%d, manifest samples=%d",
		run, fig.Partitions, created.Instance, oldEpoch, resumedAt.Sub(pausedAt).Round(time.Millisecond), takeover.At.Sub(pausedAt).Round(time.Millisecond),
		takeover.State.Holder, takeover.State.Epoch, noticed.Round(time.Millisecond), lostLine.Msg, fenced, fig.StaleDropped, fig.Duplicates, len(samples))
}

// azuriteOutage is how long TestChaos_AzuriteRestart keeps storage down.
const azuriteOutage = 30 * time.Second

// TestChaos_AzuriteRestart: stop Azurite (disk persistence) for 30 s while workers are busy and
// start it again on the same ports and data; the run completes with every partition exactly
// once and succeeded, and the outage spends no delivery: the in-flight invocations wait it out
// instead of failing.
func TestChaos_AzuriteRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := azurite.Private(t, azurite.Options{Dir: dir})
	c := startCluster(t, clusterOpts{srv: srv, params: `{"partitions":30,"workMs":1000}`})
	ctx := testCtx(t, 4*time.Minute)
	run := c.startRun(ctx)
	var doneBefore int64
	if err := waitFor(ctx, 50*time.Millisecond, "planned with some results", func() (bool, error) {
		m, err := c.store.ReadManifest(ctx, run)
		if err != nil || !m.PlanDone {
			return false, nil
		}
		doneBefore, err = c.store.DoneCount(ctx, run, 0)
		return err == nil && doneBefore >= 5, nil
	}); err != nil {
		t.Fatal(err)
	}
	// Down for far longer than the SDK's retries last (about 5.6 s).
	downAt := time.Now()
	if !srv.Shutdown(azurite.RestartGrace) {
		t.Fatalf("azurite did not exit within %s of SIGTERM and was killed: its last writes may be lost, so the outage is not one Azure has", azurite.RestartGrace)
	}
	time.Sleep(azuriteOutage)
	srv2, err := azurite.Start(ctx, azurite.Options{Dir: dir, BlobPort: srv.BlobPort, QueuePort: srv.QueuePort})
	if err != nil {
		t.Fatalf("restart azurite: %v", err)
	}
	outage := time.Since(downAt)
	defer srv2.Stop()
	defer c.shutdown() // before Azurite stops: the handlers release their leases on the way out
	if _, err := c.waitFinal(ctx, run); err != nil {
		t.Fatal(err)
	}
	done := time.Since(downAt)
	ts := checkLeadership(t, c)
	checkNoPolling(t, c, ts)
	fig := checkRun(t, c, run, runWant{partitions: 30, state: ledger.StateSucceeded}, ts)
	var failedInv int
	for _, r := range c.Records() {
		if _, _, isMsg := envelopeOf(r); isMsg && r.Err != nil {
			failedInv++
			t.Errorf("message invocation failed during the outage (a delivery spent): %s on %s: %v", r.Function, r.Instance, r.Err)
		}
	}
	figures(t, "run=%s partitions=30 azurite restarted after %d done, outage %s, run done %s after the restart began, failed invocations=%d redeliveries=%d duplicates=%d",
		run, doneBefore, outage.Round(time.Millisecond), done.Round(time.Millisecond), failedInv, fig.Redelivered, fig.Duplicates)
}

// TestChaos_PoisonPartition: a message that is not a Baton envelope (invariant 7) fails
// every delivery with the reason logged and lands in <queue>-poison after maxDequeueCount
// deliveries, while the run beside it is unaffected. With the Service Bus delivery the last
// DeliveryCount decides, and <queue>-poison is the dead-letter queue. It runs over both
// deliveries (deliveries). (A partition that always fails no longer takes this road: it is
// recorded failed after its job's retry policy, see retry_test.go.)
func TestChaos_PoisonPartition(t *testing.T) {
	t.Parallel()
	for _, d := range deliveries() {
		t.Run(string(d), func(t *testing.T) { poisonPartition(t, d) })
	}
}

func poisonPartition(t *testing.T, d devhost.Delivery) {
	t.Parallel()
	c := startCluster(t, clusterOpts{params: `{"partitions":6}`, delivery: d})
	ctx := testCtx(t, 3*time.Minute)
	if _, err := c.queue.Create(ctx, nil); err != nil {
		t.Fatal(err)
	}
	const junk = `{"hello":"not a baton envelope"}`
	if _, err := c.queue.EnqueueMessage(ctx, base64.StdEncoding.EncodeToString([]byte(junk)), nil); err != nil {
		t.Fatal(err)
	}
	run, m := c.runFinal(ctx)
	elapsed := m.Finished.Sub(m.Created)
	ts := checkLeadership(t, c)
	checkNoPolling(t, c, ts)
	fig := checkRun(t, c, run, runWant{partitions: 6, state: ledger.StateSucceeded}, ts)

	var bodies []string
	if err := waitFor(ctx, 100*time.Millisecond, "the junk message in the poison queue", func() (bool, error) {
		resp, err := c.poison.PeekMessages(ctx, &azqueue.PeekMessagesOptions{NumberOfMessages: to.Ptr(int32(32))})
		if err != nil {
			return false, nil
		}
		bodies = bodies[:0]
		for _, pm := range resp.Messages {
			b, err := base64.StdEncoding.DecodeString(*pm.MessageText)
			if err != nil {
				return false, fmt.Errorf("poison message is not the original base64 text: %v", err)
			}
			bodies = append(bodies, string(b))
		}
		return len(bodies) >= 1, nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(bodies) != 1 || bodies[0] != junk {
		t.Errorf("poison queue holds %q, want only the junk message", bodies)
	}
	junkDeliveries := 0
	for _, r := range c.Records() {
		if r.Function == c.workFunction() && strings.Contains(string(r.Request), "not a baton envelope") {
			junkDeliveries++
		}
	}
	if junkDeliveries != maxDequeue {
		t.Errorf("deliveries of the junk message: %d, want %d", junkDeliveries, maxDequeue)
	}
	reasoned := false
	for _, l := range c.h.Lines() {
		if l.Level == "ERROR" && strings.Contains(l.Msg, "malformed message") {
			reasoned = true
		}
	}
	if !reasoned {
		t.Error("invariant 7: no handler line logged why the junk message was rejected")
	}
	figures(t, "delivery=%s run=%s partitions=6 state=%s, run took %s, poison queue=%d messages, junk deliveries=%d, duplicates=%d",
		d, run, m.State, elapsed.Round(time.Millisecond), len(bodies), junkDeliveries, fig.Duplicates)
}

// TestChaos_KillWorkerMidBundle kills an instance while it processes a bundle (a message of
// several consecutive partitions): the host fails the invocation, the bundle comes back, and
// its redelivery is split into messages of one partition, each processed (or found recorded)
// on its own. Every partition ends with one result and the run succeeds.
func TestChaos_KillWorkerMidBundle(t *testing.T) {
	t.Parallel()
	for _, d := range deliveries() {
		t.Run(string(d), func(t *testing.T) { killWorkerMidBundle(t, d) })
	}
}

func killWorkerMidBundle(t *testing.T, d devhost.Delivery) {
	t.Parallel()
	const n = 32 // one plan batch: bundles of 4 (at least 8 messages a batch)
	c := startCluster(t, clusterOpts{params: fmt.Sprintf(`{"partitions":%d,"workMs":3000}`, n), delivery: d})
	ctx := testCtx(t, 3*time.Minute)
	run := c.startRun(ctx)
	victim := killWorkerInFlight(ctx, t, c)
	if _, err := c.waitFinal(ctx, run); err != nil {
		t.Fatal(err)
	}
	ts := checkLeadership(t, c)
	checkNoPolling(t, c, ts)
	fig := checkRun(t, c, run, runWant{partitions: n, state: ledger.StateSucceeded}, ts)

	// The bundles the killed process held: each came back and was split.
	lost := map[string]work.Envelope{}
	for _, r := range c.Records() {
		if env, _, ok := envelopeOf(r); ok && r.PID == victim.PID && r.Err != nil && env.Kind == work.KindPartition && env.Run == run {
			if env.Count < 2 {
				t.Errorf("the killed instance held message %s of one partition; want bundles only in a run of %d", env.MessageID(), n)
			}
			lost[env.MessageID()] = env
		}
	}
	if len(lost) == 0 {
		t.Fatalf("no failed bundle invocation on the killed pid %d", victim.PID)
	}
	splits := map[int]bool{}
	for _, l := range c.h.Lines() {
		if l.Msg == "bundle redelivered; its partitions are sent again one per message" && l.Str("run") == run {
			splits[int(l.Int("part"))] = true
		}
	}
	var parts []string
	resultsAfter := ledger.NewReader(c.store, run) // results on their own and in blocks
	for _, env := range lost {
		if !splits[env.Part] {
			t.Errorf("bundle %s came back without being split", env.MessageID())
		}
		for _, one := range env.Singles() {
			res, err := resultsAfter.Read(ctx, one.Part)
			if err != nil {
				t.Fatal(err)
			}
			if res.Attempts < 2 {
				t.Errorf("partition %d was in the killed bundle, but its result records %d attempt(s)", one.Part, res.Attempts)
			}
		}
		parts = append(parts, fmt.Sprintf("%d+%d", env.Part, env.Count))
	}
	figures(t, "run=%s partitions=%d killed %s (pid %d) holding bundles [%s], split %d, duplicates=%d redeliveries=%d",
		run, n, victim.Instance, victim.PID, strings.Join(parts, " "), len(splits), fig.Duplicates, fig.Redelivered)
}

// TestChaos_EveryControlMessageLost: with every control message lost from the start (a delivery
// fault of the local host on the control queue: each message accepted and never delivered), a
// run is moved by the heartbeat's supervision alone, within the bounds it promises: its start
// check is lost, so the heartbeat plans it a check delay (lease + 5 s) after its start (a); that
// planner, killed as it begins, is replaced once the run has not moved for a check delay (b); a
// partition message the work queue lost is re-enqueued by the first round, a run timeout after
// planning ended (c); and the run is final by the coordinator's FinalBound plus a heartbeat (d).
// No control message ever reaches a handler. It runs over both deliveries (deliveries).
func TestChaos_EveryControlMessageLost(t *testing.T) {
	t.Parallel()
	for _, d := range deliveries() {
		t.Run(string(d), func(t *testing.T) { everyControlMessageLost(t, d) })
	}
}

func everyControlMessageLost(t *testing.T, d devhost.Delivery) {
	t.Parallel()
	const n = 40 // ten plan batches of 4
	c := startCluster(t, clusterOpts{params: fmt.Sprintf(`{"partitions":%d}`, n), batch: 4, delivery: d})
	ctx := testCtx(t, 6*time.Minute)
	blackout, err := c.h.InjectFault(devhost.MessageFault{Kind: devhost.FaultLost, Queue: "control", Times: -1})
	if err != nil {
		t.Fatal(err)
	}
	// A partition message sent by a planner that took the run over (epoch 2 or later): no
	// planner sends it again, so only a re-enqueue round brings its partitions back.
	workLost, err := c.h.InjectFault(devhost.MessageFault{Kind: devhost.FaultLost, Queue: "work", Match: func(body string) bool {
		env, err := work.DecodeEnvelope([]byte(body))
		return err == nil && env.Kind == work.KindPartition && env.Epoch >= 2
	}})
	if err != nil {
		t.Fatal(err)
	}
	type kill struct {
		line devhost.LogLine
		at   time.Time
		err  error
	}
	killed := make(chan kill, 1)
	var once sync.Once
	unsub := c.h.Subscribe(func(l devhost.LogLine) {
		if l.Msg != "planning the run" {
			return
		}
		once.Do(func() {
			err := c.h.Instance(l.Instance).Kill()
			killed <- kill{line: l, at: time.Now(), err: err}
		})
	})
	defer unsub()

	run := c.startRun(ctx)
	var k kill
	select {
	case k = <-killed:
	case <-ctx.Done():
		t.Fatal("no planner ever began planning the run")
	}
	if k.err != nil {
		t.Fatalf("kill the first planner: %v", k.err)
	}
	m, err := c.waitFinal(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	ts := checkLeadership(t, c)
	checkNoPolling(t, c, ts)
	fig := checkRun(t, c, run, runWant{partitions: n, state: ledger.StateSucceeded}, ts)

	checkDelay := leaseDuration + config.CheckMargin
	bound := func(due time.Time) time.Time { return due.Add(heartbeatEach + soak.SuperviseMargin) }
	var planners []tenure
	for _, tn := range ts {
		if tn.Lease == ledger.RunLeaseName(run) {
			planners = append(planners, tn)
		}
	}
	if len(planners) < 2 || planners[0].Epoch != k.line.Int("epoch") || planners[0].PID != k.line.PID {
		t.Fatalf("planners of %s: %+v; want the killed one (epoch %d, pid %d) and at least one after it", run, planners, k.line.Int("epoch"), k.line.PID)
	}
	// (a) The start check was lost: the first planner came with the heartbeat a check delay
	// after the start, not before.
	first, due := planners[0].Acquired, m.Created.Add(checkDelay)
	if first.Before(due.Add(-soak.LogTolerance)) || first.After(bound(due)) {
		t.Errorf("(a) first planner at %s, %s after the run was created; want from a check delay (%s) to the next heartbeat's bound (%s)",
			first.Format(time.StampMilli), first.Sub(m.Created).Round(time.Millisecond), checkDelay, bound(due).Sub(m.Created))
	}
	// (b) Killed as it began: replaced once its lease lapsed and the run had not moved for a
	// check delay, by the next heartbeat.
	second := planners[1].Acquired
	if second.Before(k.at.Add(leaseDuration-soak.LogTolerance)) || second.After(bound(k.at.Add(checkDelay))) {
		t.Errorf("(b) planner killed at %s replaced at %s (%s later); want after its lease and by the next heartbeat after a check delay (%s)",
			k.at.Format(time.StampMilli), second.Format(time.StampMilli), second.Sub(k.at).Round(time.Millisecond), bound(k.at.Add(checkDelay)).Sub(k.at))
	}
	// (c) The lost partition message came back with re-enqueue round 1, a run timeout after
	// planning ended, driven by the heartbeat.
	lostMsgs := workLost.Strikes()
	if len(lostMsgs) != 1 {
		t.Fatalf("work messages lost: %+v, want 1", lostMsgs)
	}
	round1 := time.Time{}
	driven := 0
	for _, l := range c.h.Lines() {
		switch {
		case l.Str("run") != run:
		case l.Msg == "check: re-enqueued missing partitions" && l.Int("round") == 1 && round1.IsZero():
			round1 = l.Time
		case l.Msg == "supervision: the run has not moved by its bound; the heartbeat drives it":
			driven++
		}
	}
	roundDue := m.Enqueued.Add(time.Minute) // the run timeout startCluster sets
	if round1.IsZero() || round1.Before(roundDue.Add(-soak.LogTolerance)) || round1.After(bound(roundDue)) {
		t.Errorf("(c) round 1 re-enqueued at %s; want from its time %s to the next heartbeat's bound %s",
			round1.Format(time.StampMilli), roundDue.Format(time.StampMilli), bound(roundDue).Format(time.StampMilli))
	}
	// (d) Final by the coordinator's FinalBound and a heartbeat.
	if final := soak.DocumentedBound(m, leaseDuration).Add(heartbeatEach); m.Finished.After(final) {
		t.Errorf("(d) final at %s, after FinalBound and a heartbeat %s", m.Finished.Format(time.StampMilli), final.Format(time.StampMilli))
	}
	// Nothing but the heartbeat moved the run: no control message reached a handler.
	for _, r := range c.Records() {
		if r.Function == c.controlFunction() {
			t.Errorf("a control message reached %s on %s: %s", r.Function, r.Instance, r.Request)
		}
	}
	lost := blackout.Strikes()
	blackout.Cancel()
	if len(lost) < 2 || driven < 3 {
		t.Errorf("%d control messages lost, the heartbeat drove the run %d times; want the start check and more, and at least 3 drives", len(lost), driven)
	}
	figures(t, "delivery=%s run=%s partitions=%d control messages lost=%d heartbeat drives=%d planned by the heartbeat %s after creation, killed planner replaced %s after the kill, round 1 %s after planning ended, final %s after creation, duplicates=%d",
		d, run, n, len(lost), driven, first.Sub(m.Created).Round(time.Millisecond), second.Sub(k.at).Round(time.Millisecond),
		round1.Sub(m.Enqueued).Round(time.Millisecond), m.Finished.Sub(m.Created).Round(time.Millisecond), fig.Duplicates)
}
