package coordinator

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue/queueerror"
	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/election/bloblease"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/blobstore"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/internal/engine/transport/storagequeue"
	"github.com/batonfn/baton/internal/tools/azurite"
	"github.com/batonfn/baton/work"
)

// runEnv is one test's storage: a leases container (the scheduler lease "leader" and each
// run's own, "runs/<run>"), a runs container and a work queue on the shared Azurite, and the
// clock its instances share.
type runEnv struct {
	t        *testing.T
	srv      *azurite.Server
	runsName string
	leases   *container.Client
	store    *blobstore.Store
	queue    *azqueue.QueueClient
	sender   transport.Sender
	job      *countJob
	jobs     *work.Registry
	finisher *countingFinisher
	// clock is the instances' clock (unless a test gives them the real one): the heartbeats'
	// time, which the test sets. occ is the occurrence of schedule "s" the tests start, ten
	// minutes or so in the past, so that messages due at the times the clock is set to are
	// visible at once on the queue; run is its run.
	clock *testClock
	occ   time.Time
	run   string
}

func newRunEnv(t *testing.T) *runEnv {
	t.Helper()
	return newRunEnvOn(t, azurite.Shared(t))
}

// newRunEnvOn is newRunEnv on srv: a test whose queues grow deep gets an Azurite of its own,
// because every queue call of the emulator scans the queue, and a deep one on the package's
// shared Azurite slows the lease renewals of the tests running beside it.
func newRunEnvOn(t *testing.T, srv *azurite.Server) *runEnv {
	t.Helper()
	blobs, err := azclient.Blob(srv.Storage(), nil)
	if err != nil {
		t.Fatal(err)
	}
	runsName := azurite.UniqueName(t, "runs")
	runs := blobs.ServiceClient().NewContainerClient(runsName)
	qs, err := azclient.Queue(srv.Storage(), nil)
	if err != nil {
		t.Fatal(err)
	}
	q := qs.NewQueueClient(azurite.UniqueName(t, "work"))
	leases := blobs.ServiceClient().NewContainerClient(azurite.UniqueName(t, "lease"))
	occ := time.Now().UTC().Truncate(5 * time.Minute).Add(-10 * time.Minute)
	e := &runEnv{t: t, srv: srv, runsName: runsName, leases: leases, store: blobstore.New(runs, blobstore.Options{}), queue: q,
		sender: storagequeue.NewQueueSender(q, storagequeue.QueueSenderOptions{}), job: &countJob{}, jobs: work.NewRegistry(),
		finisher: &countingFinisher{}, clock: &testClock{}, occ: occ, run: ledger.ScheduleRunID("s", occ)}
	e.clock.set(occ.Add(-time.Minute))
	e.jobs.Register("count", e.job)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = runs.Delete(ctx, nil)
		_, _ = leases.Delete(ctx, nil)
		_, _ = q.Delete(ctx, nil)
	})
	return e
}

// senderHook calls before on every Send, with the 1-based send number.
type senderHook struct {
	transport.Sender
	n      atomic.Int32
	before func(n int32, msgs []transport.Message) error
}

func (s *senderHook) Send(ctx context.Context, msgs []transport.Message) error {
	n := s.n.Add(1)
	if s.before != nil {
		if err := s.before(n, msgs); err != nil {
			return err
		}
	}
	return s.Sender.Send(ctx, msgs)
}

// partitionSends returns a before hook that counts the sends of partitions (checks aside) and
// calls fn with the count before each.
func partitionSends(fn func(n int) error) func(int32, []transport.Message) error {
	var n atomic.Int32
	return func(_ int32, msgs []transport.Message) error {
		if len(msgs) == 0 {
			return nil
		}
		if env, err := work.DecodeEnvelope(msgs[0].Body); err != nil || env.Kind != work.KindPartition {
			return err
		}
		return fn(int(n.Add(1)))
	}
}

// instance is one Baton process: its coordinator and its leader, whose leases (the
// scheduler's and each run's) a test can crash.
type instance struct {
	c      *Coordinator
	id     ledger.Holder
	leader *election.Leader
	// crash makes every release of this instance do nothing, as when the process dies holding
	// its leases: they lapse.
	crash atomic.Bool
	// held counts the run-lease acquisitions that found the lease held by another.
	held atomic.Int32
}

// schedule is the tests' schedule "s": the count job of n partitions every five minutes.
func schedule(n int) Schedule {
	return Schedule{Name: "s", Job: "count", Params: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)), Cron: every(5 * time.Minute)}
}

func (e *runEnv) instance(name string, n, batch int, sender Sender) *instance {
	e.t.Helper()
	return e.instanceWith(name, sender, func(c *Config) {
		c.Schedules, c.BatchSize = []Schedule{schedule(n)}, batch
	})
}

// instanceWith builds an instance whose Config mod may change (store, clock, policies...).
func (e *runEnv) instanceWith(name string, sender Sender, mod func(*Config)) *instance {
	e.t.Helper()
	in := &instance{id: ledger.Holder{App: "test", Instance: name, PID: 1}}
	opts := bloblease.BlobLockOptions{Duration: testBlobLockDuration, Logger: slog.New(slog.DiscardHandler)}
	bl, err := bloblease.NewBlobLock(e.leases, "leader", opts)
	if err != nil {
		e.t.Fatal(err)
	}
	ld, err := election.NewLeader(election.LeaderConfig{
		Lock: &lockWrapper{Lock: bl, crash: &in.crash},
		Locks: func(name string) (election.Lock, error) {
			l, err := bloblease.NewBlobLock(e.leases, name, opts)
			if err != nil {
				return nil, err
			}
			return &lockWrapper{Lock: l, crash: &in.crash, held: &in.held}, nil
		},
		Identity: in.id, LeaseDuration: testBlobLockDuration, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		e.t.Fatal(err)
	}
	if sender == nil {
		sender = e.sender
	}
	cfg := Config{Leader: ld, Store: e.store, Sender: sender, Jobs: e.jobs, Finisher: e.finisher, Identity: in.id,
		Schedules: []Schedule{schedule(1)}, BatchSize: 5, RunTimeout: time.Hour, CheckRounds: 2, FinishGrace: time.Millisecond, Now: e.clock.Now,
		Logger: slog.New(slog.DiscardHandler)}
	mod(&cfg)
	c, err := New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	in.c, in.leader = c, ld
	return in
}

// heartbeat sets the clock to at and has in beat once.
func (e *runEnv) heartbeat(in *instance, at time.Time) HeartbeatOutcome {
	e.t.Helper()
	e.clock.set(at)
	out, err := in.c.Heartbeat(testCtx(e.t))
	if err != nil {
		e.t.Fatalf("heartbeat at %s: %v", at, err)
	}
	return out
}

// startOccurrence has in start the cursor of schedule "s" a minute before e.occ and then
// decide e.occ: it returns the heartbeat's decision.
func (e *runEnv) startOccurrence(in *instance) Decision {
	e.t.Helper()
	e.heartbeat(in, e.occ.Add(-time.Minute))
	out := e.heartbeat(in, e.occ.Add(300*time.Millisecond))
	if len(out.Decisions) != 1 || out.Decisions[0].Run != e.run {
		e.t.Fatalf("heartbeat at the occurrence decided %+v, want %s", out.Decisions, e.run)
	}
	return out.Decisions[0]
}

// runLease is a lock over run's own lease, for a test to read its state.
func (e *runEnv) runLease(run string) *bloblease.BlobLock {
	e.t.Helper()
	l, err := bloblease.NewBlobLock(e.leases, ledger.RunLeaseName(run), bloblease.BlobLockOptions{Duration: testBlobLockDuration})
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

// waitLapsed waits for run's lease to be free (a crashed planner's lapses a lease after its
// last renewal).
func (e *runEnv) waitLapsed(ctx context.Context, run string) {
	e.t.Helper()
	l := e.runLease(run)
	waitFor(e.t, 40*time.Second, "the crashed planner's run lease to lapse", func() bool {
		st, err := l.State(ctx)
		return err == nil && !st.Held
	})
}

func (e *runEnv) manifest(run string) ledger.Manifest {
	e.t.Helper()
	m, err := e.store.ReadManifest(context.Background(), run)
	if err != nil {
		e.t.Fatalf("run %s: %v", run, err)
	}
	return m
}

// drain dequeues every visible message and returns the envelopes. It deletes each message with
// a call of its own, so its deadline is generous: the package's tests share one Azurite, which a
// loaded 2-core machine can slow to a few calls a second.
func (e *runEnv) drain() []work.Envelope {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out []work.Envelope
	for {
		resp, err := e.queue.DequeueMessages(ctx, &azqueue.DequeueMessagesOptions{NumberOfMessages: to.Ptr(int32(32)), VisibilityTimeout: to.Ptr(int32(600))})
		if queueerror.HasCode(err, queueerror.QueueNotFound) {
			return out // nothing was ever sent: the sender creates the queue on its first send
		}
		if err != nil {
			e.t.Fatalf("dequeue: %v", err)
		}
		if len(resp.Messages) == 0 {
			return out
		}
		for _, m := range resp.Messages {
			body, err := base64.StdEncoding.DecodeString(*m.MessageText)
			if err != nil {
				e.t.Fatalf("message is not base64 (the queue trigger would poison it): %v", err)
			}
			env, err := work.DecodeEnvelope(body)
			if err != nil {
				e.t.Fatalf("message is not an envelope: %v", err)
			}
			out = append(out, env)
			if _, err := e.queue.DeleteMessage(ctx, *m.MessageID, *m.PopReceipt, nil); err != nil {
				e.t.Fatalf("delete: %v", err)
			}
		}
	}
}

func partitions(envs []work.Envelope) (idx []int, epochs map[int64]int, checks int) {
	epochs = map[int64]int{}
	for _, e := range envs {
		if e.Kind == work.KindCheck {
			checks++
			continue
		}
		for _, one := range e.Singles() {
			idx = append(idx, one.Part)
			epochs[one.Epoch]++
		}
	}
	sort.Ints(idx)
	return idx, epochs, checks
}

// checksOf returns run's checks among envs of the given round (any round when round < 0).
func checksOf(envs []work.Envelope, run string, round int) []work.Envelope {
	var out []work.Envelope
	for _, env := range envs {
		if env.Kind == work.KindCheck && env.Run == run && (round < 0 || env.Round == round) {
			out = append(out, env)
		}
	}
	return out
}

// startCheck returns run's one start check (epoch 0, round 1) among envs.
func startCheck(t *testing.T, envs []work.Envelope, run string) work.Envelope {
	t.Helper()
	var got []work.Envelope
	for _, env := range checksOf(envs, run, 1) {
		if env.Epoch == 0 {
			got = append(got, env)
		}
	}
	if len(got) != 1 {
		t.Fatalf("%d start checks for %s among %d messages, want 1", len(got), run, len(envs))
	}
	return got[0]
}

func wantEach(t *testing.T, idx []int, n int) {
	t.Helper()
	seen := map[int]int{}
	for _, i := range idx {
		seen[i]++
	}
	for i := range n {
		if seen[i] == 0 {
			t.Errorf("partition %d never enqueued", i)
		}
	}
	if len(seen) != n {
		t.Errorf("%d distinct partitions enqueued, want %d", len(seen), n)
	}
}

// Ten instances heartbeat the same occurrence at once, then all ten receive its start check at
// once: one run (one record, decided by one heartbeat, one start check), planned by one
// planner under the run's lease, every partition enqueued exactly once, in one segment.
func TestHeartbeat_TenInstancesOneRunOnePlanner(t *testing.T) {
	e := newRunEnv(t)
	const n, batch = 57, 10 // six plan batches
	var insts []*instance
	for i := range 10 {
		insts = append(insts, e.instance(fmt.Sprintf("i%d", i), n, batch, nil))
	}
	ctx := testCtx(t)
	e.heartbeat(insts[0], e.occ.Add(-time.Minute)) // the schedule's cursor starts
	e.clock.set(e.occ.Add(300 * time.Millisecond))
	var wg sync.WaitGroup
	outs := make([]HeartbeatOutcome, len(insts))
	errs := make([]error, len(insts))
	for i, in := range insts {
		wg.Add(1)
		go func() { defer wg.Done(); outs[i], errs[i] = in.c.Heartbeat(ctx) }()
	}
	wg.Wait()
	var decisions []Decision
	for i := range insts {
		if errs[i] != nil {
			t.Fatalf("instance %d: %v", i, errs[i])
		}
		decisions = append(decisions, outs[i].Decisions...)
	}
	if len(decisions) != 1 || decisions[0].Run != e.run || decisions[0].Status != StatusStarted {
		t.Fatalf("the ten heartbeats decided %+v, want %s started once", decisions, e.run)
	}
	if m := e.manifest(e.run); m.State != ledger.StatePlanning || m.Epoch != 0 || m.Lease != ledger.RunLeaseName(e.run) {
		t.Fatalf("record %+v, want planning at epoch 0 under its own lease", m)
	}
	start := startCheck(t, e.drain(), e.run)

	for i, in := range insts {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = in.c.Check(ctx, start, firstDelivery) }()
	}
	wg.Wait()
	for i := range insts {
		if errs[i] != nil {
			t.Fatalf("instance %d's start check: %v", i, errs[i])
		}
	}
	m := e.manifest(e.run)
	if !m.PlanDone || m.Partitions != n || m.State != ledger.StateRunning || len(m.Segments) != 1 ||
		m.Segments[0] != (ledger.Segment{Epoch: m.Epoch, From: 0}) {
		t.Errorf("manifest: planDone %v partitions %d state %s epoch %d segments %v; want one planner's", m.PlanDone, m.Partitions, m.State, m.Epoch, m.Segments)
	}
	drained := e.drain()
	idx, epochs, _ := partitions(drained)
	if len(idx) != n {
		t.Errorf("%d partitions sent, want %d (no second planning)", len(idx), n)
	}
	// Each instance that found the run's lease held looks again a lease later (due at once on
	// this test's clock); the planner's own next check is not due before the run's deadline.
	var held int32
	for _, in := range insts {
		held += in.held.Load()
	}
	if again := checksOf(drained, e.run, 2); len(again) != int(held) {
		t.Errorf("%d next checks due at once, want one per start check that found the lease held (%d)", len(again), held)
	}
	t.Logf("%d of the ten start checks found the run's lease held", held)
	wantEach(t, idx, n)
	if len(epochs) != 1 || epochs[m.Epoch] != n {
		t.Errorf("messages from epochs %v, want all from the one planner's %d", epochs, m.Epoch)
	}
	if calls := e.job.planCalls.Load(); calls != 6 {
		t.Errorf("the job planned %d batches, want its 6 once each", calls)
	}
	if e.finisher.calls.Load() == 0 {
		t.Error("the planner did not try to finish after planning")
	}
}

// Replays decide nothing again: the occurrence's heartbeat replayed later (any instance), or by
// an instance whose clock runs a little behind, records nothing, and its start check delivered
// again enqueues nothing and plans nothing.
func TestHeartbeat_ReplaysDecideNothingAgain(t *testing.T) {
	e := newRunEnv(t)
	a, b := e.instance("a", 12, 5, nil), e.instance("b", 12, 5, nil)
	ctx := testCtx(t)
	if d := e.startOccurrence(a); d.Status != StatusStarted {
		t.Fatalf("first heartbeat: %+v", d)
	}
	start := startCheck(t, e.drain(), e.run)
	if err := a.c.Check(ctx, start, firstDelivery); err != nil {
		t.Fatal(err)
	}
	if idx, _, _ := partitions(e.drain()); len(idx) != 12 {
		t.Fatalf("planned %d partitions, want 12", len(idx))
	}
	plans := e.job.planCalls.Load()
	for _, at := range []time.Time{e.occ.Add(40 * time.Second), e.occ.Add(4*time.Minute + 59*time.Second), e.occ.Add(-800 * time.Millisecond)} {
		if out := e.heartbeat(b, at); len(out.Decisions) != 0 {
			t.Errorf("replayed heartbeat at %s decided %+v", at, out.Decisions)
		}
	}
	if err := b.c.Check(ctx, start, work.Delivery{MessageID: "check", Count: 2}); err != nil {
		t.Fatalf("replayed start check: %v", err)
	}
	if idx, _, _ := partitions(e.drain()); len(idx) != 0 {
		t.Errorf("replays enqueued %v", idx)
	}
	if e.job.planCalls.Load() != plans {
		t.Error("a replay planned again")
	}
	st, err := e.store.ReadSchedule(ctx, "s")
	if err != nil || !st.Cursor.Equal(e.occ) || st.Latest != e.run {
		t.Errorf("schedule state %+v, %v; want the cursor at the occurrence and its run the latest", st, err)
	}
}

// A planner that dies mid-enqueue, after k of its plan batches, without releasing the run's
// lease: a delivery of the run's start check before the lease lapses finds it held and only
// sends the chain's next check; that check, delivered once the lease has lapsed, resumes the
// run from its checkpoint at a newer epoch, in a segment of its own from the checkpoint (or,
// when nothing was checkpointed, in the dead planner's segment moved to the new epoch), and
// every partition ends up enqueued.
func TestCheck_CrashedPlannerResumedFromItsCheckpoint(t *testing.T) {
	for _, k := range []int{2, 0} {
		t.Run(fmt.Sprintf("after %d batches", k), func(t *testing.T) {
			t.Parallel() // each waits for a lease to lapse
			e := newRunEnv(t)
			const n, batch = 23, 5
			crash := errors.New("injected crash")
			var a *instance
			hook := &senderHook{Sender: e.sender, before: partitionSends(func(sent int) error {
				if sent == k+1 {
					a.crash.Store(true)
					return crash
				}
				return nil
			})}
			a = e.instance("a", n, batch, hook)
			b := e.instance("b", n, batch, nil)
			ctx := testCtx(t)
			e.startOccurrence(b)
			start := startCheck(t, e.drain(), e.run)
			if err := a.c.Check(ctx, start, firstDelivery); !errors.Is(err, crash) {
				t.Fatalf("the crashed planner's check returned %v", err)
			}
			m := e.manifest(e.run)
			if m.Checkpoint.Batches != k || m.PlanDone || m.Epoch < 1 {
				t.Fatalf("after the crash: checkpoint %+v planDone %v epoch %d, want %d batches under a planner's epoch", m.Checkpoint, m.PlanDone, m.Epoch, k)
			}
			firstEpoch := m.Epoch
			msgs := e.drain()

			// The host delivers the start check again before the lease lapses: held, so the
			// check only sends the chain's next one.
			if err := b.c.Check(ctx, start, work.Delivery{MessageID: "check", Count: 2}); err != nil {
				t.Fatalf("early check: %v", err)
			}
			if m := e.manifest(e.run); m.Epoch != firstEpoch || b.held.Load() == 0 {
				t.Fatalf("a check took over before the crashed planner's lease lapsed (epoch %d, held %d)", m.Epoch, b.held.Load())
			}
			drained := e.drain()
			next := checksOf(drained, e.run, 2)
			if len(next) != 1 {
				t.Fatalf("%d next checks (round 2), want 1", len(next))
			}
			e.waitLapsed(ctx, e.run)
			if err := b.c.Check(ctx, next[0], firstDelivery); err != nil {
				t.Fatalf("check after the lapse: %v", err)
			}
			m = e.manifest(e.run)
			if !m.PlanDone || m.Partitions != n || m.Epoch <= firstEpoch || m.Leader.Instance != "b" {
				t.Fatalf("resumed manifest: planDone %v partitions %d epoch %d (first %d) leader %s", m.PlanDone, m.Partitions, m.Epoch, firstEpoch, m.Leader.Instance)
			}
			want := []ledger.Segment{{Epoch: firstEpoch, From: 0}, {Epoch: m.Epoch, From: k * batch}}
			if k == 0 {
				want = []ledger.Segment{{Epoch: m.Epoch, From: 0}}
			}
			if fmt.Sprint(m.Segments) != fmt.Sprint(want) {
				t.Errorf("segments %v, want %v", m.Segments, want)
			}
			idx, epochs, _ := partitions(append(append(msgs, drained...), e.drain()...))
			wantEach(t, idx, n)
			if epochs[m.Epoch] != n-k*batch || epochs[firstEpoch] != k*batch {
				t.Errorf("partitions by epoch %v, want %d from the crashed planner and %d from the checkpoint on", epochs, k*batch, n-k*batch)
			}
		})
	}
}

// A planner deposed mid-enqueue (its run lease broken, the run taken over by another) writes
// nothing more to the manifest: its epoch is fenced out.
func TestCheck_DeposedPlannerWritesNothing(t *testing.T) {
	e := newRunEnv(t)
	const n, batch = 30, 5
	ctx := testCtx(t)
	b := e.instance("b", n, batch, nil)
	var afterTakeover ledger.Manifest
	hook := &senderHook{Sender: e.sender, before: partitionSends(func(sent int) error {
		if sent != 2 { // batch 0 goes out; the takeover happens while batch 1 is sent
			return nil
		}
		lc, err := lease.NewBlobClient(e.leases.NewBlockBlobClient(ledger.RunLeaseName(e.run)), nil)
		if err != nil {
			return err
		}
		if _, err := lc.BreakLease(ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr(int32(0))}); err != nil {
			return err
		}
		if out, err := b.c.resumeAsLeader(ctx, e.manifest(e.run), false); err != nil || out.Status != StatusResumed {
			return fmt.Errorf("takeover: %+v, %w", out, err)
		}
		afterTakeover = e.manifest(e.run)
		return nil
	})}
	a := e.instance("a", n, batch, hook)
	e.startOccurrence(b)
	start := startCheck(t, e.drain(), e.run)
	err := a.c.Check(ctx, start, firstDelivery)
	if !errors.Is(err, ledger.ErrFenced) && !errors.Is(err, election.ErrLeaseLost) {
		t.Fatalf("deposed planner returned %v, want ErrFenced or ErrLeaseLost", err)
	}
	final := e.manifest(e.run)
	if !final.Updated.Equal(afterTakeover.Updated) || final.Epoch != afterTakeover.Epoch || final.Leader.Instance != "b" {
		t.Errorf("manifest changed after the takeover: before %+v\nafter %+v", afterTakeover, final)
	}
	if !final.PlanDone || final.Partitions != n {
		t.Errorf("new planner did not finish: %+v", final)
	}
	idx, _, _ := partitions(e.drain())
	wantEach(t, idx, n)
}

// Past the deadline, the check re-enqueues only the missing partitions, as round 1 under the
// run's epoch; a duplicate of that check sends nothing more; after the last round it records
// them as failed so the run can finish.
func TestCheck_PastDeadlineReenqueuesOnlyMissing(t *testing.T) {
	e := newRunEnv(t)
	const n = 10
	in := e.instance("a", n, 4, nil)
	ctx := testCtx(t)
	e.startOccurrence(in)
	if err := in.c.Check(ctx, startCheck(t, e.drain(), e.run), firstDelivery); err != nil {
		t.Fatal(err)
	}
	e.drain()
	m := e.manifest(e.run)
	missing := map[int]bool{3: true, 7: true}
	for i := range n {
		if missing[i] {
			continue
		}
		if err := e.store.PutResult(ctx, ledger.Result{Run: e.run, Index: i, Epoch: m.Epoch, OK: true}); err != nil {
			t.Fatal(err)
		}
	}
	check := work.Envelope{Version: 1, Kind: work.KindCheck, Run: e.run, Epoch: m.Epoch, Round: 2}

	// Before the deadline: nothing is re-enqueued.
	if err := in.c.Check(ctx, check, firstDelivery); err != nil {
		t.Fatal(err)
	}
	if idx, _, _ := partitions(e.drain()); len(idx) != 0 {
		t.Fatalf("re-enqueued %v before the deadline", idx)
	}
	e.clock.set(m.Deadline.Add(time.Minute))
	if err := in.c.Check(ctx, check, firstDelivery); err != nil {
		t.Fatal(err)
	}
	envs := e.drain()
	idx, _, _ := partitions(envs)
	if fmt.Sprint(idx) != "[3 7]" {
		t.Fatalf("re-enqueued %v, want [3 7]", idx)
	}
	for _, env := range envs {
		if env.Kind == work.KindPartition && (env.Round != 1 || env.Epoch != m.Epoch) {
			t.Errorf("re-enqueued %+v: want round 1 under the run's epoch %d", env, m.Epoch)
		}
	}
	// A duplicate delivery of the same check does not send again (the round is claimed).
	if err := in.c.Check(ctx, check, firstDelivery); err != nil {
		t.Fatal(err)
	}
	if idx, _, _ := partitions(e.drain()); len(idx) != 0 {
		t.Errorf("duplicate check re-enqueued %v", idx)
	}
	// Use up the rounds, then the check records the missing partitions as failed.
	m, err := e.store.UpdateManifest(ctx, e.run, ledger.NoFence, func(m *ledger.Manifest) error {
		m.CheckRound = 2
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e.clock.set(m.Deadline.Add(time.Minute))
	calls := e.finisher.calls.Load()
	if err := in.c.Check(ctx, check, firstDelivery); err != nil {
		t.Fatal(err)
	}
	for i := range missing {
		r, err := e.store.ReadResult(ctx, e.run, i)
		if err != nil || r.OK || !r.TimedOut || r.Error == "" {
			t.Errorf("partition %d after the last round: %+v, %v; want a recorded failure", i, r, err)
		}
	}
	if e.finisher.calls.Load() <= calls {
		t.Error("the check did not try to finish the run after recording failures")
	}
}

// A check whose run the ledger does not hold (the run was deleted, or the message is not
// Baton's: a run's record is always created before its first check is sent) is dropped, with
// a warning naming the run: nothing to resume, and retrying would only dead-letter it.
func TestCheck_UnknownRunIsDropped(t *testing.T) {
	e := newRunEnv(t)
	var logs bytes.Buffer
	in := e.instanceWith("a", nil, func(c *Config) { c.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
	ctx := testCtx(t)
	const gone = "manual-gone"
	if err := in.c.Check(ctx, work.Envelope{Version: 1, Kind: work.KindCheck, Run: gone, Epoch: 1, Round: 2}, firstDelivery); err != nil {
		t.Fatalf("got %v, want nil", err)
	}
	if _, err := e.store.ReadManifest(ctx, gone); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("the check created a run: %v", err)
	}
	var line struct{ Level, Msg, Run string }
	if err := json.Unmarshal(logs.Bytes(), &line); err != nil {
		t.Fatalf("want one JSON log line, got %q: %v", logs.String(), err)
	}
	if line.Level != "WARN" || line.Run != gone || !strings.Contains(line.Msg, "no such run") {
		t.Errorf("log line %+v, want a warning naming run %s", line, gone)
	}
}

// A heartbeat that creates its occurrence's run but cannot send its start check fails (so the
// host logs it) and leaves the cursor before the occurrence: the next heartbeat finds the run,
// decides the next occurrence against it and, the run being past one check interval after
// its start, plans it, so the schedule never wedges behind a run nobody plans.
func TestHeartbeat_UnsentStartCheckIsSentByTheNextHeartbeat(t *testing.T) {
	e := newRunEnv(t)
	ctx := testCtx(t)
	lost := errors.New("injected: the start check's send failed")
	hook := &senderHook{Sender: e.sender, before: func(n int32, msgs []transport.Message) error {
		if n == 1 { // send 1 is the run's start check
			return lost
		}
		return nil
	}}
	a := e.instance("a", 7, 5, hook)
	e.heartbeat(a, e.occ.Add(-time.Minute))
	e.clock.set(e.occ.Add(300 * time.Millisecond))
	if _, err := a.c.Heartbeat(ctx); !errors.Is(err, lost) {
		t.Fatalf("heartbeat whose start check was lost returned %v", err)
	}
	if m := e.manifest(e.run); m.State != ledger.StatePlanning || m.Epoch != 0 {
		t.Fatalf("after the lost send: %+v", m)
	}
	if envs := e.drain(); len(envs) != 0 {
		t.Fatalf("%+v on the queue, want nothing", envs)
	}
	if st, err := e.store.ReadSchedule(ctx, "s"); err != nil || !st.Cursor.Before(e.occ) {
		t.Fatalf("schedule state %+v, %v: the cursor moved past an occurrence whose start check was lost", st, err)
	}
	out := e.heartbeat(a, e.occ.Add(5*time.Minute+300*time.Millisecond))
	if len(out.Decisions) != 2 || out.Decisions[0].Run != e.run || out.Decisions[0].Status != StatusExisting ||
		out.Decisions[1].State != ledger.StateSkipped || !strings.Contains(out.Decisions[1].Reason, e.run) {
		t.Fatalf("next heartbeat decided %+v, want %s found again and the next occurrence skipped behind it", out.Decisions, e.run)
	}
	// Past one check interval after its start, that heartbeat also planned the run itself.
	if m := e.manifest(e.run); !m.PlanDone || m.Partitions != 7 || m.State != ledger.StateRunning {
		t.Fatalf("run after the next heartbeat: %+v", m)
	}
	idx, _, _ := partitions(e.drain())
	wantEach(t, idx, 7)
}
