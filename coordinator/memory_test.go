package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
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

// These tests run the coordinator entirely in memory — the ledger fake, the lease fakes and a
// recording sender (schedEnv) — and inject storage faults at the ledger seam, so each failure
// case is fast and deterministic. The same behaviours are proven against Azurite elsewhere.
// Each run is an occurrence of schedule "s" (every 10 s) that a heartbeat starts; its start
// check, delivered as the control queue would, plans it under the run's own lease.

// memOccurrence is the occurrence the tests start, and memRun its run.
const memOccurrence = "2026-11-21T10:00:10Z"

var memRun = occ("s", memOccurrence)

// faultNth injects kind into the nth call (1-based) of op, whatever it names, and passes every
// other call.
func faultNth(kind ledgertest.Fault, op string, nth int) func(string, string) ledgertest.Fault {
	var calls atomic.Int32
	return func(o, _ string) ledgertest.Fault {
		if o == op && int(calls.Add(1)) == nth {
			return kind
		}
		return ledgertest.Pass
	}
}

// startCursor starts schedule s's cursor just before memOccurrence, as its first heartbeat
// would, without a heartbeat (so no storage call of this process happens before the test's).
func (e *schedEnv) startCursor(schedule string) {
	e.t.Helper()
	if _, err := e.fake.UpdateSchedule(context.Background(), schedule, func(st *ledger.ScheduleState) error {
		st.Cursor = at("2026-11-21T10:00:01Z")
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
}

// A write whose response is lost and which the storage client retries (so the retry meets the
// coordinator's own write) never derails the run: the heartbeat's create answered "exists" is
// taken as the existing run and its start check still goes out; a lost takeover, checkpoint,
// plan batch or schedule state is recognised as its own. The run is planned once and every
// partition is sent exactly once.
func TestMemory_LostAndRetriedWritesAreRecognised(t *testing.T) {
	for _, tc := range []struct {
		op  string
		nth int
	}{
		{"CreateManifest", 1},
		{"UpdateManifest", 1}, // the planner's takeover (epoch and segment)
		{"UpdateManifest", 2}, // the first checkpoint
		{"UpdateManifest", 4}, // the last checkpoint: planning done
		{"PutPlanBatch", 1},
		{"PutPlanBatch", 2},   // a batch the slice stores without reading first
		{"UpdateSchedule", 1}, // the heartbeat's state: cursor and latest run
	} {
		t.Run(fmt.Sprintf("%s#%d", tc.op, tc.nth), func(t *testing.T) {
			const n = 10 // three plan batches of 4
			e := newSchedEnv(t, "2026-11-21T10:00:01Z")
			e.startCursor("s")
			store := &ledgertest.Faulty{Store: e.fake, Decide: faultNth(ledgertest.LoseAndRetry, tc.op, tc.nth)}
			e.store = store
			c := e.instance("a", countSchedule("s", n, config.OverlapSkip))
			out := e.heartbeat(c, memOccurrence)
			want := StatusStarted
			if tc.op == "CreateManifest" {
				want = StatusExisting // the retried create answered "exists": the run is taken as it is
			}
			if len(out.Decisions) != 1 || out.Decisions[0].Run != memRun || out.Decisions[0].Status != want {
				t.Fatalf("heartbeat decided %+v, want %s %s", out.Decisions, memRun, want)
			}
			if got := e.startChecks(memRun); len(got) != 1 {
				t.Fatalf("%d start checks, want 1", len(got))
			}
			e.deliverChecks(c)
			if store.Injected(ledgertest.LoseAndRetry) != 1 {
				t.Fatalf("no fault was injected into %s #%d: the test proves nothing", tc.op, tc.nth)
			}
			m := e.manifest(memRun)
			if !m.PlanDone || m.Partitions != n || m.State != ledger.StateRunning || m.Epoch != 1 || len(m.Segments) != 1 {
				t.Fatalf("manifest %+v, want planned by one planner", m)
			}
			if st := e.state("s"); st.Latest != memRun || !st.Cursor.Equal(at(memOccurrence)) {
				t.Errorf("schedule state %+v", st)
			}
			e.sender.wantOnce(t, n)
		})
	}
}

// A planning slice reads only its first plan batch before planning it (a leader before it may
// have stored it); each later one is new, planned and stored create-once without a read. A
// batch stored meanwhile by another leader is still found and sent as stored.
func TestEnqueue_ReadsOnlyTheSlicesFirstPlanBatch(t *testing.T) {
	const n = 10 // three plan batches of 4
	t.Run("one slice", func(t *testing.T) {
		e := newSchedEnv(t, memOccurrence)
		e.startCursor("s")
		var reads, puts atomic.Int32
		e.store = &ledgertest.Faulty{Store: e.fake, Decide: func(op, _ string) ledgertest.Fault {
			switch op {
			case "ReadPlanBatch":
				reads.Add(1)
			case "PutPlanBatch":
				puts.Add(1)
			}
			return ledgertest.Pass
		}}
		c := e.instance("a", countSchedule("s", n, config.OverlapSkip))
		e.heartbeat(c, memOccurrence)
		e.deliverChecks(c)
		if m := e.manifest(memRun); !m.PlanDone || m.Checkpoint.Batches != 3 {
			t.Fatalf("manifest %+v, want three batches planned", m.Checkpoint)
		}
		if reads.Load() != 1 || puts.Load() != 3 {
			t.Errorf("%d plan batch reads and %d stores, want 1 and 3", reads.Load(), puts.Load())
		}
		e.sender.wantOnce(t, n)
	})
	t.Run("stored meanwhile", func(t *testing.T) {
		e := newSchedEnv(t, memOccurrence)
		e.startCursor("s")
		ctx := testCtx(t)
		// Another leader stores batch 1 (partitions 4-7) with payloads of its own just before
		// this one does: those are the ones sent.
		e.store = &storingFirst{Store: e.fake, batch: 1, put: func(b ledger.PlanBatch) error {
			b.Partitions = slices.Clone(b.Partitions)
			for k := range b.Partitions {
				b.Partitions[k] = json.RawMessage(`{"other":true}`)
			}
			return e.fake.PutPlanBatch(ctx, memRun, b)
		}}
		c := e.instance("a", countSchedule("s", n, config.OverlapSkip))
		e.heartbeat(c, memOccurrence)
		e.deliverChecks(c)
		stored, err := e.fake.ReadPlanBatch(ctx, memRun, 1)
		if err != nil || string(stored.Partitions[0]) != `{"other":true}` {
			t.Fatalf("batch 1 stored as %+v, %v; want the other leader's", stored, err)
		}
		e.sender.wantOnce(t, n)
		if got := payloadSent(t, e.sender, 4); got != `{"other":true}` {
			t.Errorf("partition 4 sent with %s, want the stored batch's payload", got)
		}
	})
}

// The planner creates each done shard once, with the batch that first reaches it, before
// sending it: no worker's first append finds its shard missing.
func TestEnqueue_CreatesEachDoneShardAheadOnce(t *testing.T) {
	const n = 1000 // four done units of 256: shards 0-3
	e := newSchedEnv(t, memOccurrence)
	e.startCursor("s")
	store := &shardCreates{Store: e.fake, sent: e.sender}
	e.store = store
	c := e.instance("a", countSchedule("s", n, config.OverlapSkip))
	e.heartbeat(c, memOccurrence)
	e.deliverChecks(c)
	m := e.manifest(memRun)
	if !m.PlanDone || m.Partitions != n {
		t.Fatalf("manifest %+v, want %d partitions planned", m.Checkpoint, n)
	}
	if want := []int{0, 1, 2, 3}; !slices.Equal(slices.Sorted(slices.Values(store.created)), want) {
		t.Errorf("done shards created %v, want %v, each once", store.created, want)
	}
	for shard, before := range store.sentBefore {
		if first := shard * 256; before > first {
			t.Errorf("shard %d created after %d partitions were sent, its first (%d) among them", shard, before, first)
		}
	}
	e.sender.wantOnce(t, n)
}

// shardCreates records the done shards created in order, and how many partitions had been
// sent when each was.
type shardCreates struct {
	ledger.Store
	sent       *memSender
	mu         sync.Mutex
	created    []int
	sentBefore map[int]int
}

func (s *shardCreates) CreateDone(ctx context.Context, run string, shard int) error {
	s.sent.mu.Lock()
	sent := 0
	for _, m := range s.sent.msgs {
		if env, err := work.DecodeEnvelope(m.Body); err == nil && env.Kind == work.KindPartition {
			sent += max(env.Count, 1)
		}
	}
	s.sent.mu.Unlock()
	s.mu.Lock()
	s.created = append(s.created, shard)
	if s.sentBefore == nil {
		s.sentBefore = map[int]int{}
	}
	s.sentBefore[shard] = sent
	s.mu.Unlock()
	return s.Store.CreateDone(ctx, run, shard)
}

// payloadSent is the payload s sent partition i with.
func payloadSent(t *testing.T, s *memSender, i int) string {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.msgs {
		env, err := work.DecodeEnvelope(m.Body)
		if err != nil {
			t.Fatal(err)
		}
		for _, one := range env.Singles() {
			if env.Kind == work.KindPartition && one.Part == i {
				return string(one.Payload)
			}
		}
	}
	t.Fatalf("partition %d was not sent", i)
	return ""
}

// storingFirst is a store in which another leader stores plan batch `batch` (through put)
// just before this store's own PutPlanBatch of it.
type storingFirst struct {
	ledger.Store
	batch int
	put   func(ledger.PlanBatch) error
}

func (s *storingFirst) PutPlanBatch(ctx context.Context, run string, b ledger.PlanBatch) error {
	if b.Batch == s.batch {
		if err := s.put(b); err != nil {
			return err
		}
	}
	return s.Store.PutPlanBatch(ctx, run, b)
}

// A transient failure of any storage call before the run exists fails that heartbeat (or
// request) only, recording nothing: the next heartbeat decides the occurrence (still inside
// its catch-up window), or the repeated request creates the run, and it ends with its one run,
// planned.
func TestMemory_TransientFailureBeforeTheRunIsRetried(t *testing.T) {
	for _, tc := range []struct{ via, op string }{
		{"heartbeat", "EnsureContainer"},
		{"heartbeat", "ReadSchedule"},
		{"heartbeat", "ReadManifest"},
		{"heartbeat", "CreateManifest"},
		{"manual", "EnsureContainer"},
		{"manual", "CreateManifest"},
	} {
		t.Run(tc.via+"/"+tc.op, func(t *testing.T) {
			e := newSchedEnv(t, memOccurrence)
			e.startCursor("s")
			store := &ledgertest.Faulty{Store: e.fake, Decide: ledgertest.FaultOnce(ledgertest.Fail, tc.op, "")}
			e.store = store
			c := e.instance("a", countSchedule("s", 3, config.OverlapSkip))
			ctx := testCtx(t)
			run := memRun
			if tc.via == "heartbeat" {
				if _, err := c.Heartbeat(ctx); err == nil {
					t.Fatal("a heartbeat whose storage call failed reported success")
				}
				if _, err := e.fake.ReadManifest(ctx, run); !errors.Is(err, ledger.ErrNotFound) {
					t.Fatalf("the failed heartbeat left a record behind: %v", err)
				}
				out := e.heartbeat(c, "2026-11-21T10:00:15Z")
				if len(out.Decisions) != 1 || out.Decisions[0].Run != run || out.Decisions[0].Status != StatusStarted {
					t.Fatalf("the next heartbeat decided %+v, want %s started", out.Decisions, run)
				}
			} else {
				req := ManualRequest{Job: "count", Params: json.RawMessage(`{"n":3}`), IdempotencyKey: "retried"}
				if _, err := c.StartManual(ctx, req); err == nil {
					t.Fatal("a request whose storage call failed reported success")
				}
				out, err := c.StartManual(ctx, req)
				if err != nil || out.Status != StatusStarted {
					t.Fatalf("the repeated request: %+v, %v; want the run started", out, err)
				}
				run = out.Run
			}
			if store.Injected(ledgertest.Fail) != 1 {
				t.Fatalf("no fault was injected into %s", tc.op)
			}
			if got := e.startChecks(run); len(got) != 1 {
				t.Fatalf("%d start checks, want 1", len(got))
			}
			e.deliverChecks(c)
			if m := e.manifest(run); !m.PlanDone || m.Partitions != 3 {
				t.Fatalf("run %+v, want planned", m)
			}
			e.sender.wantOnce(t, 3)
		})
	}
}

// A batch whose send fails transiently (the queue throttled or blinked) is paced and sent
// again by the same planner: the start check succeeds, the run is planned by one planner, and
// every partition goes out once.
func TestMemory_TransientSendIsPacedAndRetried(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	// Send 1 is the heartbeat's start check; 2.. are the plan batches of 4 (sends 3 and 4 are
	// the second batch, failing twice).
	sender := &flakySender{memSender: e.sender, fail: map[int]bool{3: true, 4: true}}
	c := e.instanceWith("a", func(cfg *Config) { cfg.Sender = sender }, countSchedule("s", 10, config.OverlapSkip))
	e.startCursor("s")
	e.heartbeat(c, memOccurrence)
	if n := e.deliverChecks(c); n != 1 {
		t.Fatalf("delivered %d checks, want the start check", n)
	}
	if sender.failed() != 2 {
		t.Fatalf("%d sends failed, want 2: the test proves nothing", sender.failed())
	}
	if m := e.manifest(memRun); !m.PlanDone || m.State != ledger.StateRunning || m.Epoch != 1 || len(m.Segments) != 1 {
		t.Fatalf("run %+v, want planned by its first planner", m)
	}
	e.sender.wantOnce(t, 10)
}

// With a tiny time budget per invocation, planning spans several invocations: each slice
// checkpoints and sends a check that continues at once, the next slice takes the run's lease
// at a newer epoch and goes on from the checkpoint with a segment of its own, and every
// partition is sent exactly once. Each next slice says so in the log, at Info: it is no
// takeover of a run left mid-enqueue.
func TestMemory_PlanningInSlices(t *testing.T) {
	const n = 22 // six plan batches of 4
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	logs := &lineLog{}
	c := e.instanceWith("a", func(cfg *Config) {
		cfg.SliceBudget = time.Nanosecond
		cfg.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	}, countSchedule("s", n, config.OverlapSkip))
	e.startCursor("s")
	e.heartbeat(c, memOccurrence)
	slices := e.deliverChecks(c) // the start check, then each continuation as it is sent
	m := e.manifest(memRun)
	if !m.PlanDone || m.Partitions != n {
		t.Fatalf("planning stopped at %d of %d partitions with no check to continue it (%d slices)", m.Checkpoint.Next, n, slices)
	}
	if slices != 6 || len(m.Segments) != slices || m.Epoch != int64(slices) {
		t.Errorf("%d slices, %d segments, epoch %d; want one slice per batch (6), each a segment under a lease epoch of its own",
			slices, len(m.Segments), m.Epoch)
	}
	// The checks sent: the start check, a continuation due at once after each slice but the
	// last, and the chain's next check at the run's deadline.
	envs, msgs := e.sender.checksSent(t)
	continued := 0
	for i, env := range envs[1 : len(envs)-1] {
		if env.Round >= continueRound && !msgs[i+1].NotBefore.After(e.clock.Now()) {
			continued++
		}
	}
	if continued != slices-1 || len(envs) != slices+1 || !msgs[len(msgs)-1].NotBefore.Equal(m.Deadline) {
		t.Errorf("%d checks, %d of them continuations due at once; want the start check, %d continuations and the chain's check at the deadline",
			len(envs), continued, slices-1)
	}
	e.sender.wantOnce(t, n)
	if next, resumed := logs.count("INFO", "check: planning the run's next slice"), logs.count("", "check: resuming a run its leader left mid-enqueue"); next != slices-1 || resumed != 0 {
		t.Errorf("%d next-slice lines at Info and %d takeover lines; want %d and none", next, resumed, slices-1)
	}
}

// lineLog collects JSON log lines, safe for concurrent use.
type lineLog struct {
	mu    sync.Mutex
	lines []map[string]any
}

func (l *lineLog) Write(p []byte) (int, error) {
	var line map[string]any
	if err := json.Unmarshal(p, &line); err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
	return len(p), nil
}

// count is the number of lines with msg at level ("" for any level).
func (l *lineLog) count(level, msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if line["msg"] == msg && (level == "" || line["level"] == level) {
			n++
		}
	}
	return n
}

// With a bounded backlog and no waiting in the invocation the planner feeds the queue in
// waves: it stops when the partitions enqueued but not done leave no room for a plan batch
// under MaxBacklog, and the check it leaves a WavePause later sends the next wave once workers
// have caught up. Never more than the bound is outstanding.
func TestMemory_BacklogFedInWaves(t *testing.T) {
	const n, backlog, batch = 22, 8, 4
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	c := e.instanceWith("a", func(cfg *Config) { cfg.MaxBacklog, cfg.RefillWait = backlog, -1 }, countSchedule("s", n, config.OverlapSkip))
	e.startAlone(c)
	ctx := testCtx(t)
	done, waves := 0, 1
	for {
		m := e.manifest(memRun)
		if outstanding := m.Checkpoint.Next - done; outstanding > backlog {
			t.Fatalf("%d partitions outstanding, bound %d", outstanding, backlog)
		}
		if m.PlanDone {
			break
		}
		if m.Checkpoint.Next-done <= backlog-batch {
			t.Fatalf("the planner stopped at %d enqueued, %d done, with room for a batch under the bound", m.Checkpoint.Next, done)
		}
		// Workers finish what is outstanding; the wave check, due a WavePause later, sends more.
		for ; done < m.Checkpoint.Next; done++ {
			if _, err := e.fake.AppendDone(ctx, memRun, m.DoneLayout, m.Epoch, done); err != nil {
				t.Fatal(err)
			}
		}
		envs, msgs := e.sender.checksSent(t)
		wave, msg := envs[len(envs)-1], msgs[len(msgs)-1]
		if wave.Round < continueRound || !msg.NotBefore.Equal(e.clock.Now().Add(c.cfg.WavePause)) {
			t.Fatalf("the last check %+v (due %s) is not the next wave's, a WavePause ahead", wave, msg.NotBefore)
		}
		e.clock.set(msg.NotBefore)
		if err := c.Check(ctx, wave, firstDelivery); err != nil {
			t.Fatal(err)
		}
		waves++
	}
	if waves < 3 {
		t.Errorf("%d waves, want the run fed in several", waves)
	}
	e.sender.wantOnce(t, n)
	if m := e.manifest(memRun); len(m.Segments) > waves {
		t.Errorf("%d segments for %d waves", len(m.Segments), waves)
	}
}

// clockSender advances a test clock on every send of partitions, as a slow planning would
// take time.
type clockSender struct {
	*memSender
	clock *testClock
	step  time.Duration
}

func (s *clockSender) Send(ctx context.Context, msgs []transport.Message) error {
	if env, err := work.DecodeEnvelope(msgs[0].Body); err == nil && env.Kind == work.KindPartition {
		s.clock.set(s.clock.Now().Add(s.step))
	}
	return s.memSender.Send(ctx, msgs)
}

// A planning that keeps making progress is never overdue however long it takes in all (each
// checkpoint moves its hard deadline a run timeout on); one whose planner stops, with its check
// never delivered again, is taken over by the heartbeat once its record has not moved for a
// check delay, and only then, and planned to the end by a newer lease.
func TestMemory_PlanningOverdueOnlyWhenItStopsProgressing(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	slow := &clockSender{memSender: e.sender, clock: e.clock, step: 40 * time.Minute} // six batches: four hours in all
	c := e.instanceWith("a", func(cfg *Config) { cfg.Sender = slow }, countSchedule("s", 22, config.OverlapSkip))
	e.startCursor("s")
	e.heartbeat(c, memOccurrence)
	e.deliverChecks(c)
	m := e.manifest(memRun)
	if !m.PlanDone || m.State != ledger.StateRunning || m.Enqueued.Sub(m.Created) < 4*time.Hour {
		t.Fatalf("a slow but steady planning: %s planned %v after %s; want it planned over four hours, not timed out",
			m.State, m.PlanDone, m.Enqueued.Sub(m.Created))
	}

	// Schedule "t"'s run is planned one batch, then its planner stops (its sends fail for good
	// and nothing delivers its check again). Send 1 is the run's start check, 2 its first
	// batch, 3 its second.
	e2 := newSchedEnv(t, "2026-11-21T10:00:01Z")
	stopped := &flakySender{memSender: e2.sender, fail: map[int]bool{3: true}, err: errors.New("injected: the planner's process died")}
	tsched := Schedule{Name: "t", Job: "count", Params: json.RawMessage(`{"n":9}`), Cron: every(time.Hour), CatchUp: time.Minute}
	c2 := e2.instanceWith("a", func(cfg *Config) { cfg.Sender = stopped }, tsched)
	e2.heartbeat(c2, "2026-11-21T10:00:01Z")
	e2.heartbeat(c2, "2026-11-21T11:00:05Z")
	stuck := occ("t", "2026-11-21T11:00:00Z")
	start := e2.startChecks(stuck)
	if len(start) != 1 {
		t.Fatalf("%d start checks for %s", len(start), stuck)
	}
	env, err := work.DecodeEnvelope(start[0].Body)
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.Check(testCtx(t), env, firstDelivery); err == nil {
		t.Fatal("the planner whose sends failed reported success")
	}
	e2.skipSent() // its check is never delivered again
	m = e2.manifest(stuck)
	if m.PlanDone || m.Checkpoint.Next != 4 || !m.Expires.Equal(at("2026-11-21T12:00:05Z")) {
		t.Fatalf("the stopped planning: %+v; want one batch checkpointed, overdue a run timeout after it", m)
	}
	bound := m.Updated.Add(15*time.Second + checkMargin)
	// Until its bound the heartbeat leaves it be (and skips the schedule's occurrences).
	if out := e2.heartbeat(c2, bound.Add(-time.Second).Format(time.RFC3339Nano)); out.Supervised != 0 {
		t.Fatalf("the heartbeat drove %d runs before the stopped planning's bound", out.Supervised)
	}
	if m := e2.manifest(stuck); m.Epoch != 1 {
		t.Fatalf("taken over before its bound: epoch %d", m.Epoch)
	}
	if out := e2.heartbeat(c2, bound.Format(time.RFC3339Nano)); out.Supervised != 1 {
		t.Fatalf("the heartbeat at the bound drove %d runs, want the stopped planning", out.Supervised)
	}
	m = e2.manifest(stuck)
	if !m.PlanDone || m.Partitions != 9 || m.Epoch <= 1 {
		t.Fatalf("stopped planning after the heartbeat: planned %v, %d partitions, epoch %d; want planned to the end under a newer lease",
			m.PlanDone, m.Partitions, m.Epoch)
	}
}

// A lease probe or a handover check for a run the ledger does not hold is dropped (there is
// nothing to resume), and says so in the log.
func TestMemory_ProbeForUnknownRunIsLogged(t *testing.T) {
	for _, handover := range []bool{false, true} {
		t.Run(fmt.Sprintf("handover=%v", handover), func(t *testing.T) {
			var logs bytes.Buffer
			e := newSchedEnv(t, "2026-11-21T10:00:01Z")
			c := e.instanceWith("a", func(cfg *Config) { cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
			env := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindCheck, Run: "manual-gone", Epoch: 3, Round: probeRound, Handover: handover}
			if err := c.Check(testCtx(t), env, work.Delivery{Count: 1}); err != nil {
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

// Run now waits for the scheduler lease while a heartbeat (here: another holder) has it, and
// starts its run as soon as the lease frees up.
func TestRunNow_WaitsForASchedulerLeaseThatFreesUp(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	var held atomic.Int32
	id := ledger.Holder{App: "sched", Instance: "a", PID: 1}
	ld, err := election.NewLeader(election.LeaderConfig{Lock: &lockWrapper{Lock: e.lock, held: &held}, Locks: e.locks.Lock,
		Identity: id, LeaseDuration: 15 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	c := e.instanceWith("a", func(cfg *Config) { cfg.Leader = ld }, countSchedule("s", 1, config.OverlapSkip))
	ctx := testCtx(t)
	theirs, err := e.lock.Acquire(ctx, ledger.Holder{App: "other", Instance: "x", PID: 2})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		out Outcome
		err error
	}
	done := make(chan result, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		out, err := c.RunNow(ctx, "s", "k")
		done <- result{out, err}
	}()
	waitFor(t, 30*time.Second, "run now to find the scheduler lease held", func() bool { return held.Load() > 0 })
	select {
	case r := <-done:
		t.Fatalf("run now returned %+v, %v while the lease was held", r.out, r.err)
	default:
	}
	if err := e.lock.Release(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	r := <-done
	if r.err != nil || r.out.Status != StatusStarted {
		t.Fatalf("run now once the lease was free: %+v, %v", r.out, r.err)
	}
	if st := e.state("s"); st.Latest != r.out.Run {
		t.Errorf("schedule's latest run %q, want %s", st.Latest, r.out.Run)
	}
}

// A run written before runs had their own lease (an empty Manifest.Lease) left mid-enqueue is
// fenced by the lease of that time, the scheduler's: its check finds that lease held while a
// heartbeat has it and only looks again later, and once it is free resumes the run under it,
// from the checkpoint at a newer epoch. The run lease of its name is never taken.
func TestMemory_LegacyRunIsFencedByTheSchedulerLease(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	c := e.instance("a", countSchedule("s", 1, config.OverlapSkip))
	ctx := testCtx(t)
	e.heartbeat(c, "2026-11-21T10:00:01Z") // the scheduler lease's epoch 1
	const legacy = "tick-20261121t100000z"
	m := ledger.Manifest{Version: 1, RunID: legacy, Trigger: ledger.TriggerTimer, Occurrence: at("2026-11-21T10:00:00Z"),
		Epoch: 1, Segments: []ledger.Segment{{Epoch: 1}}, Job: "count", Params: json.RawMessage(`{"n":9}`), State: ledger.StateEnqueuing,
		Checkpoint: ledger.Checkpoint{Batches: 1, Next: 4, Cursor: "4"}, BatchSize: 4, Created: at("2026-11-21T10:00:00Z"),
		Expires: at("2026-11-21T11:00:00Z")}
	if err := e.fake.CreateManifest(ctx, &m); err != nil {
		t.Fatal(err)
	}
	check := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindCheck, Run: legacy, Epoch: 1, Round: 2}
	theirs, err := e.lock.Acquire(ctx, ledger.Holder{App: "sched", Instance: "b", PID: 2}) // epoch 2: a heartbeat elsewhere
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Check(ctx, check, firstDelivery); err != nil {
		t.Fatal(err)
	}
	if m := e.manifest(legacy); m.Epoch != 1 || m.Checkpoint.Next != 4 {
		t.Fatalf("the legacy run was resumed while the scheduler lease was held: %+v", m)
	}
	if envs, _ := e.sender.checksSent(t); len(envs) != 1 || envs[0].Round != 3 {
		t.Fatalf("checks sent %+v, want the next one (round 3)", envs)
	}
	if err := e.lock.Release(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	if err := c.Check(ctx, check, firstDelivery); err != nil {
		t.Fatal(err)
	}
	m = e.manifest(legacy)
	if !m.PlanDone || m.Partitions != 9 || m.Epoch != 3 || fmt.Sprint(m.Segments) != fmt.Sprint([]ledger.Segment{{Epoch: 1}, {Epoch: 3, From: 4}}) {
		t.Fatalf("legacy run after the scheduler lease freed up: %+v; want it resumed under the scheduler lease's epoch 3 from 4", m)
	}
	if idx, _ := e.sender.partitions(t); fmt.Sprint(idx) != "[4 5 6 7 8]" {
		t.Errorf("partitions sent %v, want 4..8 (from the checkpoint)", idx)
	}
	if st, err := e.locks.Get(ledger.RunLeaseName(legacy)).State(ctx); err != nil || st.Epoch != 0 {
		t.Errorf("the run lease of the legacy run was taken: %+v, %v", st, err)
	}
}
