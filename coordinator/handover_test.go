package coordinator

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/internal/engine/transport/storagequeue"
	"github.com/batonfn/baton/internal/tools/azurite"
	"github.com/batonfn/baton/work"
)

// controlEnv is a runEnv with a control queue beside the work queue.
type controlEnv struct {
	*runEnv
	controlQ *azqueue.QueueClient
	control  transport.Sender
}

func newControlEnv(t *testing.T) *controlEnv {
	t.Helper()
	return newControlEnvOn(t, azurite.Shared(t))
}

// newControlEnvOn is newControlEnv on srv (see newRunEnvOn).
func newControlEnvOn(t *testing.T, srv *azurite.Server) *controlEnv {
	t.Helper()
	e := newRunEnvOn(t, srv)
	qs, err := azclient.Queue(srv.Storage(), nil)
	if err != nil {
		t.Fatal(err)
	}
	q := qs.NewQueueClient(azurite.UniqueName(t, "control"))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = q.Delete(ctx, nil)
	})
	return &controlEnv{runEnv: e, controlQ: q, control: storagequeue.NewQueueSender(q, storagequeue.QueueSenderOptions{})}
}

// recordingSender records every message it sends, then sends it.
type recordingSender struct {
	Sender
	mu   sync.Mutex
	sent []transport.Message
	at   []time.Time // when each was sent
}

func (s *recordingSender) Send(ctx context.Context, msgs []transport.Message) error {
	s.mu.Lock()
	s.sent = append(s.sent, msgs...)
	for range msgs {
		s.at = append(s.at, time.Now())
	}
	s.mu.Unlock()
	return s.Sender.Send(ctx, msgs)
}

// sentAt is when the k-th message recorded was sent.
func (s *recordingSender) sentAt(k int) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.at[k]
}

func (s *recordingSender) messages() []transport.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]transport.Message(nil), s.sent...)
}

// probes returns the round-0 checks among msgs.
func probes(t *testing.T, msgs []transport.Message) []transport.Message {
	t.Helper()
	var out []transport.Message
	for _, m := range msgs {
		env, err := work.DecodeEnvelope(m.Body)
		if err != nil {
			t.Fatalf("control message %s: %v", m.ID, err)
		}
		if env.Kind == work.KindCheck && env.Round == probeRound {
			out = append(out, m)
		}
	}
	return out
}

// ctxSender calls before with the send's context on every Send of partitions.
type ctxSender struct {
	Sender
	n      int
	mu     sync.Mutex
	before func(ctx context.Context, n int) error
}

func (s *ctxSender) Send(ctx context.Context, msgs []transport.Message) error {
	s.mu.Lock()
	s.n++
	n := s.n
	s.mu.Unlock()
	if err := s.before(ctx, n); err != nil {
		return err
	}
	return s.Sender.Send(ctx, msgs)
}

// controlInstance is an instance whose checks go to its own recording control sender. It
// runs on the real clock: the lease probes it sends are due when its run lease would lapse.
func (e *controlEnv) controlInstance(name string, n, batch int, sender Sender) (*instance, *recordingSender) {
	e.t.Helper()
	rec := &recordingSender{Sender: e.control}
	in := e.instanceWith(name, sender, func(c *Config) {
		c.Schedules, c.BatchSize, c.Control, c.Now = []Schedule{schedule(n)}, batch, rec, nil
	})
	return in, rec
}

// manualRun has in start an ad-hoc run of the count job (n partitions) and takes its start
// check off the control queue, as the queue trigger would deliver it: the run and the check.
func (e *controlEnv) manualRun(ctx context.Context, in *instance, n int) (string, work.Envelope) {
	e.t.Helper()
	out, err := in.c.StartManual(ctx, ManualRequest{Job: "count", Params: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))})
	if err != nil || out.Status != StatusStarted {
		e.t.Fatalf("ad-hoc run: %+v, %v", out, err)
	}
	resp, err := e.controlQ.DequeueMessages(ctx, &azqueue.DequeueMessagesOptions{NumberOfMessages: to.Ptr(int32(32)), VisibilityTimeout: to.Ptr(int32(600))})
	if err != nil {
		e.t.Fatal(err)
	}
	var envs []work.Envelope
	for _, m := range resp.Messages {
		body, err := base64.StdEncoding.DecodeString(*m.MessageText)
		if err != nil {
			e.t.Fatal(err)
		}
		env, err := work.DecodeEnvelope(body)
		if err != nil {
			e.t.Fatal(err)
		}
		envs = append(envs, env)
		if _, err := e.controlQ.DeleteMessage(ctx, *m.MessageID, *m.PopReceipt, nil); err != nil {
			e.t.Fatal(err)
		}
	}
	return out.Run, startCheck(e.t, envs, out.Run)
}

// delivery is one control message handled by consume.
type delivery struct {
	env       work.Envelope
	workDepth int32     // approximate work-queue depth when the message was delivered
	resumed   bool      // the manifest's epoch moved up during this check
	at        time.Time // when the check returned
	err       error
}

// consume is a queue trigger for the control queue: it delivers every visible message to
// in.c.Check, one at a time, until stop reports true or ctx ends, and returns what it did.
func (e *controlEnv) consume(ctx context.Context, in *instance, run string, stop func([]delivery) bool) []delivery {
	e.t.Helper()
	var out []delivery
	for ctx.Err() == nil && !stop(out) {
		resp, err := e.controlQ.DequeueMessages(ctx, &azqueue.DequeueMessagesOptions{NumberOfMessages: to.Ptr(int32(1)), VisibilityTimeout: to.Ptr(int32(600))})
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			e.t.Fatalf("dequeue control: %v", err)
		}
		if len(resp.Messages) == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond): // the queue trigger's polling interval
			}
			continue
		}
		m := resp.Messages[0]
		body, err := base64.StdEncoding.DecodeString(*m.MessageText)
		if err != nil {
			e.t.Fatal(err)
		}
		env, err := work.DecodeEnvelope(body)
		if err != nil {
			e.t.Fatal(err)
		}
		props, err := e.queue.GetProperties(ctx, nil)
		if err != nil {
			e.t.Fatal(err)
		}
		before, _ := e.store.ReadManifest(ctx, run)
		d := delivery{env: env}
		if props.ApproximateMessagesCount != nil {
			d.workDepth = *props.ApproximateMessagesCount
		}
		d.err = in.c.Check(ctx, env, firstDelivery)
		d.at = time.Now()
		after, _ := e.store.ReadManifest(ctx, run)
		d.resumed = after.Epoch > before.Epoch
		out = append(out, d)
		if _, err := e.controlQ.DeleteMessage(ctx, *m.MessageID, *m.PopReceipt, nil); err != nil {
			e.t.Fatal(err)
		}
	}
	return out
}

// Checks travel on the control sender — the run's start check, the chain's next check and the
// planner's lease probe — and partitions alone on the work sender.
func TestControl_ChecksGoToTheControlSender(t *testing.T) {
	e := newControlEnv(t)
	workSender := &recordingSender{Sender: e.sender}
	a, control := e.controlInstance("a", 12, 5, workSender)
	ctx := testCtx(t)
	run, start := e.manualRun(ctx, a, 12)
	if err := a.c.Check(ctx, start, firstDelivery); err != nil {
		t.Fatalf("start check: %v", err)
	}
	idx, _, checks := partitions(e.drain())
	if checks != 0 {
		t.Errorf("%d checks on the work queue, want 0", checks)
	}
	wantEach(t, idx, 12)
	if len(workSender.messages()) != 12 {
		t.Errorf("work sender sent %d messages, want the 12 partitions", len(workSender.messages()))
	}
	var starts, chain, probe int
	for k, m := range control.messages() {
		env, err := work.DecodeEnvelope(m.Body)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case env.Kind != work.KindCheck || env.Run != run:
			t.Errorf("control sender sent %+v", env)
		case env.Round == 1 && env.Epoch == 0:
			starts++
		case env.Round == 2:
			chain++
		case env.Round == probeRound:
			probe++
			// A probe covers the run lease as held when it was sent (at the start of the
			// enqueue, and after each renewal of a slow one).
			if d := m.NotBefore.Sub(control.sentAt(k)); d < testBlobLockDuration-10*time.Second || d > testBlobLockDuration {
				t.Errorf("probe due %s after it was sent, want about one lease (%s)", d, testBlobLockDuration)
			}
		}
	}
	if starts != 1 || chain != 1 || probe < 1 {
		t.Errorf("control sender sent %d start checks, %d chain checks and %d probes, want 1, 1 and at least 1", starts, chain, probe)
	}
}

// A planner killed mid-enqueue (it stops renewing the run's lease and never releases it)
// after renewing twice is replaced by the probe of its last renewal: the first check to find
// the run lease free is that probe, delivered from the control queue while the work queue
// still holds the run's backlog, and not before the lease could have lapsed.
func TestProbe_KilledPlannerResumedAtLeaseExpiry(t *testing.T) {
	t.Parallel() // it waits for a lease to lapse, on an Azurite of its own
	// Its backlog of 2,000 messages gets an Azurite of its own (see newRunEnvOn).
	e := newControlEnvOn(t, azurite.Private(t, azurite.Options{}))
	e.jobs.SetMaxBundle("count", 1)  // a backlog of one message per partition
	const n, batch, k = 2250, 250, 8 // the planner dies after k batches: k*batch partitions queued, one batch left
	ctx := testCtx(t)
	killed := errors.New("killed")
	var a *instance
	var aControl *recordingSender
	hook := &ctxSender{Sender: e.sender}
	hook.before = func(sctx context.Context, sent int) error {
		if sent <= k {
			return nil
		}
		// Stay alive, mid-enqueue, until the lease has been renewed twice (each renewal sends a
		// probe), then die without releasing.
		waitFor(t, 60*time.Second, "two renewals", func() bool { return len(probes(t, aControl.messages())) >= 3 })
		a.crash.Store(true)
		return killed
	}
	a, aControl = e.controlInstance("a", n, batch, hook)
	run, start := e.manualRun(ctx, a, n)
	if err := a.c.Check(ctx, start, firstDelivery); !errors.Is(err, killed) {
		t.Fatalf("the killed planner's check returned %v", err)
	}
	m, err := e.store.ReadManifest(ctx, run)
	if err != nil || m.PlanDone || m.Checkpoint.Next != k*batch {
		t.Fatalf("after the kill: %+v, %v", m, err)
	}
	firstEpoch := m.Epoch
	sentProbes := probes(t, aControl.messages())
	last := sentProbes[len(sentProbes)-1]
	for _, p := range sentProbes {
		if p.NotBefore.After(last.NotBefore) {
			last = p
		}
	}

	b, bControl := e.controlInstance("b", n, batch, nil)
	got := e.consume(ctx, b, run, func(ds []delivery) bool { return len(ds) > 0 && ds[len(ds)-1].resumed })
	if len(got) == 0 || !got[len(got)-1].resumed {
		t.Fatalf("no control message resumed the run: %+v", got)
	}
	for _, d := range got {
		if d.err != nil {
			t.Errorf("check %+v failed: %v", d.env, d.err)
		}
	}
	res := got[len(got)-1]
	if res.env.Round != probeRound || res.env.Epoch != firstEpoch {
		t.Errorf("resumed by %+v, want a lease probe of epoch %d", res.env, firstEpoch)
	}
	// Every earlier probe found the lease held and did nothing: the probe that resumed the
	// run is the last one the killed planner sent.
	delivered := 0
	for _, d := range got {
		if d.env.Round == probeRound {
			delivered++
		}
	}
	if delivered != len(sentProbes) {
		t.Errorf("run resumed by probe %d; the killed planner sent %d probes, so the last one should have resumed it", delivered, len(sentProbes))
	}
	if res.workDepth < k*batch {
		t.Errorf("work queue held %d messages when the probe was delivered, want the backlog of %d", res.workDepth, k*batch)
	}
	if res.at.Before(last.NotBefore) {
		t.Errorf("resumed at %s, before the last probe was due (%s): the lease could not have lapsed", res.at, last.NotBefore)
	}
	m, err = e.store.ReadManifest(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	if !m.PlanDone || m.Partitions != n || m.Epoch <= firstEpoch || m.Segments[len(m.Segments)-1].From != k*batch {
		t.Errorf("after the resume: planDone %v partitions %d epoch %d (was %d) segments %+v", m.PlanDone, m.Partitions, m.Epoch, firstEpoch, m.Segments)
	}
	idx, _, checks := partitions(e.drain())
	if checks != 0 {
		t.Errorf("%d checks on the work queue", checks)
	}
	wantEach(t, idx, n)
	if len(probes(t, bControl.messages())) == 0 {
		t.Error("the resuming planner sent no probe of its own")
	}
	t.Logf("resumed by probe %d of %d, %s after the lease lapsed, work queue depth %d", delivered, len(sentProbes),
		res.at.Sub(last.NotBefore).Round(time.Millisecond), res.workDepth)
}

// midEnqueue is a planner "a" stuck mid-enqueue after its first sends of an ad-hoc run of
// handoverParts partitions.
type midEnqueue struct {
	a          *instance
	control    *recordingSender // a's control messages
	checkErr   chan error       // what a's Check of the start check returned
	run        string
	firstEpoch int64
}

const handoverParts, handoverBatch = 40, 5

// startMidEnqueue has a start an ad-hoc run and plan it on its start check, delivered under
// invocation, and returns once a is mid-enqueue: its next send waits until its leadership of
// the run ends, and then until stopped is closed (nil: not at all), as a task that is slow to
// stop.
func startMidEnqueue(ctx context.Context, t *testing.T, e *controlEnv, invocation context.Context, stopped chan struct{}) midEnqueue {
	t.Helper()
	const k = 3
	blocked := make(chan struct{})
	hook := &ctxSender{Sender: e.sender}
	hook.before = func(sctx context.Context, sent int) error {
		if sent <= k {
			return nil
		}
		if sent == k+1 {
			close(blocked)
		}
		<-sctx.Done() // mid-enqueue until leadership ends
		if stopped != nil {
			<-stopped
		}
		return sctx.Err()
	}
	a, aControl := e.controlInstance("a", handoverParts, handoverBatch, hook)
	run, start := e.manualRun(ctx, a, handoverParts)
	checkErr := make(chan error, 1)
	go func() { checkErr <- a.c.Check(invocation, start, firstDelivery) }()
	select {
	case <-blocked:
	case err := <-checkErr:
		t.Fatalf("the planner's check returned before it got mid-enqueue: %v", err)
	case <-ctx.Done():
		t.Fatal("the planner never got mid-enqueue")
	}
	m, err := e.store.ReadManifest(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	return midEnqueue{a: a, control: aControl, checkErr: checkErr, run: run, firstEpoch: m.Epoch}
}

// wantTakenOver checks that run was enqueued whole under a newer epoch than firstEpoch (by
// leader, when set).
func wantTakenOver(ctx context.Context, t *testing.T, e *controlEnv, run string, firstEpoch int64, leader string) {
	t.Helper()
	m, err := e.store.ReadManifest(ctx, run)
	if err != nil || !m.PlanDone || m.Partitions != handoverParts || m.Epoch <= firstEpoch || (leader != "" && m.Leader.Instance != leader) {
		t.Errorf("after the handover: %+v, %v; want the run enqueued under an epoch after %d (by %q)", m, err, firstEpoch, leader)
	}
	idx, _, _ := partitions(e.drain())
	wantEach(t, idx, handoverParts)
}

// handoverChecks returns the handover checks among msgs.
func handoverChecks(t *testing.T, msgs []transport.Message) []transport.Message {
	t.Helper()
	var out []transport.Message
	for _, p := range probes(t, msgs) {
		if strings.HasSuffix(p.ID, "/handover") {
			out = append(out, p)
		}
	}
	return out
}

// A probe that finds the run lease live costs one lease call and sends nothing; a planner that
// stops gracefully releases the lease and sends an immediate check through which another
// instance resumes the run at once.
func TestHandover_GracefulStopResumedAtOnce(t *testing.T) {
	e := newControlEnv(t)
	ctx := testCtx(t)
	me := startMidEnqueue(ctx, t, e, ctx, nil)
	a, aControl, run, firstEpoch := me.a, me.control, me.run, me.firstEpoch

	b, bControl := e.controlInstance("b", handoverParts, handoverBatch, nil)
	live := work.Envelope{Version: 1, Kind: work.KindCheck, Run: run, Epoch: firstEpoch, Round: probeRound}
	if err := b.c.Check(ctx, live, firstDelivery); err != nil {
		t.Fatalf("probe of a live lease: %v", err)
	}
	if m2, _ := e.store.ReadManifest(ctx, run); m2.Epoch != firstEpoch || b.held.Load() != 1 {
		t.Fatalf("a probe of a live lease took over (epoch %d, was %d) or did not try it once (%d)", m2.Epoch, firstEpoch, b.held.Load())
	}
	if len(bControl.messages()) != 0 {
		t.Errorf("a probe of a live lease sent %d messages, want none", len(bControl.messages()))
	}

	if err := a.c.Handover(ctx); err != nil {
		t.Fatalf("handover: %v", err)
	}
	if err := <-me.checkErr; !errors.Is(err, election.ErrHandover) {
		t.Errorf("the stopped planner's check returned %v, want ErrHandover", err)
	}
	if handover := handoverChecks(t, aControl.messages()); len(handover) != 1 || !handover[0].NotBefore.IsZero() {
		t.Fatalf("handover checks %+v, want one for immediate delivery", handover)
	}
	// The lease probes of the stopped planner are not due for a lease yet: the first message
	// the control queue delivers is the handover check, and it finds the lease free.
	got := e.consume(ctx, b, run, func(ds []delivery) bool { return len(ds) > 0 })
	if len(got) != 1 || got[0].err != nil || !got[0].resumed || got[0].env.Epoch != firstEpoch || !got[0].env.Handover {
		t.Fatalf("first control delivery %+v, want the handover check resuming the run", got)
	}
	wantTakenOver(ctx, t, e, run, firstEpoch, "b")
}

// A planner that is slow to stop: its handover check goes out before its task has stopped, and
// the instance the check reaches waits for the release instead of finding the run lease held
// and giving up. On the old order (release, then send) no check is sent while the task is
// stuck, and on a probe that gives up on a held lease the run is not resumed.
func TestHandover_CheckSentBeforeTheReleaseWaitsForIt(t *testing.T) {
	e := newControlEnv(t)
	ctx := testCtx(t)
	letGo := make(chan struct{})
	me := startMidEnqueue(ctx, t, e, ctx, letGo)
	a, aControl, run, firstEpoch := me.a, me.control, me.run, me.firstEpoch

	handoverErr := make(chan error, 1)
	go func() { handoverErr <- a.c.Handover(ctx) }()
	var check work.Envelope
	waitFor(t, time.Minute, "a handover check sent while the task is still stopping", func() bool {
		h := handoverChecks(t, aControl.messages())
		if len(h) == 0 {
			return false
		}
		env, err := work.DecodeEnvelope(h[0].Body)
		if err != nil {
			t.Fatal(err)
		}
		check = env
		return true
	})
	if !check.Handover || check.Epoch != firstEpoch || check.Round != probeRound || check.Run != run {
		t.Fatalf("handover check %+v, want a round-0 handover check of %s at epoch %d", check, run, firstEpoch)
	}

	b, _ := e.controlInstance("b", handoverParts, handoverBatch, nil)
	checked := make(chan error, 1)
	go func() { checked <- b.c.Check(ctx, check, firstDelivery) }()
	waitFor(t, time.Minute, "the check to find the stopping planner's run lease held", func() bool { return b.held.Load() > 0 })
	select {
	case err := <-checked:
		t.Fatalf("the handover check returned (%v) while the stopping planner still held the lease", err)
	default:
	}
	close(letGo)
	if err := <-handoverErr; err != nil {
		t.Fatalf("handover: %v", err)
	}
	if err := <-me.checkErr; !errors.Is(err, election.ErrHandover) {
		t.Errorf("the stopped planner's check returned %v, want ErrHandover", err)
	}
	if err := <-checked; err != nil {
		t.Fatalf("handover check: %v", err)
	}
	wantTakenOver(ctx, t, e, run, firstEpoch, "b")
}

// A planner whose invocation is cancelled mid-enqueue (the host gave up on it or is shutting
// down) releases the run's lease as it returns; it also sends a handover check, so another
// instance goes on at once instead of at the next lease probe.
func TestHandover_CancelledInvocationHandsOver(t *testing.T) {
	e := newControlEnv(t)
	ctx := testCtx(t)
	invocation, abort := context.WithCancel(ctx)
	me := startMidEnqueue(ctx, t, e, invocation, nil)
	abort()
	if err := <-me.checkErr; err == nil {
		t.Error("the cancelled planner's check returned nil, want its cancellation")
	}
	if handover := handoverChecks(t, me.control.messages()); len(handover) != 1 || !handover[0].NotBefore.IsZero() {
		t.Fatalf("handover checks %+v, want one for immediate delivery", handover)
	}
	b, _ := e.controlInstance("b", handoverParts, handoverBatch, nil)
	got := e.consume(ctx, b, me.run, func(ds []delivery) bool { return len(ds) > 0 })
	if len(got) != 1 || got[0].err != nil || !got[0].resumed || !got[0].env.Handover || got[0].env.Epoch != me.firstEpoch {
		t.Fatalf("first control delivery %+v, want the handover check resuming the run", got)
	}
	wantTakenOver(ctx, t, e, me.run, me.firstEpoch, "b")
}

// The leader-side hook the lease probes hang on: OnRenewal is called after each renewal of a
// run's lease with the confirmation time, and not at all outside a leadership or once removed.
func TestOnRenewal_CalledAfterEachRenewal(t *testing.T) {
	t.Parallel() // it waits for two renewals
	e := newRunEnv(t)
	in := e.instance("a", 1, 1, nil)
	ctx := testCtx(t)
	election.OnRenewal(ctx, func(time.Time) { t.Error("hook outside a leadership was called") })()
	var mu sync.Mutex
	var times []time.Time
	err := in.leader.RunAsLeaderOf(ctx, ledger.RunLeaseName(e.run), func(ctx context.Context, lease election.Lease, beat func()) error {
		remove := election.OnRenewal(ctx, func(at time.Time) { mu.Lock(); times = append(times, at); mu.Unlock() })
		// Two renewals are due within about 10 s of a 15 s lease; a renewal that fails ends the
		// leadership, and the test says why rather than waiting out its deadline.
		waitFor(t, 40*time.Second, "two renewals", func() bool {
			if ctx.Err() != nil {
				t.Fatalf("leadership ended before two renewals: %v", context.Cause(ctx))
			}
			mu.Lock()
			defer mu.Unlock()
			return len(times) >= 2
		})
		remove()
		mu.Lock()
		defer mu.Unlock()
		if !times[0].After(lease.AcquiredAt) || !times[1].After(times[0]) {
			t.Errorf("renewal times %v (acquired %s): want increasing, after the acquisition", times, lease.AcquiredAt)
		}
		if lease.Name != ledger.RunLeaseName(e.run) {
			t.Errorf("lease %q, want the run's", lease.Name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
