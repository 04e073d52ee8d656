package coordinator

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/batonfn/baton/election"
	"github.com/batonfn/baton/election/bloblease"
	"github.com/batonfn/baton/internal/azclient"
	"github.com/batonfn/baton/internal/azurite"
	"github.com/batonfn/baton/ledger"
	"github.com/batonfn/baton/ledger/blobstore"
	"github.com/batonfn/baton/transport"
	"github.com/batonfn/baton/transport/storagequeue"
	"github.com/batonfn/baton/work"
)

// countJob plans n partitions {"i":k}; it does no I/O.
type countJob struct{ planCalls atomic.Int32 }

func (j *countJob) Plan(ctx context.Context, params json.RawMessage, cursor string, emit func(json.RawMessage, string) error) error {
	j.planCalls.Add(1)
	var p struct{ N int }
	if err := json.Unmarshal(params, &p); err != nil {
		return err
	}
	start := 0
	if cursor != "" {
		var err error
		if start, err = strconv.Atoi(cursor); err != nil {
			return err
		}
	}
	for i := start; i < p.N; i++ {
		if err := emit(json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), strconv.Itoa(i+1)); err != nil {
			return err
		}
	}
	return nil
}

func (j *countJob) Process(ctx context.Context, p work.Partition) (json.RawMessage, error) {
	return p.Payload, nil
}

func (j *countJob) Aggregate(ctx context.Context, run work.RunInfo, results iter.Seq2[ledger.Result, error]) (json.RawMessage, error) {
	return json.RawMessage(`{}`), nil
}

// countingFinisher records TryFinish calls and never finishes.
type countingFinisher struct{ calls atomic.Int32 }

func (f *countingFinisher) TryFinish(ctx context.Context, run string) (bool, error) {
	f.calls.Add(1)
	return false, nil
}

func (f *countingFinisher) TryFinishByListing(ctx context.Context, run string) (bool, error) {
	f.calls.Add(1)
	return false, nil
}

// runEnv is one test's storage: a leases container, a runs container and a work queue on the
// shared Azurite.
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
	e := &runEnv{t: t, srv: srv, runsName: runsName, leases: leases, store: blobstore.New(runs, blobstore.Options{}), queue: q,
		sender: storagequeue.NewQueueSender(q, storagequeue.QueueSenderOptions{}), job: &countJob{}, jobs: work.NewRegistry(), finisher: &countingFinisher{}}
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

// lockWrapper lets a test crash a leader: with crash set, Release does nothing, as when the
// process dies holding the lease.
type lockWrapper struct {
	election.Lock
	crash atomic.Bool
	held  atomic.Int32 // Acquire calls that found the lease held
}

func (w *lockWrapper) Acquire(ctx context.Context, id ledger.Holder) (election.Lease, error) {
	l, err := w.Lock.Acquire(ctx, id)
	if errors.As(err, new(*election.HeldError)) {
		w.held.Add(1)
	}
	return l, err
}

func (w *lockWrapper) Release(ctx context.Context, l election.Lease) error {
	if w.crash.Load() {
		return nil
	}
	return w.Lock.Release(ctx, l)
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

type instance struct {
	c      *Coordinator
	lock   *lockWrapper
	id     ledger.Holder
	leader *election.Leader
}

func (e *runEnv) instance(name string, n, batch int, sender Sender) *instance {
	e.t.Helper()
	return e.instanceWith(name, sender, func(c *Config) {
		c.Params, c.BatchSize = json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)), batch
	})
}

// instanceWith builds an instance whose Config mod may change (store, clock, policies...).
func (e *runEnv) instanceWith(name string, sender Sender, mod func(*Config)) *instance {
	e.t.Helper()
	bl, err := bloblease.NewBlobLock(e.leases, "leader", bloblease.BlobLockOptions{Duration: testBlobLockDuration, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		e.t.Fatal(err)
	}
	lw := &lockWrapper{Lock: bl}
	id := ledger.Holder{App: "test", Instance: name, PID: 1}
	ld, err := election.NewLeader(election.LeaderConfig{Lock: lw, Identity: id, LeaseDuration: testBlobLockDuration, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		e.t.Fatal(err)
	}
	if sender == nil {
		sender = e.sender
	}
	cfg := Config{Leader: ld, Store: e.store, Sender: sender, Jobs: e.jobs, Finisher: e.finisher, Identity: id,
		Job: "count", Params: json.RawMessage(`{"n":1}`), Schedule: mustSchedule(e.t, "0 */5 * * * *"),
		BatchSize: 5, RunTimeout: time.Hour, CheckRounds: 2, Logger: slog.New(slog.DiscardHandler)}
	mod(&cfg)
	c, err := New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return &instance{c: c, lock: lw, id: id, leader: ld}
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
		idx = append(idx, e.Part)
		epochs[e.Epoch]++
	}
	sort.Ints(idx)
	return idx, epochs, checks
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

var tick = TickInput{Now: at("2026-11-21T10:05:00.3Z")}

const tickRun = "tick-20261121t100500z"

// Invariant 2: ten instances tick the same occurrence at once → one manifest, every partition
// enqueued once, no second planning.
func TestTick_TenInstancesOneRun(t *testing.T) {
	e := newRunEnv(t)
	const n, batch = 57, 10
	var insts []*instance
	for i := range 10 {
		insts = append(insts, e.instance(fmt.Sprintf("i%d", i), n, batch, nil))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	outs := make([]Outcome, len(insts))
	errs := make([]error, len(insts))
	for i, in := range insts {
		wg.Add(1)
		go func() { defer wg.Done(); outs[i], errs[i] = in.c.Tick(ctx, tick) }()
	}
	wg.Wait()
	started := 0
	for i := range insts {
		if errs[i] != nil {
			t.Fatalf("instance %d: %v", i, errs[i])
		}
		switch outs[i].Status {
		case StatusStarted:
			started++
		case StatusHeld, StatusExisting:
		default:
			t.Errorf("instance %d: status %s", i, outs[i].Status)
		}
		if outs[i].Run != tickRun {
			t.Errorf("instance %d computed run %s, want %s", i, outs[i].Run, tickRun)
		}
	}
	if started != 1 {
		t.Fatalf("%d instances started the run, want exactly 1", started)
	}
	m, err := e.store.ReadManifest(ctx, tickRun)
	if err != nil {
		t.Fatal(err)
	}
	if !m.PlanDone || m.Partitions != n || m.State != ledger.StateRunning || len(m.Segments) != 1 {
		t.Errorf("manifest: planDone %v partitions %d state %s segments %v", m.PlanDone, m.Partitions, m.State, m.Segments)
	}
	idx, epochs, _ := partitions(e.drain())
	if len(idx) != n {
		t.Errorf("%d partition messages, want %d (no second planning)", len(idx), n)
	}
	wantEach(t, idx, n)
	if len(epochs) != 1 {
		t.Errorf("messages from epochs %v, want one leader", epochs)
	}
	if e.finisher.calls.Load() == 0 {
		t.Error("the leader did not try to finish after planning")
	}
}

// Invariant 2: the same occurrence ticked again later (replay, restart, past due) enqueues
// nothing new.
func TestTick_ReplayEnqueuesNothing(t *testing.T) {
	e := newRunEnv(t)
	in := e.instance("a", 12, 5, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := in.c.Tick(ctx, tick); err != nil || out.Status != StatusStarted {
		t.Fatalf("first tick: %+v, %v", out, err)
	}
	e.drain()
	plans := e.job.planCalls.Load()
	for _, replay := range []TickInput{
		{Now: at("2026-11-21T10:05:40Z")},
		{Now: at("2026-11-21T10:04:59.2Z")},
		{Now: at("2026-11-21T10:09:00Z"), PastDue: true, Next: at("2026-11-21T10:05:00Z")},
	} {
		out, err := e.instance("b", 12, 5, nil).c.Tick(ctx, replay)
		if err != nil || out.Status != StatusExisting || out.Run != tickRun {
			t.Errorf("replay at %s: %+v, %v; want existing %s", replay.Now, out, err, tickRun)
		}
	}
	if msgs := e.drain(); len(msgs) != 0 {
		t.Errorf("replays enqueued %d messages", len(msgs))
	}
	if e.job.planCalls.Load() != plans {
		t.Error("a replay planned again")
	}
}

// Invariants 3 and 5: a leader dies after k of n batches without releasing; the scheduled
// check resumes after the lease expires with a higher epoch, and every partition ends up
// enqueued.
func TestTick_LeaderCrashResumedByCheck(t *testing.T) {
	e := newRunEnv(t)
	const n, batch, k = 23, 5, 2
	crash := errors.New("injected crash")
	var a *instance
	hook := &senderHook{Sender: e.sender}
	hook.before = func(sent int32, msgs []transport.Message) error {
		// send 1 is the check message; sends 2.. are plan batches.
		if sent == 2+k {
			a.lock.crash.Store(true)
			return crash
		}
		return nil
	}
	a = e.instance("a", n, batch, hook)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	_, err := a.c.Tick(ctx, tick)
	if !errors.Is(err, crash) {
		t.Fatalf("crashed tick returned %v", err)
	}
	m, _ := e.store.ReadManifest(ctx, tickRun)
	if m.Checkpoint.Batches != k || m.PlanDone {
		t.Fatalf("after the crash: checkpoint %+v planDone %v, want %d batches", m.Checkpoint, m.PlanDone, k)
	}
	firstEpoch := m.Epoch
	msgs := e.drain()
	var check work.Envelope
	for _, env := range msgs {
		if env.Kind == work.KindCheck {
			t.Fatalf("check message visible before the lease could expire")
		}
	}
	// The check message is invisible until lease+margin; fetch its envelope from what was sent.
	check = work.Envelope{Version: 1, Kind: work.KindCheck, Run: tickRun, Epoch: firstEpoch, Round: 1}

	b := e.instance("b", n, batch, nil)
	// Before expiry, the check finds the lease held and only reschedules.
	if err := b.c.Check(ctx, check, firstDelivery); err != nil {
		t.Fatalf("early check: %v", err)
	}
	if m2, _ := e.store.ReadManifest(ctx, tickRun); m2.Epoch != firstEpoch {
		t.Fatalf("a check took over before the crashed leader's lease expired")
	}
	waitFor(t, 40*time.Second, "the crashed leader's lease to expire", func() bool {
		st, err := b.leader.State(ctx)
		return err == nil && !st.Held
	})
	if err := b.c.Check(ctx, check, firstDelivery); err != nil {
		t.Fatalf("check after expiry: %v", err)
	}
	m, err = e.store.ReadManifest(ctx, tickRun)
	if err != nil {
		t.Fatal(err)
	}
	if !m.PlanDone || m.Partitions != n || m.Epoch <= firstEpoch || len(m.Segments) != 2 || m.Segments[1].From != k*batch {
		t.Fatalf("resumed manifest: planDone %v partitions %d epoch %d (first %d) segments %v", m.PlanDone, m.Partitions, m.Epoch, firstEpoch, m.Segments)
	}
	idx, epochs, _ := partitions(append(msgs, e.drain()...))
	wantEach(t, idx, n)
	if epochs[m.Epoch] != n-k*batch {
		t.Errorf("resumed leader sent %d partitions, want %d (from the checkpoint on)", epochs[m.Epoch], n-k*batch)
	}
}

// Invariant 5: a leader deposed mid-enqueue (lease broken, run taken over) writes nothing more
// to the manifest.
func TestTick_DeposedLeaderWritesNothing(t *testing.T) {
	e := newRunEnv(t)
	const n, batch = 30, 5
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	b := e.instance("b", n, batch, nil)
	var afterTakeover ledger.Manifest
	hook := &senderHook{Sender: e.sender}
	hook.before = func(sent int32, msgs []transport.Message) error {
		if sent != 3 { // check, batch 0, then break during batch 1
			return nil
		}
		lc, err := lease.NewBlobClient(e.leases.NewBlockBlobClient("leader"), nil)
		if err != nil {
			return err
		}
		if _, err := lc.BreakLease(ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr(int32(0))}); err != nil {
			return err
		}
		if out, err := b.c.resumeAsLeader(ctx, tickRun); err != nil || out.Status != StatusResumed {
			return fmt.Errorf("takeover: %+v, %w", out, err)
		}
		afterTakeover, _ = e.store.ReadManifest(ctx, tickRun)
		return nil
	}
	a := e.instance("a", n, batch, hook)
	_, err := a.c.Tick(ctx, tick)
	if !errors.Is(err, ledger.ErrFenced) && !errors.Is(err, election.ErrLeaseLost) {
		t.Fatalf("deposed leader returned %v, want ErrFenced or ErrLeaseLost", err)
	}
	final, err := e.store.ReadManifest(ctx, tickRun)
	if err != nil {
		t.Fatal(err)
	}
	if !final.Updated.Equal(afterTakeover.Updated) || final.Epoch != afterTakeover.Epoch || final.Leader.Instance != "b" {
		t.Errorf("manifest changed after the takeover: before %+v\nafter %+v", afterTakeover, final)
	}
	if !final.PlanDone || final.Partitions != n {
		t.Errorf("new leader did not finish: %+v", final)
	}
	idx, _, _ := partitions(e.drain())
	wantEach(t, idx, n)
}

// Invariant 3: past the deadline, the check re-enqueues only the missing partitions; after the
// last round it records them as failed so the run can finish.
func TestCheck_PastDeadlineReenqueuesOnlyMissing(t *testing.T) {
	e := newRunEnv(t)
	const n = 10
	in := e.instance("a", n, 4, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := in.c.Tick(ctx, tick); err != nil {
		t.Fatal(err)
	}
	e.drain()
	m, _ := e.store.ReadManifest(ctx, tickRun)
	missing := map[int]bool{3: true, 7: true}
	for i := range n {
		if missing[i] {
			continue
		}
		if err := e.store.PutResult(ctx, ledger.Result{Run: tickRun, Index: i, Epoch: m.Epoch, OK: true}); err != nil {
			t.Fatal(err)
		}
	}
	pastDeadline := func() {
		if _, err := e.store.UpdateManifest(ctx, tickRun, ledger.NoFence, func(m *ledger.Manifest) error {
			m.Deadline = time.Now().Add(-time.Minute)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	check := work.Envelope{Version: 1, Kind: work.KindCheck, Run: tickRun, Epoch: m.Epoch, Round: 1}

	// Before the deadline: nothing is re-enqueued.
	if err := in.c.Check(ctx, check, firstDelivery); err != nil {
		t.Fatal(err)
	}
	if idx, _, _ := partitions(e.drain()); len(idx) != 0 {
		t.Fatalf("re-enqueued %v before the deadline", idx)
	}
	pastDeadline()
	if err := in.c.Check(ctx, check, firstDelivery); err != nil {
		t.Fatal(err)
	}
	envs := e.drain()
	idx, _, _ := partitions(envs)
	if fmt.Sprint(idx) != "[3 7]" {
		t.Fatalf("re-enqueued %v, want [3 7]", idx)
	}
	for _, env := range envs {
		if env.Kind == work.KindPartition && (env.Round != 1 || env.Epoch < m.Epoch) {
			t.Errorf("re-enqueued %+v: want round 1 and a current epoch", env)
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
	if _, err := e.store.UpdateManifest(ctx, tickRun, ledger.NoFence, func(m *ledger.Manifest) error {
		m.CheckRound = 2
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	pastDeadline()
	calls := e.finisher.calls.Load()
	if err := in.c.Check(ctx, check, firstDelivery); err != nil {
		t.Fatal(err)
	}
	for i := range missing {
		r, err := e.store.ReadResult(ctx, tickRun, i)
		if err != nil || r.OK || r.Error == "" {
			t.Errorf("partition %d after the last round: %+v, %v; want a recorded failure", i, r, err)
		}
	}
	if e.finisher.calls.Load() <= calls {
		t.Error("the check did not try to finish the run after recording failures")
	}
}

// A check whose run was never created (its leader died between scheduling the check and
// creating the run) is dropped: nothing to resume, and retrying would only dead-letter it.
func TestCheck_UnknownRunIsDropped(t *testing.T) {
	e := newRunEnv(t)
	in := e.instance("a", 1, 1, nil)
	ctx := context.Background()
	if err := in.c.Check(ctx, work.Envelope{Version: 1, Kind: work.KindCheck, Run: "nope", Epoch: 1, Round: 1}, firstDelivery); err != nil {
		t.Fatalf("got %v, want nil", err)
	}
	if _, err := e.store.ReadManifest(ctx, "nope"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("the check created a run: %v", err)
	}
}

// A leader that dies right after creating a run (before enqueueing anything) leaves a run that
// its check resumes, and the next tick for a later occurrence also repairs it before applying
// the overlap policy, so the schedule never wedges behind an orphaned run.
func TestTick_OrphanedRunIsRepairedByTheNextTick(t *testing.T) {
	e := newRunEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	crash := errors.New("injected crash after the run was created")
	var a *instance
	hook := &senderHook{Sender: e.sender}
	hook.before = func(sent int32, msgs []transport.Message) error {
		if sent == 2 { // 1: the check; 2: the first plan batch
			a.lock.crash.Store(true)
			return crash
		}
		return nil
	}
	a = e.instance("a", 7, 5, hook)
	if _, err := a.c.Tick(ctx, tick); !errors.Is(err, crash) {
		t.Fatalf("tick returned %v", err)
	}
	if m, _ := e.store.ReadManifest(ctx, tickRun); m.PlanDone || m.Checkpoint.Next != 0 {
		t.Fatalf("after the crash: %+v", m)
	}
	if idx, _, checks := partitions(e.drain()); len(idx) != 0 || checks != 0 {
		t.Fatalf("visible before expiry: %v partitions, %d checks (the check must be delayed)", idx, checks)
	}
	b := e.instance("b", 7, 5, nil)
	waitFor(t, 40*time.Second, "the crashed leader's lease to expire", func() bool {
		st, err := b.leader.State(ctx)
		return err == nil && !st.Held
	})
	next := TickInput{Now: at("2026-11-21T10:10:00.2Z")}
	out, err := b.c.Tick(ctx, next)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != StatusSkipped || out.ActiveRun != tickRun {
		t.Errorf("next tick: %+v, want skipped behind the repaired %s", out, tickRun)
	}
	m, err := e.store.ReadManifest(ctx, tickRun)
	if err != nil || !m.PlanDone || m.Partitions != 7 || m.State != ledger.StateRunning {
		t.Fatalf("orphaned run after the repair: %+v, %v", m, err)
	}
	idx, _, _ := partitions(e.drain())
	wantEach(t, idx, 7)
}

// firstDelivery is the delivery of a check message that still has retries left.
var firstDelivery = work.Delivery{MessageID: "check", Count: 1}
