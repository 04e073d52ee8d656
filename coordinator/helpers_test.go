package coordinator

import (
	"context"
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

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/ledgertest"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/work"
)

// testBlobLockDuration is the shortest lease storage allows, to keep expiry tests short.
const testBlobLockDuration = 15 * time.Second

// waitFor polls cond every 50ms until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// every is a Cron firing every period from the Unix epoch (UTC): enough for the coordinator's
// tests, which never depend on calendar rules (internal/ncrontab has those).
type every time.Duration

func (p every) Next(t time.Time) (time.Time, bool) {
	d := time.Duration(p)
	return t.Truncate(d).Add(d).UTC(), true
}

func (p every) Prev(t time.Time) (time.Time, bool) { return t.Truncate(time.Duration(p)).UTC(), true }

func (p every) String() string { return "every " + time.Duration(p).String() }

// at parses an RFC 3339 time.
func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

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

func (f *countingFinisher) FinishStopped(ctx context.Context, run string) (bool, error) {
	f.calls.Add(1)
	return false, nil
}

func (f *countingFinisher) FinishRound(ctx context.Context, run string) (bool, error) {
	f.calls.Add(1)
	return false, nil
}

// testClock is a settable clock shared by a test's instances.
type testClock struct{ ns atomic.Int64 }

func newClock(s string) *testClock { c := &testClock{}; c.set(at(s)); return c }

func (c *testClock) Now() time.Time { return time.Unix(0, c.ns.Load()).UTC() }

func (c *testClock) set(t time.Time) { c.ns.Store(t.UnixNano()) }

// blockingJob plans one partition, but only once release is closed; entered is closed when a
// plan starts. It holds the lease as a long planning would.
type blockingJob struct {
	entered, release chan struct{}
	once             sync.Once
}

func newBlockingJob() *blockingJob {
	return &blockingJob{entered: make(chan struct{}), release: make(chan struct{})}
}

func (j *blockingJob) Plan(ctx context.Context, params json.RawMessage, cursor string, emit func(json.RawMessage, string) error) error {
	j.once.Do(func() { close(j.entered) })
	select {
	case <-j.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return emit(json.RawMessage(`{}`), "1")
}

func (j *blockingJob) Process(ctx context.Context, p work.Partition) (json.RawMessage, error) {
	return p.Payload, nil
}

func (j *blockingJob) Aggregate(ctx context.Context, run work.RunInfo, results iter.Seq2[ledger.Result, error]) (json.RawMessage, error) {
	return json.RawMessage(`{}`), nil
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// memSender records every message sent.
type memSender struct {
	mu   sync.Mutex
	msgs []transport.Message
}

func (s *memSender) Send(ctx context.Context, msgs []transport.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs = append(s.msgs, msgs...)
	return nil
}

// messages returns a copy of every message sent so far.
func (s *memSender) messages() []transport.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]transport.Message(nil), s.msgs...)
}

// partitions returns the partition indexes sent, sorted, and how often each was sent.
func (s *memSender) partitions(t *testing.T) ([]int, map[int]int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[int]int{}
	for _, m := range s.msgs {
		env, err := work.DecodeEnvelope(m.Body)
		if err != nil {
			t.Fatal(err)
		}
		if env.Kind == work.KindPartition {
			for _, one := range env.Singles() {
				seen[one.Part]++
			}
		}
	}
	idx := make([]int, 0, len(seen))
	for i := range seen {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	return idx, seen
}

// schedEnv is one test's scheduler world, shared by its instances.
type schedEnv struct {
	t      *testing.T
	clock  *testClock
	fake   *ledgertest.Fake
	store  ledger.Store // fake, or a Faulty around it
	lock   *election.MemoryLock
	locks  *election.MemoryLocks
	sender *memSender
	jobs   *work.Registry
	fin    *countingFinisher

	mu        sync.Mutex
	delivered int // checks delivered so far (memSender order)
}

func newSchedEnv(t *testing.T, start string) *schedEnv {
	e := &schedEnv{t: t, clock: newClock(start), lock: election.NewMemoryLock(15 * time.Second),
		locks: election.NewMemoryLocks(15 * time.Second), sender: &memSender{}, jobs: work.NewRegistry(), fin: &countingFinisher{}}
	e.fake = ledgertest.NewFake(ledgertest.Options{Now: e.clock.Now})
	e.store = e.fake
	e.jobs.Register("count", &countJob{})
	return e
}

// instance is a coordinator of the env named name over schedules.
func (e *schedEnv) instance(name string, schedules ...Schedule) *Coordinator {
	e.t.Helper()
	return e.instanceWith(name, nil, schedules...)
}

// instanceWith is instance with its Config changed by mod (when not nil) before New: a
// sender that fails or takes time, a slice budget, a backlog bound, a logger... A sender
// set there must record into e.sender, which deliverChecks reads.
func (e *schedEnv) instanceWith(name string, mod func(*Config), schedules ...Schedule) *Coordinator {
	e.t.Helper()
	id := ledger.Holder{App: "sched", Instance: name, PID: 1}
	ld, err := election.NewLeader(election.LeaderConfig{Lock: e.lock, Locks: e.locks.Lock, Identity: id,
		LeaseDuration: 15 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		e.t.Fatal(err)
	}
	cfg := Config{Leader: ld, Store: e.store, Sender: e.sender, Jobs: e.jobs, Finisher: e.fin, Identity: id,
		Schedules: schedules, HeartbeatPeriod: 10 * time.Second, BatchSize: 4, RunTimeout: time.Hour, CheckRounds: 2,
		FinishGrace: time.Millisecond, Now: e.clock.Now, Logger: slog.New(slog.DiscardHandler)}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// countSchedule is a schedule of the count job every 10 s planning n partitions.
func countSchedule(name string, n int, overlap config.Overlap) Schedule {
	return Schedule{Name: name, Job: "count", Params: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)), Cron: every(10 * time.Second),
		Overlap: overlap, CatchUp: time.Minute}
}

// heartbeat advances the clock to at and beats once on c.
func (e *schedEnv) heartbeat(c *Coordinator, at string) HeartbeatOutcome {
	e.t.Helper()
	e.clock.set(at2(at))
	out, err := c.Heartbeat(testCtx(e.t))
	if err != nil {
		e.t.Fatalf("heartbeat at %s: %v", at, err)
	}
	return out
}

// deliverChecks delivers, through c, every check sent since the last call whose time has come
// on the test clock, oldest first, as the control queue would; it returns how many it
// delivered. Checks sent while delivering are delivered too when due.
func (e *schedEnv) deliverChecks(c *Coordinator) int {
	e.t.Helper()
	n := 0
	for {
		e.sender.mu.Lock()
		msgs := append([]transport.Message(nil), e.sender.msgs...)
		e.sender.mu.Unlock()
		e.mu.Lock()
		from := e.delivered
		e.delivered = len(msgs)
		e.mu.Unlock()
		if from == len(msgs) {
			return n
		}
		for _, m := range msgs[from:] {
			env, err := work.DecodeEnvelope(m.Body)
			if err != nil {
				e.t.Fatal(err)
			}
			if env.Kind != work.KindCheck || m.NotBefore.After(e.clock.Now()) {
				continue
			}
			if err := c.Check(testCtx(e.t), env, work.Delivery{MessageID: m.ID, Count: 1}); err != nil {
				e.t.Fatalf("check %s: %v", m.ID, err)
			}
			n++
		}
	}
}

func (e *schedEnv) manifest(run string) ledger.Manifest {
	e.t.Helper()
	m, err := e.fake.ReadManifest(context.Background(), run)
	if err != nil {
		e.t.Fatalf("run %s: %v", run, err)
	}
	return m
}

func (e *schedEnv) state(schedule string) ledger.ScheduleState {
	e.t.Helper()
	st, err := e.fake.ReadSchedule(context.Background(), schedule)
	if err != nil {
		e.t.Fatalf("schedule %s: %v", schedule, err)
	}
	return st
}

// finish settles run as succeeded, as its last worker would.
func (e *schedEnv) finish(run string) {
	e.t.Helper()
	if _, err := e.fake.UpdateManifest(context.Background(), run, ledger.NoFence, func(m *ledger.Manifest) error {
		m.State, m.Finished = ledger.StateSucceeded, e.clock.Now()
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
}

// startChecks returns the start checks (round 1, epoch 0) sent for run.
func (e *schedEnv) startChecks(run string) []transport.Message {
	e.t.Helper()
	var out []transport.Message
	for _, m := range e.sentChecks(run) {
		if env, _ := work.DecodeEnvelope(m.Body); env.Epoch == 0 && env.Round == 1 {
			out = append(out, m)
		}
	}
	return out
}

// sentChecks returns the checks sent for run so far.
func (e *schedEnv) sentChecks(run string) []transport.Message {
	e.t.Helper()
	e.sender.mu.Lock()
	defer e.sender.mu.Unlock()
	var out []transport.Message
	for _, m := range e.sender.msgs {
		if env, err := work.DecodeEnvelope(m.Body); err == nil && env.Kind == work.KindCheck && env.Run == run {
			out = append(out, m)
		}
	}
	return out
}

// at2 parses an RFC 3339 time (at, with a name that does not clash in this file's tests).
func at2(s string) time.Time { return at(s) }

func occ(schedule, at string) string { return ledger.ScheduleRunID(schedule, at2(at)) }

// skipSent marks every message sent so far as handled: deliverChecks never delivers them (a
// chain that is lost, or checks the test delivered itself).
func (e *schedEnv) skipSent() {
	e.sender.mu.Lock()
	n := len(e.sender.msgs)
	e.sender.mu.Unlock()
	e.mu.Lock()
	e.delivered = n
	e.mu.Unlock()
}

// lockWrapper lets a test crash a leader and see contention: with *crash set, Release does
// nothing, as when the process dies holding the lease (which then lapses); held counts the
// Acquire calls that found the lease held.
type lockWrapper struct {
	election.Lock
	crash *atomic.Bool
	held  *atomic.Int32
}

func (w *lockWrapper) Acquire(ctx context.Context, id ledger.Holder) (election.Lease, error) {
	l, err := w.Lock.Acquire(ctx, id)
	if errors.As(err, new(*election.HeldError)) && w.held != nil {
		w.held.Add(1)
	}
	return l, err
}

func (w *lockWrapper) Release(ctx context.Context, l election.Lease) error {
	if w.crash != nil && w.crash.Load() {
		return nil
	}
	return w.Lock.Release(ctx, l)
}

// flakySender records its sends into a memSender, except the sends numbered in fail (1-based,
// counting every send, checks included), which fail with err (a transient error when nil).
type flakySender struct {
	*memSender
	mu   sync.Mutex
	n    int
	fail map[int]bool
	err  error
}

func (s *flakySender) Send(ctx context.Context, msgs []transport.Message) error {
	s.mu.Lock()
	s.n++
	fail := s.fail[s.n]
	s.mu.Unlock()
	if fail {
		if s.err != nil {
			return s.err
		}
		return fmt.Errorf("injected: 503 ServerBusy: %w", transport.ErrTransient)
	}
	return s.memSender.Send(ctx, msgs)
}

// failed reports how many sends failed so far.
func (s *flakySender) failed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for i := 1; i <= s.n; i++ {
		if s.fail[i] {
			n++
		}
	}
	return n
}

// checksSent returns the check envelopes sent, oldest first, with their messages.
func (s *memSender) checksSent(t *testing.T) ([]work.Envelope, []transport.Message) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var envs []work.Envelope
	var msgs []transport.Message
	for _, m := range s.msgs {
		env, err := work.DecodeEnvelope(m.Body)
		if err != nil {
			t.Fatal(err)
		}
		if env.Kind == work.KindCheck {
			envs, msgs = append(envs, env), append(msgs, m)
		}
	}
	return envs, msgs
}

// wantOnce fails the test unless s sent each of the partitions 0..n-1 exactly once.
func (s *memSender) wantOnce(t *testing.T, n int) {
	t.Helper()
	idx, seen := s.partitions(t)
	if len(idx) != n {
		t.Fatalf("sent partitions %v, want 0..%d", idx, n-1)
	}
	for i, k := range seen {
		if k != 1 || i < 0 || i >= n {
			t.Errorf("partition %d sent %d times, want once", i, k)
		}
	}
}

// firstDelivery is the delivery of a check message that still has retries left.
var firstDelivery = work.Delivery{MessageID: "check", Count: 1}
