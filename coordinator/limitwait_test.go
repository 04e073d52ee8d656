package coordinator

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/limit"
	"github.com/batonfn/baton/work"
)

// A run of a job under a limit is timed out for a run timeout without progress, not for its
// length: at its deadline, results that came in since move the deadline (and the hard one) a
// run timeout ahead without spending a re-enqueue round; a deadline that finds no new result
// re-enqueues the missing partitions as for any job.
func TestCheck_ARunWaitingForItsLimitKeepsItsRounds(t *testing.T) {
	e, c, store, sender, check := reenqueueSetup(t, 10, []int{1, 5, 6, 9})
	e.jobs.SetLimit("count", limit.Spec{Name: "crm", MaxInFlight: 2})
	ctx := context.Background()
	// Partition 5 came in lately: the run still progresses.
	if err := store.PutResult(ctx, ledger.Result{Run: memRun, Index: 5, Epoch: e.manifest(memRun).Epoch, OK: true}); err != nil {
		t.Fatal(err)
	}
	lastCheck := func() work.Envelope {
		t.Helper()
		envs, _ := sender.checksSent(t)
		return envs[len(envs)-1]
	}

	// 7 of 10 in at the first deadline: progress.
	if err := c.Check(ctx, check, firstDelivery); err != nil {
		t.Fatal(err)
	}
	now := c.cfg.Now().UTC()
	m := e.manifest(memRun)
	if idx, _ := sender.partitionRounds(t); len(idx) != 0 || m.CheckRound != 0 || m.Waited != 3 ||
		!m.Deadline.Equal(now.Add(time.Hour)) || !m.Expires.Equal(c.planExpiry(m, now)) {
		t.Fatalf("after a deadline with 7 of 10 in: sent %v, round %d, waited %d, deadline %s, expires %s; want nothing sent, no round, the deadline an hour ahead",
			idx, m.CheckRound, m.Waited, m.Deadline, m.Expires)
	}

	// One more in, a minute before the next deadline: moved again.
	e.clock.set(m.Deadline.Add(-time.Minute))
	if err := store.PutResult(ctx, ledger.Result{Run: memRun, Index: 1, Epoch: m.Epoch, OK: true}); err != nil {
		t.Fatal(err)
	}
	e.clock.set(m.Deadline.Add(time.Second))
	if err := c.Check(ctx, lastCheck(), firstDelivery); err != nil {
		t.Fatal(err)
	}
	if m = e.manifest(memRun); m.CheckRound != 0 || m.Waited != 2 || !m.Deadline.After(e.clock.Now()) {
		t.Fatalf("after a deadline with 8 of 10 in: round %d, waited %d, deadline %s; want the deadline moved again", m.CheckRound, m.Waited, m.Deadline)
	}

	// Nothing new by the next one: the missing two are re-enqueued in round 1.
	e.clock.set(m.Deadline.Add(time.Second))
	if err := c.Check(ctx, lastCheck(), firstDelivery); err != nil {
		t.Fatal(err)
	}
	idx, rounds := sender.partitionRounds(t)
	if m = e.manifest(memRun); m.CheckRound != 1 || fmt.Sprint(idx) != "[6 9]" || fmt.Sprint(rounds) != "[1]" {
		t.Fatalf("after a deadline without progress: round %d, re-enqueued %v in rounds %v; want [6 9] in round 1", m.CheckRound, idx, rounds)
	}
}

// A limited run whose results stopped coming in a retry interval before its deadline (a
// message lost, not a limit waited for) spends its first round then, however many came in
// before.
func TestCheck_ALimitedRunThatStoppedProgressingIsReenqueued(t *testing.T) {
	e, c, _, sender, check := reenqueueSetup(t, 10, []int{1, 6, 9})
	e.jobs.SetLimit("count", limit.Spec{Name: "crm", MaxInFlight: 2})
	if err := c.Check(context.Background(), check, firstDelivery); err != nil {
		t.Fatal(err)
	}
	if m := e.manifest(memRun); m.CheckRound != 1 || m.Waited != 0 {
		t.Fatalf("round %d, waited %d; want round 1 spent: the last result is an hour old", m.CheckRound, m.Waited)
	}
	if idx, _ := sender.partitionRounds(t); fmt.Sprint(idx) != "[1 6 9]" {
		t.Fatalf("re-enqueued %v, want [1 6 9]", idx)
	}
}

// The same run without a limit spends its first round at the first deadline.
func TestCheck_ARunWithoutALimitDoesNotWaitAtItsDeadline(t *testing.T) {
	e, c, _, sender, check := reenqueueSetup(t, 10, []int{1, 6, 9})
	if err := c.Check(context.Background(), check, firstDelivery); err != nil {
		t.Fatal(err)
	}
	if m := e.manifest(memRun); m.CheckRound != 1 || m.Waited != 0 {
		t.Fatalf("round %d, waited %d; want round 1 spent", m.CheckRound, m.Waited)
	}
	if idx, _ := sender.partitionRounds(t); fmt.Sprint(idx) != "[1 6 9]" {
		t.Fatalf("re-enqueued %v, want [1 6 9]", idx)
	}
}

// A redrive round of a job under a limit waits the same way: progress in the round moves its
// deadline; none spends a re-enqueue round.
func TestRedrive_ARoundWaitingForItsLimitKeepsItsRounds(t *testing.T) {
	e := newStopEnv(t)
	ctx := testCtx(t)
	job, run := e.downRun(t, 8)
	e.jobs.SetLimit("flaky", limit.Spec{Name: "crm", MaxInFlight: 1})
	job.down.Store(false)
	if _, err := e.c.Redrive(ctx, run, "k", "alice"); err != nil {
		t.Fatal(err)
	}
	var round []work.Envelope
	for _, env := range e.partitionMessages(run) {
		if env.Redrive == 1 {
			round = append(round, env.Singles()...)
		}
	}
	if len(round) != 4 {
		t.Fatalf("%d partitions in round 1, want the 4 failed", len(round))
	}
	m := e.manifest(run)
	e.clock.set(m.Deadline.Add(-time.Minute))
	if err := e.worker("w").HandlePartition(ctx, round[0], work.Delivery{MessageID: round[0].MessageID(), Count: 1}); err != nil {
		t.Fatal(err)
	}
	e.heartbeat(e.c, c2s(m.Deadline.Add(time.Second)))
	if m = e.manifest(run); m.Round != 1 || m.CheckRound != 0 || m.Waited != 3 || !m.Deadline.After(e.clock.Now()) {
		t.Fatalf("round 1 at its deadline with 1 of 4 in: round %d, check round %d, waited %d, deadline %s; want the deadline moved",
			m.Round, m.CheckRound, m.Waited, m.Deadline)
	}
	e.heartbeat(e.c, c2s(m.Deadline.Add(time.Second)))
	if m = e.manifest(run); m.CheckRound != 1 || m.Waited != 3 {
		t.Fatalf("round 1 at its next deadline, no progress: check round %d, waited %d; want a re-enqueue round spent", m.CheckRound, m.Waited)
	}
}
