package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/lib/memo"
)

// No run stays non-final for long past its hard deadline (Manifest.Expires), and no run can
// block later occurrences forever:
//
//   - planning must keep making progress: each checkpoint (and, while the leader waits for a
//     wave, each rise in the completion count) moves Expires a RunTimeout ahead, so only a run
//     whose planning stopped for a whole RunTimeout is overdue;
//   - once planned, the check chain re-enqueues missing partitions from Deadline = Enqueued +
//     RunTimeout for CheckRounds rounds, one retryInterval apart, then records the rest as
//     timed out; Expires adds one more check delay to that;
//   - a check past Expires finishes it as timed-out, with a report of the results it has, and a
//     check on its last delivery acts instead of failing, so the chain does not die with the
//     run unfinished;
//   - each heartbeat looks at every schedule's latest run and, when it is still not final past
//     Expires + one check delay (its chain is gone), sends it a fresh check (reading the run
//     only when the bound it last read has passed: boundMemo).
//
// So a run is final by Expires + one check delay while the control messages flow, and a
// schedule's latest run otherwise a heartbeat and a check delivery later.

// boundMemo remembers, per process, what the heartbeat's supervision learnt of the runs it read:
// a run final (it stays final) or the final bound of a run not final. A run's bound only moves
// later (each checkpoint, each rise of the completion count while the leader waits for a
// wave, and the end of planning set its hard deadline a run timeout or more past their own
// time), so until the bound last read has passed, the run cannot be overdue and the heartbeat
// need not read it again. A schedule's latest run is read then once per process, and again
// when its bound comes, not on every heartbeat: with many schedules and a short heartbeat
// those reads would add up, each on a run's manifest, the blob its workers read too.
type boundMemo struct {
	bounds *memo.Map[time.Time] // run → the final bound last read; finalBound when final
}

// finalBound marks a run seen final: it is never due again.
var finalBound = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// boundMemoMax bounds the runs remembered; past it the memo starts over.
const boundMemoMax = 4096

// due reports whether run must be read to be supervised at now: it was never seen, or its
// bound has passed.
func (b boundMemo) due(run string, now time.Time) bool {
	bound, ok := b.bounds.Get(run)
	return !ok || now.After(bound)
}

// seen remembers run's final bound as read.
func (b boundMemo) seen(run string, bound time.Time) { b.bounds.Put(run, bound) }

// final remembers run as final.
func (b boundMemo) final(run string) { b.seen(run, finalBound) }

// checkDelay is how long after a leader's last sign of life a check can take its lease over.
func (c *Coordinator) checkDelay() time.Duration { return c.leaseDur + checkMargin }

// planExpiry is the hard deadline of a planned run whose planning ended at enqueued.
func (c *Coordinator) planExpiry(enqueued time.Time) time.Time {
	return enqueued.Add(c.cfg.RunTimeout + time.Duration(c.cfg.CheckRounds)*c.retryInterval() + c.checkDelay())
}

// expires is m's hard deadline (computed for manifests written before it was stored).
func (c *Coordinator) expires(m ledger.Manifest) time.Time {
	if !m.Expires.IsZero() {
		return m.Expires
	}
	if m.PlanDone {
		return c.planExpiry(m.Enqueued)
	}
	return m.Created.Add(c.cfg.RunTimeout)
}

// FinalBound is the documented bound: a run is final by this time as long as check messages are
// delivered. It is the hard deadline plus one check delay, plus one lease duration: an
// aggregator that died holding the run's report claim is taken over once its claim has gone
// that long unrenewed (the app sets the worker's StaleClaim to the lease duration).
func (c *Coordinator) FinalBound(m ledger.Manifest) time.Time {
	return c.expires(m).Add(c.checkDelay() + c.leaseDur)
}

// overdue reports whether m should already be final.
func (c *Coordinator) overdue(m ledger.Manifest) bool {
	return !m.State.Final() && c.cfg.Now().After(c.expires(m))
}

// timeOut finishes an overdue run as timed-out. A run still planning is stopped (under the
// lease only: lease must be non-nil, and its epoch fences the old planner out); a planned run
// gets a failure result for each partition without one and is aggregated from what it has.
func (c *Coordinator) timeOut(ctx context.Context, lease *election.Lease, m ledger.Manifest) error {
	log := c.log(m.RunID, m.Epoch)
	now := c.cfg.Now().UTC()
	if !m.PlanDone {
		if lease == nil {
			return errors.New("timing out a run that is still planning needs the lease")
		}
		reason := fmt.Sprintf("planning made no progress for %s (stopped at partition %d; deadline %s)",
			c.cfg.RunTimeout, m.Checkpoint.Next, c.expires(m).UTC().Format(time.RFC3339))
		_, err := c.cfg.Store.UpdateManifest(ctx, m.RunID, lease.Epoch, func(cur *ledger.Manifest) error {
			if cur.State.Final() || cur.PlanDone {
				return ledger.ErrNoChange
			}
			if err := cur.Transition(ledger.StateTimedOut); err != nil {
				return err
			}
			cur.Epoch = max(cur.Epoch, lease.Epoch)
			cur.Reason, cur.Finished = reason, now
			return nil
		})
		if err == nil {
			log.Error("run timed out while planning", "reason", reason)
		}
		return err
	}
	missing, err := c.missing(ctx, m)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		log.Warn("run is past its deadline; recording its missing partitions as timed out", "missing", len(missing),
			"expires", c.expires(m).UTC())
		if err := c.recordTimeouts(ctx, m, missing); err != nil {
			return err
		}
	}
	if c.cfg.Finisher == nil {
		return nil
	}
	done, err := c.finishByListing(ctx, m.RunID)
	if err == nil && done {
		log.Warn("overdue run finished")
	}
	return err
}

// finishByListing finishes a run from the results listing (work.Worker.TryFinishByListing).
func (c *Coordinator) finishByListing(ctx context.Context, run string) (bool, error) {
	done, err := c.cfg.Finisher.TryFinishByListing(ctx, run)
	if err != nil {
		return false, fmt.Errorf("finish %s by listing: %w", run, err)
	}
	return done, nil
}
