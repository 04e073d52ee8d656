package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonfn/baton/election"
	"github.com/batonfn/baton/ledger"
	"github.com/batonfn/baton/ledger/ledgertest"
	"github.com/batonfn/baton/transport"
	"github.com/batonfn/baton/work"
)

// These tests run the coordinator entirely in memory — the ledger fake, the lease fake and a
// recording sender — and inject storage faults at the ledger seam, so each failure case is
// fast and deterministic. The same behaviours are proven against Azurite elsewhere.

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
			seen[env.Part]++
		}
	}
	idx := make([]int, 0, len(seen))
	for i := range seen {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	return idx, seen
}

// memInstance is a coordinator over a fake ledger (wrapped in faults) and a fake lease.
func memInstance(t *testing.T, store ledger.Store, lock election.Lock, sender Sender, n int) *Coordinator {
	t.Helper()
	id := ledger.Holder{App: "mem", Instance: "a", PID: 1}
	ld, err := election.NewLeader(election.LeaderConfig{Lock: lock, Identity: id, LeaseDuration: 15 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	jobs := work.NewRegistry()
	jobs.Register("count", &countJob{})
	c, err := New(Config{Leader: ld, Store: store, Sender: sender, Jobs: jobs, Finisher: &countingFinisher{}, Identity: id,
		Job: "count", Params: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)), Schedule: mustSchedule(t, "0 */5 * * * *"),
		BatchSize: 4, RunTimeout: time.Hour, CheckRounds: 2, TickWait: time.Second, Logger: slog.New(slog.DiscardHandler),
		Now: func() time.Time { return at("2026-11-21T10:05:01Z") }})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A write whose response is lost and which the storage client retries (so the retry meets
// the leader's own write) never derails the run: whichever record it hits, the tick plans the
// run and every partition is sent exactly once.
func TestMemory_LostAndRetriedWritesAreRecognised(t *testing.T) {
	for _, op := range []string{"CreateManifest", "UpdateManifest", "PutPlanBatch", "SetActive", "AdvanceCursor"} {
		t.Run(op, func(t *testing.T) {
			const n = 10
			store := &ledgertest.Faulty{Store: ledgertest.NewFake(ledgertest.Options{}), Decide: ledgertest.FaultOnce(ledgertest.LoseAndRetry, op, "")}
			sender := &memSender{}
			c := memInstance(t, store, election.NewMemoryLock(15*time.Second), sender, n)
			out, err := c.Tick(context.Background(), tick)
			if err != nil || out.Status != StatusStarted {
				t.Fatalf("tick: %+v, %v", out, err)
			}
			if store.Injected(ledgertest.LoseAndRetry) != 1 {
				t.Fatalf("no fault was injected into %s: the test proves nothing", op)
			}
			m, err := store.ReadManifest(context.Background(), tickRun)
			if err != nil || !m.PlanDone || m.Partitions != n || m.State != ledger.StateRunning {
				t.Fatalf("manifest %+v, %v", m, err)
			}
			idx, seen := sender.partitions(t)
			if len(idx) != n {
				t.Fatalf("sent partitions %v, want 0..%d", idx, n-1)
			}
			for i, k := range seen {
				if k != 1 {
					t.Errorf("partition %d sent %d times", i, k)
				}
			}
		})
	}
}

// A transient failure of any one write before the run exists fails that attempt only: the
// waiting tick retries, and the occurrence still ends with its run.
func TestMemory_TransientFailureBeforeTheRunIsRetried(t *testing.T) {
	for _, op := range []string{"EnsureContainer", "ReadActive", "CreateManifest"} {
		t.Run(op, func(t *testing.T) {
			store := &ledgertest.Faulty{Store: ledgertest.NewFake(ledgertest.Options{}), Decide: ledgertest.FaultOnce(ledgertest.Fail, op, "")}
			sender := &memSender{}
			c := memInstance(t, store, election.NewMemoryLock(15*time.Second), sender, 3)
			c.cfg.TickWait = 10 * time.Second
			out, err := c.Tick(context.Background(), tick)
			if err != nil || out.Status != StatusStarted {
				t.Fatalf("tick: %+v, %v", out, err)
			}
			if store.Injected(ledgertest.Fail) != 1 {
				t.Fatalf("no fault was injected into %s", op)
			}
			if idx, _ := sender.partitions(t); len(idx) != 3 {
				t.Fatalf("sent %v", idx)
			}
		})
	}
}

// flakySender fails the sends numbered in fail (1-based) with a transient error.
type flakySender struct {
	memSender
	n    int
	fail map[int]bool
}

func (s *flakySender) Send(ctx context.Context, msgs []transport.Message) error {
	s.mu.Lock()
	s.n++
	n := s.n
	s.mu.Unlock()
	if s.fail[n] {
		return fmt.Errorf("injected: 503 ServerBusy: %w", transport.ErrTransient)
	}
	return s.memSender.Send(ctx, msgs)
}

// A batch whose send fails transiently (the queue throttled or blinked) is paced and sent
// again by the same leader: the tick succeeds and every partition goes out once.
func TestMemory_TransientSendIsPacedAndRetried(t *testing.T) {
	// Send 1 is the run's first check; 2.. are plan batches of 4.
	sender := &flakySender{fail: map[int]bool{3: true, 4: true}}
	c := memInstance(t, ledgertest.NewFake(ledgertest.Options{}), election.NewMemoryLock(15*time.Second), sender, 10)
	out, err := c.Tick(context.Background(), tick)
	if err != nil || out.Status != StatusStarted || out.State != ledger.StateRunning {
		t.Fatalf("tick: %+v, %v", out, err)
	}
	idx, seen := sender.partitions(t)
	if len(idx) != 10 {
		t.Fatalf("sent %v", idx)
	}
	for i, k := range seen {
		if k != 1 {
			t.Errorf("partition %d sent %d times", i, k)
		}
	}
}

// checksSent returns the check envelopes the sender has sent, oldest first.
func (s *memSender) checksSent(t *testing.T) []work.Envelope {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []work.Envelope
	for _, m := range s.msgs {
		env, err := work.DecodeEnvelope(m.Body)
		if err != nil {
			t.Fatal(err)
		}
		if env.Kind == work.KindCheck {
			out = append(out, env)
		}
	}
	return out
}

// With a tiny time budget per invocation, planning spans several invocations: each slice
// checkpoints and sends a check that continues at once, the next slice takes the lease at a
// newer epoch and goes on from the checkpoint, and every partition is sent exactly once.
func TestMemory_PlanningInSlices(t *testing.T) {
	const n = 22
	sender := &memSender{}
	store := ledgertest.NewFake(ledgertest.Options{})
	c := memInstance(t, store, election.NewMemoryLock(15*time.Second), sender, n)
	c.cfg.SliceBudget = time.Nanosecond // one batch (4 partitions) per slice
	ctx := context.Background()
	out, err := c.Tick(ctx, tick)
	if err != nil || out.Status != StatusStarted {
		t.Fatalf("tick: %+v, %v", out, err)
	}
	slices := 1
	for handled := 0; ; {
		m, err := store.ReadManifest(ctx, tickRun)
		if err != nil {
			t.Fatal(err)
		}
		if m.PlanDone {
			if m.Partitions != n || len(m.Segments) != slices {
				t.Fatalf("planned %d partitions in %d segments, want %d in %d (one per slice)", m.Partitions, len(m.Segments), n, slices)
			}
			break
		}
		checks := sender.checksSent(t)
		if handled >= len(checks) {
			t.Fatalf("planning stopped at %d of %d partitions with no check to continue it", m.Checkpoint.Next, n)
		}
		env := checks[len(checks)-1]
		handled = len(checks)
		if env.Round < continueRound {
			t.Fatalf("the last check (round %d) is not a continuation", env.Round)
		}
		if err := c.Check(ctx, env, firstDelivery); err != nil {
			t.Fatalf("continuation check: %v", err)
		}
		slices++
	}
	if slices < 5 {
		t.Errorf("%d slices, want one per batch of 4 (at least 5)", slices)
	}
	idx, seen := sender.partitions(t)
	if len(idx) != n {
		t.Fatalf("sent %v", idx)
	}
	for i, k := range seen {
		if k != 1 {
			t.Errorf("partition %d sent %d times", i, k)
		}
	}
}

// With a bounded backlog the leader feeds the queue in waves: it stops when the partitions
// enqueued but not done reach MaxBacklog, and a later check sends the next wave once workers
// have caught up. Never more than the bound plus one batch is outstanding.
func TestMemory_BacklogFedInWaves(t *testing.T) {
	const n, backlog = 22, 8
	sender := &memSender{}
	store := ledgertest.NewFake(ledgertest.Options{})
	c := memInstance(t, store, election.NewMemoryLock(15*time.Second), sender, n)
	c.cfg.MaxBacklog = backlog
	ctx := context.Background()
	if _, err := c.Tick(ctx, tick); err != nil {
		t.Fatal(err)
	}
	done := 0
	waves := 1
	for {
		m, err := store.ReadManifest(ctx, tickRun)
		if err != nil {
			t.Fatal(err)
		}
		if outstanding := m.Checkpoint.Next - done; outstanding > backlog+4 {
			t.Fatalf("%d partitions outstanding, bound %d plus a batch", outstanding, backlog)
		}
		if m.PlanDone {
			break
		}
		if m.Checkpoint.Next-done < backlog {
			t.Fatalf("the leader stopped at %d enqueued, %d done, below the backlog bound", m.Checkpoint.Next, done)
		}
		// Workers finish what is outstanding; the wave check then sends more.
		for ; done < m.Checkpoint.Next; done++ {
			if _, err := store.AppendDone(ctx, tickRun, done, 1); err != nil {
				t.Fatal(err)
			}
		}
		checks := sender.checksSent(t)
		if err := c.Check(ctx, checks[len(checks)-1], firstDelivery); err != nil {
			t.Fatal(err)
		}
		waves++
	}
	if waves < 3 {
		t.Errorf("%d waves, want the run fed in several", waves)
	}
	if idx, _ := sender.partitions(t); len(idx) != n {
		t.Fatalf("sent %v", idx)
	}
	if m, _ := store.ReadManifest(ctx, tickRun); len(m.Segments) > waves {
		t.Errorf("%d segments for %d waves", len(m.Segments), waves)
	}
}

// clockSender advances a test clock on every send, as a slow planning would take time.
type clockSender struct {
	memSender
	clock *testClock
	step  time.Duration
}

func (s *clockSender) Send(ctx context.Context, msgs []transport.Message) error {
	s.clock.set(s.clock.Now().Add(s.step))
	return s.memSender.Send(ctx, msgs)
}

// A planning that keeps making progress is never overdue however long it takes in all (each
// checkpoint moves its hard deadline on); only one that stops for a whole run timeout is.
func TestMemory_PlanningOverdueOnlyWhenItStopsProgressing(t *testing.T) {
	clock := newClock("2026-11-21T10:05:01Z")
	sender := &clockSender{clock: clock, step: 40 * time.Minute} // six batches: four hours in all
	store := ledgertest.NewFake(ledgertest.Options{})
	c := memInstance(t, store, election.NewMemoryLock(15*time.Second), sender, 22)
	c.cfg.Now = clock.Now
	out, err := c.Tick(context.Background(), tick)
	if err != nil || out.State != ledger.StateRunning {
		t.Fatalf("a slow but steady planning: %+v, %v (want it planned, not timed out)", out, err)
	}

	// A run whose planning stopped (its leader is gone and nothing resumes it) is overdue a run
	// timeout after its last checkpoint, and the next lease holder finishes it.
	stuck := ledger.Manifest{RunID: "manual-stuck", Trigger: ledger.TriggerManual, Epoch: 1, Job: "count",
		Params: json.RawMessage(`{"n":9}`), State: ledger.StateEnqueuing, BatchSize: 4,
		Checkpoint: ledger.Checkpoint{Batches: 1, Next: 4}, Created: clock.Now(), Expires: clock.Now().Add(time.Hour)}
	if err := store.CreateManifest(context.Background(), &stuck); err != nil {
		t.Fatal(err)
	}
	if err := store.SetActive(context.Background(), ledger.Active{Run: stuck.RunID, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	c.cfg.AllowOverlap = true
	clock.set(clock.Now().Add(2 * time.Hour))
	if _, err := c.StartManual(context.Background(), ManualRequest{IdempotencyKey: "next"}); err != nil {
		t.Fatal(err)
	}
	m, err := store.ReadManifest(context.Background(), stuck.RunID)
	if err != nil || m.State != ledger.StateTimedOut || m.Reason == "" {
		t.Fatalf("stuck planning: %+v, %v; want timed-out with a reason", m, err)
	}
}

// A lease probe or a handover check for a run the ledger does not hold is dropped (there is
// nothing to resume), and says so in the log.
func TestMemory_ProbeForUnknownRunIsLogged(t *testing.T) {
	for _, handover := range []bool{false, true} {
		t.Run(fmt.Sprintf("handover=%v", handover), func(t *testing.T) {
			var logs bytes.Buffer
			c := memInstance(t, ledgertest.NewFake(ledgertest.Options{}), election.NewMemoryLock(15*time.Second), &memSender{}, 1)
			c.cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
			env := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindCheck, Run: "manual-gone", Epoch: 3, Round: probeRound, Handover: handover}
			if err := c.Check(context.Background(), env, work.Delivery{Count: 1}); err != nil {
				t.Fatalf("Check: %v, want nil (nothing to retry)", err)
			}
			var line struct {
				Level, Msg, Run string
				Handover        bool
			}
			if err := json.Unmarshal(logs.Bytes(), &line); err != nil {
				t.Fatalf("want one JSON log line, got %q: %v", logs.String(), err)
			}
			if line.Level != "WARN" || line.Run != env.Run || line.Handover != handover || !strings.Contains(line.Msg, "no such run") {
				t.Errorf("log line %+v, want a warning naming run %s", line, env.Run)
			}
		})
	}
}
