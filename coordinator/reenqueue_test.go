package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/ledgertest"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/work"
)

// reenqueueSetup has a heartbeat start a run of n partitions (plan batches of 4) on an
// in-memory instance and its start check plan it, records a result for every partition but
// missing, and moves the clock past the run's deadline, so that the chain's next check
// re-enqueues exactly the missing ones. It returns the env, the instance, its store (faults
// off), its sender with the planning's messages cleared, and that check.
func reenqueueSetup(t *testing.T, n int, missing []int) (*schedEnv, *Coordinator, *ledgertest.Faulty, *flakySender, work.Envelope) {
	t.Helper()
	ctx := context.Background()
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	store := &ledgertest.Faulty{Store: e.fake}
	e.store = store
	sender := &flakySender{memSender: e.sender, fail: map[int]bool{}}
	c := e.instanceWith("a", func(cfg *Config) { cfg.Sender = sender }, countSchedule("s", n, config.OverlapSkip))
	e.startCursor("s")
	e.heartbeat(c, memOccurrence)
	e.deliverChecks(c)
	m := e.manifest(memRun)
	if !m.PlanDone || m.State != ledger.StateRunning {
		t.Fatalf("run %+v, want planned", m)
	}
	for i := range n {
		if slices.Contains(missing, i) {
			continue
		}
		if err := store.PutResult(ctx, ledger.Result{Run: memRun, Index: i, Epoch: m.Epoch, OK: true}); err != nil {
			t.Fatal(err)
		}
	}
	// The chain's next check, as planning scheduled it: at the run's deadline.
	envs, msgs := sender.checksSent(t)
	check, msg := envs[len(envs)-1], msgs[len(msgs)-1]
	if check.Run != memRun || check.Epoch != m.Epoch || !msg.NotBefore.Equal(m.Deadline) {
		t.Fatalf("the chain's check after planning: %+v due %s; want one of epoch %d at the deadline %s", check, msg.NotBefore, m.Epoch, m.Deadline)
	}
	e.clock.set(m.Deadline.Add(time.Minute))
	sender.mu.Lock()
	sender.n = 0
	sender.mu.Unlock()
	e.sender.mu.Lock()
	e.sender.msgs = nil
	e.sender.mu.Unlock()
	e.mu.Lock()
	e.delivered = 0
	e.mu.Unlock()
	return e, c, store, sender, check
}

// partitionRounds returns the partition indexes sent, sorted, and the rounds they were sent in.
func (s *memSender) partitionRounds(t *testing.T) ([]int, []int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var idx, rounds []int
	for _, m := range s.msgs {
		env, err := work.DecodeEnvelope(m.Body)
		if err != nil {
			t.Fatal(err)
		}
		if env.Kind == work.KindPartition {
			for _, one := range env.Singles() {
				idx = append(idx, one.Part)
				rounds = append(rounds, one.Round)
			}
		}
	}
	slices.Sort(idx)
	return idx, slices.Compact(slices.Sorted(slices.Values(rounds)))
}

// A re-enqueue whose send fails part way (the second plan batch of three) does not lose the
// round: the check's retry sends every missing partition at once, as round 1, and the run has
// spent one round, not two, with its next deadline a retry interval ahead.
func TestCheck_Reenqueue_FailedSendIsRetriedInTheSameRound(t *testing.T) {
	missing := []int{1, 6, 9} // plan batches 0, 1 and 2
	e, c, _, sender, check := reenqueueSetup(t, 10, missing)
	ctx := context.Background()
	sender.mu.Lock()
	sender.fail[2] = true // the second batch of the re-enqueue
	sender.mu.Unlock()

	err := c.Check(ctx, check, firstDelivery)
	if err == nil {
		t.Fatal("check with a failing send: got nil, want the send's error")
	}
	if !transport.IsTransient(err) {
		t.Fatalf("check: got %v, want the injected (transient) send failure", err)
	}
	if m := e.manifest(memRun); m.CheckRound != 0 {
		t.Fatalf("after the failed send the manifest has spent %d rounds, want 0", m.CheckRound)
	}

	// The host delivers the check again (or the invocation retries it after a pause).
	if err := c.Check(ctx, check, work.Delivery{MessageID: "check", Count: 2}); err != nil {
		t.Fatalf("retried check: %v", err)
	}
	idx, rounds := sender.partitionRounds(t)
	got := slices.Compact(idx)
	if fmt.Sprint(got) != fmt.Sprint(missing) || fmt.Sprint(rounds) != "[1]" {
		t.Errorf("re-enqueued partitions %v in rounds %v, want %v in round [1]", got, rounds, missing)
	}
	m := e.manifest(memRun)
	if m.CheckRound != 1 {
		t.Errorf("rounds spent: got %d want 1", m.CheckRound)
	}
	if want := c.cfg.Now().Add(c.retryInterval(m)).UTC(); !m.Deadline.Equal(want) {
		t.Errorf("next deadline: got %v want %v (a retry interval ahead)", m.Deadline, want)
	}
}

// A claim whose response is lost (the manifest write landed, the caller saw a timeout) does
// not lose the round: the partitions went out before the claim, and the retry finds the round
// spent and sends nothing more. Each missing partition is sent once, in round 1.
func TestCheck_Reenqueue_LostClaimResponseLosesNothing(t *testing.T) {
	missing := []int{2, 5}
	e, c, store, sender, check := reenqueueSetup(t, 10, missing)
	ctx := context.Background()
	store.Decide = ledgertest.FaultOnce(ledgertest.LoseResponse, "UpdateManifest", memRun)

	if err := c.Check(ctx, check, firstDelivery); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("check with a lost claim response: got %v, want ErrUnavailable", err)
	}
	if store.Injected(ledgertest.LoseResponse) != 1 {
		t.Fatal("no fault was injected into the claim: the test proves nothing")
	}
	if err := c.Check(ctx, check, work.Delivery{MessageID: "check", Count: 2}); err != nil {
		t.Fatalf("retried check: %v", err)
	}
	idx, rounds := sender.partitionRounds(t)
	if fmt.Sprint(idx) != fmt.Sprint(missing) || fmt.Sprint(rounds) != "[1]" {
		t.Errorf("re-enqueued partitions %v in rounds %v, want %v once each, in round [1]", idx, rounds, missing)
	}
	if m := e.manifest(memRun); m.CheckRound != 1 {
		t.Errorf("rounds spent: got %d want 1", m.CheckRound)
	}
}

// deadLetters is a work queue's dead-letter queue holding the given messages.
type deadLetters []transport.DeadLetter

func (d deadLetters) Peek(ctx context.Context, max int) ([]transport.DeadLetter, error) {
	return d[:min(max, len(d))], nil
}

// A partition whose message dead-lettered without a recorded result (its deliveries were spent
// by locks lost unseen) is never silently missing: the re-enqueue rounds send it again, and
// when the rounds are spent it is recorded failed, its error naming the dead letter.
func TestCheck_DeadLetteredPartitionIsResentThenRecordedWithTheReason(t *testing.T) {
	e, c, _, sender, check := reenqueueSetup(t, 10, []int{3, 7})
	ctx := context.Background()
	m := e.manifest(memRun)
	body := func(run string, part int) []byte {
		b, err := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindPartition, Run: run, Epoch: m.Epoch, Part: part}.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	c.cfg.DeadLetters = deadLetters{
		{ID: "other", Body: body("manual-other", 3), Reason: "TTLExpiredException"},
		{ID: memRun + "/3/e1", Body: body(memRun, 3), Reason: "MaxDeliveryCountExceeded", DeliveryCount: 10},
		{ID: "junk", Body: []byte("not an envelope")},
	}
	for round := 1; round <= c.cfg.CheckRounds; round++ {
		if err := c.Check(ctx, check, firstDelivery); err != nil {
			t.Fatalf("check %d: %v", round, err)
		}
		if m = e.manifest(memRun); m.CheckRound != round {
			t.Fatalf("after check %d: round %d; want round %d", round, m.CheckRound, round)
		}
		e.clock.set(m.Deadline.Add(time.Second))
	}
	if idx, rounds := sender.partitionRounds(t); fmt.Sprint(idx) != "[3 3 7 7]" || fmt.Sprint(rounds) != "[1 2]" {
		t.Errorf("re-sent partitions %v in rounds %v, want 3 and 7 in rounds 1 and 2", idx, rounds)
	}
	if err := c.Check(ctx, check, firstDelivery); err != nil {
		t.Fatalf("last check: %v", err)
	}
	r, err := e.fake.ReadResult(ctx, memRun, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := "timed out: no result by the deadline after 2 re-enqueue rounds; its message was dead-lettered (MaxDeliveryCountExceeded, after 10 deliveries)"
	if r.OK || !r.TimedOut || r.Error != want {
		t.Errorf("partition 3: ok %v timedOut %v error %q\nwant a timed-out failure %q", r.OK, r.TimedOut, r.Error, want)
	}
	if r, err := e.fake.ReadResult(ctx, memRun, 7); err != nil || r.OK || !r.TimedOut || strings.Contains(r.Error, "dead-lettered") {
		t.Errorf("partition 7 (not dead-lettered): %+v, %v; want a timed-out failure without a dead-letter reason", r, err)
	}
}

// A batch is planned with its spans (ledger.PlanBatch.Bundle), its messages carry them, and
// the partitions that time out are recorded under the block rule: a span without a block gets
// one block of its timeouts; in a span whose block exists, the missing partition records its
// own. Every partition ends with one outcome.
func TestCheck_TimeoutsAreRecordedInTheirSpansBlocks(t *testing.T) {
	ctx := context.Background()
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	store := &ledgertest.Faulty{Store: e.fake}
	e.store = store
	c := e.instanceWith("a", func(cfg *Config) { cfg.BatchSize = 64 }, countSchedule("s", 64, config.OverlapSkip))
	e.startCursor("s")
	e.heartbeat(c, memOccurrence)
	e.deliverChecks(c)
	m := e.manifest(memRun)
	if !m.PlanDone {
		t.Fatalf("run %+v, want planned", m)
	}
	b, err := e.fake.ReadPlanBatch(ctx, memRun, 0)
	if err != nil || b.Bundle != work.BundleSize(work.DefaultMaxBundle, 64) || b.Bundle != 8 {
		t.Fatalf("plan batch: bundle %d, %v; want 8", b.Bundle, err)
	}
	e.sender.mu.Lock()
	for _, msg := range e.sender.msgs {
		env, err := work.DecodeEnvelope(msg.Body)
		if err == nil && env.Kind == work.KindPartition && env.Block != 8 {
			t.Errorf("partition message %+v carries block %d, want 8", env, env.Block)
		}
	}
	e.sender.mu.Unlock()
	// Span 8+8 recorded nothing; span 16+8's block lacks 20 (its retry was lost); the rest
	// recorded their blocks.
	for first := 0; first < 64; first += 8 {
		if first == 8 {
			continue
		}
		var rs []ledger.Result
		for i := first; i < first+8; i++ {
			if i != 20 {
				rs = append(rs, ledger.Result{Run: memRun, Index: i, Epoch: m.Epoch, OK: true})
			}
		}
		if err := e.fake.PutBlock(ctx, ledger.Block{Run: memRun, Span: ledger.Span{First: first, Size: 8}, Results: rs}); err != nil {
			t.Fatal(err)
		}
	}
	envs, _ := e.sender.checksSent(t)
	check := envs[len(envs)-1]
	for round := 0; round <= c.cfg.CheckRounds; round++ {
		e.clock.set(e.manifest(memRun).Deadline.Add(time.Second))
		if err := c.Check(ctx, check, firstDelivery); err != nil {
			t.Fatalf("check %d: %v", round, err)
		}
	}
	blk, err := e.fake.ReadBlock(ctx, memRun, ledger.Span{First: 8, Size: 8})
	if err != nil || len(blk.Results) != 8 {
		t.Fatalf("span 8+8: %+v, %v; want a block of its 8 timeouts", blk, err)
	}
	for _, r := range blk.Results {
		if r.OK || !r.TimedOut {
			t.Errorf("partition %d: %+v, want timed out", r.Index, r)
		}
	}
	if r, err := e.fake.ReadResult(ctx, memRun, 20); err != nil || !r.TimedOut {
		t.Errorf("partition 20: %+v, %v; want a timed-out result of its own", r, err)
	}
	l, err := ledger.List(ctx, e.fake, memRun)
	if err != nil {
		t.Fatal(err)
	}
	for k, ref := range l.Refs {
		if ref.Index != k {
			t.Fatalf("listing %v, want each of 0..63 once", l.Refs)
		}
	}
	if len(l.Refs) != 64 {
		t.Errorf("%d outcomes, want 64", len(l.Refs))
	}
}

// A run planned part way by an earlier version (its first plan batch stored without spans) and
// resumed after the upgrade: that batch goes out as before, each result its own (no span in
// its messages), and the batches planned now record in blocks.
func TestEnqueue_BatchPlannedBeforeSpansKeepsResultsOfTheirOwn(t *testing.T) {
	ctx := context.Background()
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	c := e.instanceWith("a", func(cfg *Config) { cfg.BatchSize = 64 }, countSchedule("s", 128, config.OverlapSkip))
	old := ledger.PlanBatch{Batch: 0, First: 0, Cursor: "64"}
	for i := range 64 {
		old.Partitions = append(old.Partitions, json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)))
	}
	if err := e.fake.PutPlanBatch(ctx, memRun, old); err != nil {
		t.Fatal(err)
	}
	e.startCursor("s")
	e.heartbeat(c, memOccurrence)
	e.deliverChecks(c)
	if m := e.manifest(memRun); !m.PlanDone || m.Partitions != 128 {
		t.Fatalf("run %+v, want 128 partitions planned", m)
	}
	if b, err := e.fake.ReadPlanBatch(ctx, memRun, 1); err != nil || b.Bundle != 8 {
		t.Fatalf("batch 1 planned now: bundle %d, %v; want 8", b.Bundle, err)
	}
	e.sender.mu.Lock()
	defer e.sender.mu.Unlock()
	bundles := map[int]int{} // batch → bundles sent
	for _, msg := range e.sender.msgs {
		env, err := work.DecodeEnvelope(msg.Body)
		if err != nil || env.Kind != work.KindPartition {
			continue
		}
		batch := env.Part / 64
		want := map[int]int{0: 0, 1: 8}[batch]
		if env.Block != want || env.Count != 8 {
			t.Errorf("partitions %d+%d (batch %d) carry block %d; want %d, in bundles of 8", env.Part, env.Count, batch, env.Block, want)
		}
		bundles[batch]++
	}
	if bundles[0] != 8 || bundles[1] != 8 {
		t.Errorf("bundles sent per batch %v, want 8 each", bundles)
	}
}
