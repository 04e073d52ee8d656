package coordinator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/telemetry"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/work"
)

// Check handles a check message, the fast path of a run's supervision (the heartbeat is the
// slow one, supervise.go): it looks at the ledger and acts — a finished run ends the chain; a
// run past its hard deadline is timed out; an unfinished enqueue is resumed under the run's
// lease; a run with every result in is aggregated; missing partitions past the deadline are
// re-enqueued, for at most CheckRounds rounds, then recorded as timed out. Unless the run
// finished, it schedules the next check. An error fails the invocation, so the host delivers
// the check again; a check that never succeeds leaves the run to the heartbeat.
func (c *Coordinator) Check(ctx context.Context, env work.Envelope, d work.Delivery) error {
	if env.Round == probeRound {
		return c.probe(ctx, env) // a lease probe or a handover check (handover.go)
	}
	return c.check(ctx, env, d)
}

// timeOutAnyway times out m, taking the lease first when the run is still planning.
func (c *Coordinator) timeOutAnyway(ctx context.Context, m ledger.Manifest) error {
	if m.PlanDone {
		return c.timeOut(ctx, nil, m)
	}
	return c.asRunLeader(ctx, m, func(ctx context.Context, lease election.Lease, beat func()) error {
		return c.timeOut(ctx, &lease, m)
	})
}

func (c *Coordinator) check(ctx context.Context, env work.Envelope, d work.Delivery) (err error) {
	m, err := c.cfg.Store.ReadManifest(ctx, env.Run)
	if err == nil && !m.State.Final() {
		var span telemetry.Span
		ctx, span = c.cfg.Telemetry.StartCheck(ctx, m.Trace, env.Trace, runOf(m), env.Round)
		defer func() { span.End(err) }()
	}
	if errors.Is(err, ledger.ErrNotFound) {
		// Every run's record is created before its first check is sent, so a check without a
		// run is not Baton's, or its run was deleted: nothing to resume or retry.
		c.cfg.Logger.Warn("check: no such run; dropping the check", "run", env.Run, "epoch", env.Epoch, "round", env.Round,
			"instance", c.cfg.Identity.Instance)
		return nil
	}
	if err != nil {
		return err
	}
	log := c.log(env.Run, m.Epoch).With("round", env.Round)
	if m.State.Final() {
		log.Info("check: run finished; chain ends", "state", m.State)
		return nil
	}
	if m.State == ledger.StateQueued {
		// Waiting for its schedule's run in progress: the heartbeat starts it, with a check.
		log.Info("check: run is queued behind its schedule's run in progress; the scheduler starts it")
		return nil
	}
	next := env.Round + 1
	now := c.cfg.Now()

	if m.Stop != nil {
		return c.finishStopped(ctx, m, next)
	}
	if m.Round > 0 {
		return c.checkRound(ctx, m, next)
	}
	if c.overdue(m) {
		err := c.timeOutAnyway(ctx, m)
		var held *election.HeldError
		if err != nil && !errors.As(err, &held) {
			return err
		}
		// Held: a live leader is still planning it, and its own deadline check stops it.
		// Otherwise the report may be claimed by an aggregator still at work. Look again.
		if m, err = c.cfg.Store.ReadManifest(ctx, env.Run); err != nil || m.State.Final() {
			return err
		}
		return c.scheduleCheck(ctx, env.Run, m.Epoch, next, now.Add(c.checkDelay()))
	}

	if !m.PlanDone {
		// A check its planner sent to continue from this very checkpoint (the slice's budget
		// ran out, or the backlog was full) is the plan's next slice, not a takeover.
		out, err := c.resumeAsLeader(ctx, m, env.Round == continueRound+m.Checkpoint.Batches)
		if err != nil {
			return err
		}
		if out.Status == StatusHeld {
			// The leader is alive (or its lease has not expired yet): look again later.
			log.Info("check: enqueue in progress under another leader", "holder", out.Holder.String(), "holderEpoch", out.HolderEpoch)
			return c.scheduleCheck(ctx, env.Run, m.Epoch, next, now.Add(c.checkDelay()))
		}
		if m, err = c.cfg.Store.ReadManifest(ctx, env.Run); err != nil {
			return err
		}
		if m.State.Final() {
			return nil
		}
		if !m.PlanDone {
			// The slice ended at its budget and sent the check that continues it.
			return nil
		}
		return c.scheduleCheck(ctx, env.Run, m.Epoch, next, m.Deadline)
	}

	if c.cfg.Finisher != nil {
		if done, err := c.cfg.Finisher.TryFinish(ctx, env.Run); err != nil {
			return fmt.Errorf("check: finish %s: %w", env.Run, err)
		} else if done {
			log.Info("check: run finished")
			return nil
		}
	}
	if now.Before(m.Deadline) {
		return c.scheduleCheck(ctx, env.Run, m.Epoch, next, m.Deadline)
	}

	missing, latest, err := c.missingOf(ctx, m.RunID, m.Partitions, nil)
	if err != nil {
		return err
	}
	retryAt := now.Add(c.retryInterval(m))
	if len(missing) == 0 {
		// Every result is in, yet the done records disagree: a worker crashed between writing
		// its result and appending its record on the message's last delivery. The listing is
		// the proof, so finish from it. (An aggregation running elsewhere, or a crashed one,
		// is handled by the claim inside the finish.)
		if c.cfg.Finisher != nil {
			if done, err := c.finishByListing(ctx, env.Run); err != nil {
				return fmt.Errorf("check: %w", err)
			} else if done {
				log.Info("check: run finished from the results listing")
				return nil
			}
		}
		return c.scheduleCheck(ctx, env.Run, m.Epoch, next, retryAt)
	}
	if moved, err := c.waitForLimit(ctx, m, progress{missing: len(missing), of: m.Partitions, latest: latest}, next); moved || err != nil {
		return err
	}
	if m.CheckRound < c.cfg.CheckRounds {
		return c.reenqueue(ctx, m, missing, next, retryAt)
	}
	log.Warn("check: giving up on missing partitions", "missing", len(missing), "rounds", m.CheckRound)
	if err := c.timeOut(ctx, nil, m); err != nil {
		return err
	}
	if m, err = c.cfg.Store.ReadManifest(ctx, env.Run); err != nil || m.State.Final() {
		return err
	}
	return c.scheduleCheck(ctx, env.Run, m.Epoch, next, now.Add(c.checkDelay()))
}

// DeadlineMovedMsg is the line waitForLimit logs when it moves a run's deadline, with the
// partitions then missing ("missing") and the new deadline ("deadline", RFC 3339).
const DeadlineMovedMsg = "check: the run's partitions wait for their limit and still progress; deadline moved"

// MaxLimitedLife bounds how long after its planning a run of a job under a limit may keep
// moving its deadline (waitForLimit).
const MaxLimitedLife = 7 * 24 * time.Hour

// progress is what a look at a run's results found: missing partitions of the round's of,
// the latest result written at latest.
type progress struct {
	missing, of int
	latest      time.Time
}

// waitForLimit moves the deadline of m, a run of a job under a limit, a run timeout ahead when
// it is still progressing: results came in since the deadline was set (fewer of the round's
// partitions lack one than at the last move), the latest within a retry interval. Its
// partitions wait their turn on the queue, so a run that is slow by design is timed out for
// going without results, not for its length (at most MaxLimitedLife after planning, or
// after its redrive). It reports whether it moved the deadline, or found it moved, and
// scheduled the next check.
func (c *Coordinator) waitForLimit(ctx context.Context, m ledger.Manifest, p progress, next int) (bool, error) {
	if _, limited := c.cfg.Jobs.Limit(m.Job); !limited || m.CheckRound > 0 {
		return false, nil
	}
	missing, before := p.missing, p.of
	if m.Waited > 0 {
		before = m.Waited
	}
	now, since := c.cfg.Now().UTC(), m.Enqueued
	if rd := m.Redriving(); rd != nil {
		since = rd.At
	}
	if missing >= before || now.Sub(p.latest) > c.retryInterval(m) || now.Sub(since) >= MaxLimitedLife {
		return false, nil
	}
	moved, seen := false, m
	m, err := c.cfg.Store.UpdateManifest(ctx, m.RunID, ledger.NoFence, func(cur *ledger.Manifest) error {
		moved = false
		if cur.State.Final() || cur.Round != seen.Round || cur.CheckRound > 0 || cur.Waited != seen.Waited || !cur.Deadline.Equal(seen.Deadline) {
			return ledger.ErrNoChange
		}
		cur.Waited = missing
		cur.Deadline = now.Add(c.runTimeout(*cur))
		cur.Expires = c.planExpiry(*cur, now)
		moved = true
		return nil
	})
	switch {
	case err != nil:
		return false, err
	case m.State.Final():
		return true, nil
	case !moved && m.Round == seen.Round && m.CheckRound == seen.CheckRound && m.Deadline.Equal(seen.Deadline):
		return false, nil
	case moved:
		c.log(m.RunID, m.Epoch).Info(DeadlineMovedMsg,
			"missing", missing, "deadline", m.Deadline.Format(time.RFC3339Nano))
	}
	// Moved here, or by another check or a re-enqueue round meanwhile: look again then.
	return true, c.scheduleCheck(ctx, m.RunID, m.Epoch, next, m.Deadline)
}

// retryInterval spaces m's re-enqueue rounds: half its run timeout, never less than a lease.
func (c *Coordinator) retryInterval(m ledger.Manifest) time.Duration {
	return max(c.runTimeout(m)/2, c.leaseDur+checkMargin)
}

// resumeAsLeader makes one attempt at m's lease and, when it wins, plans the run from its
// checkpoint: the first planner of a run the scheduler created, the next slice or wave of a
// run whose planner ended its slice at that checkpoint (continuing), or the next planner of a
// run whose planner stopped mid-enqueue.
func (c *Coordinator) resumeAsLeader(ctx context.Context, m ledger.Manifest, continuing bool) (Outcome, error) {
	var out Outcome
	var ended bool
	run := m.RunID
	err := c.asRunLeader(ctx, m, func(ctx context.Context, lease election.Lease, beat func()) error {
		switch {
		case m.Epoch == 0:
			c.log(run, lease.Epoch).Info("planning the run")
		case continuing:
			c.log(run, lease.Epoch).Info("check: planning the run's next slice", "leaderEpoch", m.Epoch, "next", m.Checkpoint.Next)
		default:
			c.log(run, lease.Epoch).Warn("check: resuming a run its leader left mid-enqueue", "leaderEpoch", m.Epoch)
		}
		m, e, err := c.resume(ctx, lease, beat, run)
		out, ended = Outcome{Status: StatusResumed, Run: run, Epoch: lease.Epoch, State: m.State}, e
		return err
	})
	var held *election.HeldError
	if errors.As(err, &held) {
		return Outcome{Status: StatusHeld, Run: run, Holder: held.Holder, HolderEpoch: held.Epoch}, nil
	}
	if err == nil && ended && c.cfg.Finisher != nil {
		c.finishAfterPlanning(ctx, c.log(run, out.Epoch), run)
	}
	return out, err
}

// missing lists the partition indexes that have no result yet.
func (c *Coordinator) missing(ctx context.Context, m ledger.Manifest) ([]int, error) {
	out, _, err := c.missingOf(ctx, m.RunID, m.Partitions, nil)
	return out, err
}

// missingOf lists, from one listing of key's results (a run, or a redrive round), the indexes
// of want (ascending; nil: every index below n) that have none, and when the latest of want's
// results was written (zero: none).
func (c *Coordinator) missingOf(ctx context.Context, key string, n int, want []int) ([]int, time.Time, error) {
	have := make([]bool, n)
	written := make([]time.Time, n)
	err := c.cfg.Store.ListResults(ctx, key, func(r ledger.ResultRef) error {
		if i := r.Index; i >= 0 && i < len(have) {
			have[i], written[i] = true, r.Modified
		}
		return nil
	})
	if err != nil {
		return nil, time.Time{}, err
	}
	var latest time.Time
	if want == nil {
		for _, t := range written {
			if t.After(latest) {
				latest = t
			}
		}
	}
	for _, i := range want {
		if i >= 0 && i < n && written[i].After(latest) {
			latest = written[i]
		}
	}
	var out []int
	if want == nil {
		for i, ok := range have {
			if !ok {
				out = append(out, i)
			}
		}
		return out, latest, nil
	}
	for _, i := range want {
		if i >= 0 && i < n && !have[i] {
			out = append(out, i)
		}
	}
	return out, latest, nil
}

// reenqueue spends the next re-enqueue round (m.CheckRound+1) on the missing partitions: it
// sends them from their stored plan batches, then claims the round in the manifest. Sending
// first makes a failure between the two harmless: the retry sends the same message IDs again.
func (c *Coordinator) reenqueue(ctx context.Context, m ledger.Manifest, missing []int, next int, retryAt time.Time) error {
	round := m.CheckRound + 1
	if err := c.sendMissing(ctx, m, missing, round); err != nil {
		return fmt.Errorf("re-enqueue round %d of %s: %w", round, m.RunID, err)
	}
	claimed := false
	m, err := c.cfg.Store.UpdateManifest(ctx, m.RunID, ledger.NoFence, func(cur *ledger.Manifest) error {
		claimed = false // the update may call this again on a fresher copy
		if cur.CheckRound != round-1 || cur.State.Final() {
			return ledger.ErrNoChange
		}
		cur.CheckRound = round
		cur.Deadline = retryAt.UTC()
		claimed = true
		return nil
	})
	if err != nil {
		return err
	}
	if claimed {
		c.log(m.RunID, m.Epoch).Warn("check: re-enqueued missing partitions", "missing", len(missing), "round", round)
	}
	return c.scheduleCheck(ctx, m.RunID, m.Epoch, next, m.Deadline)
}

// sendMissing sends the missing partitions as re-enqueue round `round`, one send per plan
// batch, in batch order.
func (c *Coordinator) sendMissing(ctx context.Context, m ledger.Manifest, missing []int, round int) error {
	byBatch := map[int][]int{}
	for _, i := range missing {
		byBatch[m.BatchOf(i)] = append(byBatch[m.BatchOf(i)], i)
	}
	for _, b := range slices.Sorted(maps.Keys(byBatch)) {
		pb, err := c.cfg.Store.ReadPlanBatch(ctx, m.RunID, b)
		if err != nil {
			return err
		}
		if err := c.send(ctx, m, pb, m.Epoch, round, byBatch[b]...); err != nil {
			return err
		}
	}
	return nil
}

// recordTimeouts records a failed result for every missing partition, so the run can finish:
// in its span's block when the span has none yet (one write per span), else on its own. The
// error says why: no result by the deadline after the rounds spent, and, when its message is
// among the work queue's dead letters, that it dead-lettered and the broker's reason.
func (c *Coordinator) recordTimeouts(ctx context.Context, m ledger.Manifest, missing []int) error {
	now := c.cfg.Now().UTC()
	dead := c.deadLettered(ctx, m.RunID)
	spans := map[ledger.Span][]ledger.Result{}
	var order []ledger.Span
	batches := map[int]ledger.PlanBatch{}
	for _, i := range missing {
		b, ok := batches[m.BatchOf(i)]
		if !ok {
			var err error
			if b, err = c.cfg.Store.ReadPlanBatch(ctx, m.RunID, m.BatchOf(i)); err != nil && !errors.Is(err, ledger.ErrNotFound) {
				return err
			}
			batches[m.BatchOf(i)] = b // a batch never stored: its partitions record their own
		}
		reason := fmt.Sprintf("timed out: no result by the deadline after %d re-enqueue rounds", m.CheckRound)
		if dl, ok := dead[i]; ok {
			reason += "; its message was dead-lettered" + deadLetterReason(dl)
		}
		sp := ledger.SpanOf(i, b.Bundle)
		if _, ok := spans[sp]; !ok {
			order = append(order, sp)
		}
		spans[sp] = append(spans[sp], ledger.Result{Run: m.RunID, Index: i, Epoch: m.Epoch, OK: false, TimedOut: true,
			Error: reason, Worker: c.cfg.Identity, Started: now, Finished: now})
	}
	for _, sp := range order {
		recs, _ := ledger.Record(ctx, c.cfg.Store, m.RunID, sp, spans[sp], nil)
		var idx []int
		for _, r := range recs {
			if r.Err != nil {
				return r.Err
			}
			idx = append(idx, r.Result.Index)
		}
		// A done record for each: one recorded by a worker meanwhile may get a second, which
		// the count tolerates (redeliveries do the same).
		for _, group := range m.DoneLayout.Groups(idx) {
			if _, err := c.cfg.Store.AppendDone(ctx, m.RunID, m.DoneLayout, m.Epoch, group...); err != nil {
				return err
			}
		}
	}
	return nil
}

// maxDeadLetterPeek bounds the dead letters read to explain a run's timed-out partitions.
const maxDeadLetterPeek = 256

// deadLettered returns the run's partitions found among the first dead letters of the work
// queue, by index (the latest copy of each). It is best effort: an unreadable dead-letter
// queue only loses the explanation, never the timeout.
func (c *Coordinator) deadLettered(ctx context.Context, run string) map[int]transport.DeadLetter {
	if c.cfg.DeadLetters == nil {
		return nil
	}
	letters, err := c.cfg.DeadLetters.Peek(ctx, maxDeadLetterPeek)
	if err != nil {
		c.cfg.Logger.Warn("check: dead letters unreadable; timed-out partitions get no dead-letter reason", "run", run, "err", err)
		return nil
	}
	out := map[int]transport.DeadLetter{}
	for _, dl := range letters {
		if env, err := work.DecodeEnvelope(dl.Body); err == nil && env.Kind == work.KindPartition && env.Run == run {
			for _, one := range env.Singles() {
				out[one.Part] = dl
			}
		}
	}
	return out
}

// deadLetterReason is the broker's account of a dead letter, for a result's error.
func deadLetterReason(dl transport.DeadLetter) string {
	var parts []string
	if dl.Reason != "" {
		parts = append(parts, dl.Reason)
	}
	if dl.DeliveryCount > 0 {
		parts = append(parts, fmt.Sprintf("after %d deliveries", dl.DeliveryCount))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
