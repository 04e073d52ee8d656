package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/election"
	"github.com/batonfn/baton/ledger"
	"github.com/batonfn/baton/ledger/ledgertest"
	"github.com/batonfn/baton/transport"
	"github.com/batonfn/baton/work"
)

// reenqueueSetup plans a run of n partitions (batches of 4) on an in-memory instance, records
// a result for every partition but missing, and moves the clock past the run's deadline, so
// that the next check re-enqueues exactly the missing ones. It returns the instance, its
// store, its sender with the tick's messages cleared, and the check to deliver.
func reenqueueSetup(t *testing.T, n int, missing []int) (*Coordinator, *ledgertest.Faulty, *flakySender, work.Envelope) {
	t.Helper()
	ctx := context.Background()
	store := &ledgertest.Faulty{Store: ledgertest.NewFake(ledgertest.Options{})}
	sender := &flakySender{fail: map[int]bool{}}
	c := memInstance(t, store, election.NewMemoryLock(15*time.Second), sender, n)
	clock := newClock("2026-11-21T10:05:01Z")
	c.cfg.Now = clock.Now
	if out, err := c.Tick(ctx, tick); err != nil || out.State != ledger.StateRunning {
		t.Fatalf("tick: %+v, %v", out, err)
	}
	m, err := store.ReadManifest(ctx, tickRun)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if slices.Contains(missing, i) {
			continue
		}
		if err := store.PutResult(ctx, ledger.Result{Run: tickRun, Index: i, Epoch: m.Epoch, OK: true}); err != nil {
			t.Fatal(err)
		}
	}
	clock.set(m.Deadline.Add(time.Minute))
	sender.mu.Lock()
	sender.msgs = nil
	sender.mu.Unlock()
	return c, store, sender, work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindCheck, Run: tickRun, Epoch: m.Epoch, Round: 1}
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
			idx = append(idx, env.Part)
			rounds = append(rounds, env.Round)
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
	c, store, sender, check := reenqueueSetup(t, 10, missing)
	ctx := context.Background()
	sender.mu.Lock()
	sender.fail[sender.n+2] = true // the second batch of the re-enqueue
	sender.mu.Unlock()

	err := c.Check(ctx, check, firstDelivery)
	if err == nil {
		t.Fatal("check with a failing send: got nil, want the send's error")
	}
	if !transport.IsTransient(err) {
		t.Fatalf("check: got %v, want the injected (transient) send failure", err)
	}
	if m, _ := store.ReadManifest(ctx, tickRun); m.CheckRound != 0 {
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
	m, err := store.ReadManifest(ctx, tickRun)
	if err != nil {
		t.Fatal(err)
	}
	if m.CheckRound != 1 {
		t.Errorf("rounds spent: got %d want 1", m.CheckRound)
	}
	if want := c.cfg.Now().Add(c.retryInterval()).UTC(); !m.Deadline.Equal(want) {
		t.Errorf("next deadline: got %v want %v (a retry interval ahead)", m.Deadline, want)
	}
}

// A claim whose response is lost (the manifest write landed, the caller saw a timeout) does
// not lose the round: the partitions went out before the claim, and the retry finds the round
// spent and sends nothing more. Each missing partition is sent once, in round 1.
func TestCheck_Reenqueue_LostClaimResponseLosesNothing(t *testing.T) {
	missing := []int{2, 5}
	c, store, sender, check := reenqueueSetup(t, 10, missing)
	ctx := context.Background()
	store.Decide = ledgertest.FaultOnce(ledgertest.LoseResponse, "UpdateManifest", tickRun)

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
	if m, _ := store.ReadManifest(ctx, tickRun); m.CheckRound != 1 {
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
	c, store, sender, check := reenqueueSetup(t, 10, []int{3, 7})
	ctx := context.Background()
	m, err := store.ReadManifest(ctx, tickRun)
	if err != nil {
		t.Fatal(err)
	}
	body := func(run string, part int) []byte {
		b, err := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindPartition, Run: run, Epoch: m.Epoch, Part: part}.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	c.cfg.DeadLetters = deadLetters{
		{ID: "other", Body: body("other-run", 3), Reason: "TTLExpiredException"},
		{ID: tickRun + "/3/e1", Body: body(tickRun, 3), Reason: "MaxDeliveryCountExceeded", DeliveryCount: 10},
		{ID: "junk", Body: []byte("not an envelope")},
	}
	now := c.cfg.Now()
	c.cfg.Now = func() time.Time { return now }
	for round := 1; round <= c.cfg.CheckRounds; round++ {
		if err := c.Check(ctx, check, firstDelivery); err != nil {
			t.Fatalf("check %d: %v", round, err)
		}
		if m, err = store.ReadManifest(ctx, tickRun); err != nil || m.CheckRound != round {
			t.Fatalf("after check %d: round %d, %v; want round %d", round, m.CheckRound, err, round)
		}
		now = m.Deadline.Add(time.Second)
	}
	if idx, rounds := sender.partitionRounds(t); fmt.Sprint(idx) != "[3 3 7 7]" || fmt.Sprint(rounds) != "[1 2]" {
		t.Errorf("re-sent partitions %v in rounds %v, want 3 and 7 in rounds 1 and 2", idx, rounds)
	}
	if err := c.Check(ctx, check, firstDelivery); err != nil {
		t.Fatalf("last check: %v", err)
	}
	r, err := store.ReadResult(ctx, tickRun, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := "timed out: no result by the deadline after 2 re-enqueue rounds; its message was dead-lettered (MaxDeliveryCountExceeded, after 10 deliveries)"
	if r.OK || !r.TimedOut || r.Error != want {
		t.Errorf("partition 3: ok %v timedOut %v error %q\nwant a timed-out failure %q", r.OK, r.TimedOut, r.Error, want)
	}
	if r, err := store.ReadResult(ctx, tickRun, 7); err != nil || r.OK || strings.Contains(r.Error, "dead-lettered") {
		t.Errorf("partition 7 (not dead-lettered): %+v, %v; want a timed-out failure without a dead-letter reason", r, err)
	}
}
