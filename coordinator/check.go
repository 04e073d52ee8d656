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
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/work"
)

// Check handles a check message, the run's dead-man's switch. No instance polls; instead every
// run carries a chain of scheduled check messages, each of which looks at the ledger and acts:
//   - run finished: the chain ends;
//   - past its hard deadline (Expires): finish it as timed-out;
//   - enqueue unfinished (its leader died): take the lease and resume from the checkpoint;
//   - every result in but no report: aggregate;
//   - past the deadline with results missing: re-enqueue only the missing partitions, for at
//     most CheckRounds rounds, then record them as timed out so the run finishes.
//
// Unless the run finished, it schedules the next check. An error fails the invocation so the
// host delivers the check again, except on the last delivery (d.Count reaches MaxDeliveries):
// then the check acts instead of failing, so the chain never dies silently.
func (c *Coordinator) Check(ctx context.Context, env work.Envelope, d work.Delivery) error {
	if env.Round == probeRound {
		return c.probe(ctx, env) // a lease probe or a handover check (handover.go)
	}
	err := c.check(ctx, env, d)
	if err == nil || d.Count < c.cfg.MaxDeliveries || ctx.Err() != nil {
		return err
	}
	c.log(env.Run, env.Epoch).Error("check failed on its last delivery; keeping the run supervised", "round", env.Round,
		"delivery", d.Count, "err", err)
	return c.lastResort(ctx, env, err)
}

// lastResort keeps a run whose check failed on every delivery from being orphaned: an overdue
// run is finished, any other gets a fresh check (a new message, with a full delivery budget).
func (c *Coordinator) lastResort(ctx context.Context, env work.Envelope, cause error) error {
	m, err := c.cfg.Store.ReadManifest(ctx, env.Run)
	if err != nil {
		return errors.Join(cause, err)
	}
	if m.State.Final() {
		return nil
	}
	if c.overdue(m) {
		if err := c.timeOutAnyway(ctx, m); err == nil {
			return nil
		}
	}
	if err := c.scheduleCheck(ctx, env.Run, m.Epoch, env.Round+1, c.cfg.Now().Add(c.checkDelay())); err != nil {
		return errors.Join(cause, err)
	}
	return nil
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

func (c *Coordinator) check(ctx context.Context, env work.Envelope, d work.Delivery) error {
	m, err := c.cfg.Store.ReadManifest(ctx, env.Run)
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
	if env.Round == startBackstopRound && d.Count <= 1 && d.Try <= 1 && (m.Epoch != 0 || m.PlanDone) {
		// The start check was delivered and a planner took the run: its chain supervises it.
		// Delivered or tried again, the backstop goes on as a check of the chain instead: when
		// the start check never went out, the planner that took the run may have been this
		// very message's last delivery or try, which died or failed before sending anything
		// (that is why the message came back), and then nothing else supervises the run.
		log.Debug("check: the run has started; its start's backstop ends")
		return nil
	}
	next := env.Round + 1
	now := c.cfg.Now()

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

	missing, err := c.missing(ctx, m)
	if err != nil {
		return err
	}
	retryAt := now.Add(c.retryInterval())
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

// retryInterval spaces re-enqueue rounds: half the run timeout, never less than a lease.
func (c *Coordinator) retryInterval() time.Duration {
	return max(c.cfg.RunTimeout/2, c.leaseDur+checkMargin)
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
	have := make([]bool, m.Partitions)
	err := c.cfg.Store.ListResults(ctx, m.RunID, func(i int) error {
		if i >= 0 && i < len(have) {
			have[i] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []int
	for i, ok := range have {
		if !ok {
			out = append(out, i)
		}
	}
	return out, nil
}

// reenqueue spends the next re-enqueue round (m.CheckRound+1) on the missing partitions:
// send them from their stored plan batches, then claim the round in the manifest (a CAS, so a
// duplicate check that reads the manifest after the claim does not send again).
//
// Sending before claiming makes a failure between the two harmless. A send that fails part
// way (the second plan batch of three, say) leaves the round unclaimed and the deadline
// passed, so the check's retry (the invocation keeps its message through a transport outage,
// or the host delivers it again) sends the whole round again at once, with the same message
// IDs, and the round is spent only when every missing partition went out. A claim that fails
// after the sends only makes the retry repeat them. The price is that two copies of one check
// running at the same moment can both send the round: the same message IDs, which Service Bus
// duplicate detection drops and the workers' one-result rule absorbs on the Storage queue.
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

// recordTimeouts records a failed result for every missing partition, so the run can finish.
// The error says why: no result by the deadline after the rounds spent, and, when its message
// is among the work queue's dead letters, that it dead-lettered and the broker's reason.
func (c *Coordinator) recordTimeouts(ctx context.Context, m ledger.Manifest, missing []int) error {
	now := c.cfg.Now().UTC()
	dead := c.deadLettered(ctx, m.RunID)
	for _, i := range missing {
		reason := fmt.Sprintf("timed out: no result by the deadline after %d re-enqueue rounds", m.CheckRound)
		if dl, ok := dead[i]; ok {
			reason += "; its message was dead-lettered" + deadLetterReason(dl)
		}
		r := ledger.Result{Run: m.RunID, Index: i, Epoch: m.Epoch, OK: false, TimedOut: true, Error: reason,
			Worker: c.cfg.Identity, Started: now, Finished: now}
		if err := c.cfg.Store.PutResult(ctx, r); err != nil && !errors.Is(err, ledger.ErrExists) {
			return err
		} else if err == nil {
			if _, err := c.cfg.Store.AppendDone(ctx, m.RunID, m.DoneLayout, m.Epoch, i); err != nil {
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
