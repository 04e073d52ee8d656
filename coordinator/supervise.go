package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/lib/memo"
	"github.com/batonfn/baton/work"
)

// Supervision is level-triggered: each heartbeat looks at every run that is not final (the
// ledger's index of active runs) and drives whichever should have moved by now, so a lost
// control message costs a heartbeat or two, never a run:
//
//   - a run no planner has taken one check delay after its start is planned by the heartbeat;
//   - a planning run whose manifest has not moved for a check delay is taken over (the
//     planner died, or the message continuing its slice was lost);
//   - a planned run past its deadline is finished, re-enqueued or timed out, as a check would;
//   - a run past its hard deadline (Expires) is timed out;
//   - an index entry whose run is final, or was never created, is removed.
//
// The check messages stay the fast path: each heartbeat-driven step schedules the next check
// as a check would, and a planning slice driven by a heartbeat is short (heartbeatSlice), so
// the heartbeat decides every schedule first and stays short itself (driveBudget).

// boundMemo remembers, per process, when the heartbeat must read a run again (nextLook), so a
// pass costs one listing of the index plus a read per run that is due.
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
	return !ok || !now.Before(bound)
}

// seen remembers run's final bound as read.
func (b boundMemo) seen(run string, bound time.Time) { b.bounds.Put(run, bound) }

// final remembers run as final.
func (b boundMemo) final(run string) { b.seen(run, finalBound) }

// checkDelay is how long after a leader's last sign of life a check can take its lease over.
func (c *Coordinator) checkDelay() time.Duration { return c.leaseDur + checkMargin }

// planExpiry is the hard deadline of m, a planned run whose planning ended at enqueued.
func (c *Coordinator) planExpiry(m ledger.Manifest, enqueued time.Time) time.Time {
	return enqueued.Add(c.runTimeout(m) + time.Duration(c.cfg.CheckRounds)*c.retryInterval(m) + c.checkDelay())
}

// runTimeout is m's run timeout: the one recorded at its creation, else (a run recorded
// before runs kept their own) the app's.
func (c *Coordinator) runTimeout(m ledger.Manifest) time.Duration {
	if m.RunTimeout > 0 {
		return m.RunTimeout
	}
	return c.cfg.RunTimeout
}

// jobRunTimeout is the run timeout a new run of job gets: the job's own
// (work.Registry.RunTimeout), else the app's.
func (c *Coordinator) jobRunTimeout(job string) time.Duration {
	if d := c.cfg.Jobs.RunTimeout(job); d > 0 {
		return d
	}
	return c.cfg.RunTimeout
}

// expires is m's hard deadline (computed for manifests written before it was stored).
func (c *Coordinator) expires(m ledger.Manifest) time.Time {
	if !m.Expires.IsZero() {
		return m.Expires
	}
	if m.PlanDone {
		return c.planExpiry(m, m.Enqueued)
	}
	return m.Created.Add(c.runTimeout(m))
}

// FinalBound is the documented bound: a run is final by this time while check messages flow,
// and one heartbeat later when they are lost. It is the hard deadline plus one check delay
// plus one lease duration (a dead aggregator's report claim is taken over once it has gone
// that long unrenewed); for a stopped run, its stop grace after the stop, plus the same.
func (c *Coordinator) FinalBound(m ledger.Manifest) time.Time {
	if m.Stop != nil {
		return m.Stop.At.Add(c.StopGrace() + c.checkDelay() + c.leaseDur)
	}
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
			c.runTimeout(m), m.Checkpoint.Next, c.expires(m).UTC().Format(time.RFC3339))
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
			if cur, rerr := c.cfg.Store.ReadManifest(ctx, m.RunID); rerr == nil && cur.State == ledger.StateTimedOut && cur.Epoch == lease.Epoch {
				c.finished(ctx, cur)
			}
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

// heartbeatSlice bounds a planning slice the heartbeat drives itself: the heartbeat stays
// short, and the slice's end sends the check that continues it (or the next heartbeat does).
const heartbeatSlice = 5 * time.Second

// driveBudget bounds the time one heartbeat spends driving runs; what is left waits for the
// next heartbeat.
func (c *Coordinator) driveBudget() time.Duration {
	return max(c.cfg.HeartbeatPeriod/4, heartbeatSlice)
}

// nextLook is when the heartbeat should look at m again, the moment by which m should have
// moved on its own (zero: never, m is final).
func (c *Coordinator) nextLook(m ledger.Manifest) time.Time {
	switch {
	case m.State.Final():
		return time.Time{}
	case m.Stop != nil:
		return m.Stop.At.Add(c.StopGrace())
	case m.State == ledger.StateQueued:
		return c.cfg.Now().Add(c.checkDelay()) // its schedule's heartbeat starts it
	case unstarted(m):
		start := m.Created
		if !m.Expires.IsZero() {
			start = m.Expires.Add(-c.runTimeout(m)) // the start, its jitter included
		}
		return start.Add(c.checkDelay())
	case !m.PlanDone:
		return minTime(m.Updated.Add(c.checkDelay()), c.expires(m))
	}
	return minTime(m.Deadline, c.expires(m))
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// maxBackfillReads bounds the records a heartbeat reads to fill the index from runs recorded
// before it existed.
const maxBackfillReads = 1000

// dueRuns lists the runs that are not final and should have moved by now, repairing the
// index on the way (entries of final runs, and of runs never created), oldest bound first.
func (c *Coordinator) dueRuns(ctx context.Context) ([]ledger.Manifest, error) {
	now := c.cfg.Now()
	if err := c.backfill(ctx); err != nil {
		c.cfg.Logger.Warn("supervision: filling the index of active runs from older runs", "instance", c.cfg.Identity.Instance, "err", err)
	}
	var entries []ledger.ActiveRun
	if err := c.cfg.Store.ListActive(ctx, func(a ledger.ActiveRun) bool {
		if c.bounds.due(a.Run, now) {
			entries = append(entries, a)
		}
		return true
	}); err != nil {
		return nil, fmt.Errorf("list active runs: %w", err)
	}
	var due []ledger.Manifest
	var errs []error
	for _, a := range entries {
		m, err := c.cfg.Store.ReadManifest(ctx, a.Run)
		switch {
		case errors.Is(err, ledger.ErrNotFound):
			// Its record was never created (the call failed after the entry): drop the
			// entry once no creation can still be under way.
			if now.Sub(a.Created) > c.checkDelay() {
				errs = append(errs, c.cfg.Store.RemoveActive(ctx, a.Run))
			}
			continue
		case err != nil:
			errs = append(errs, err)
			continue
		case m.State.Final():
			c.bounds.final(m.RunID)
			errs = append(errs, c.cfg.Store.RemoveActive(ctx, m.RunID))
			continue
		}
		next := c.nextLook(m)
		c.bounds.seen(m.RunID, next)
		if !now.Before(next) {
			due = append(due, m)
		}
	}
	slices.SortFunc(due, func(a, b ledger.Manifest) int { return c.nextLook(a).Compare(c.nextLook(b)) })
	return due, errors.Join(errs...)
}

// backfill adds to the index, a bounded number of reads per heartbeat, the runs not final that
// a ledger recorded before it had an index (an upgrade with runs in flight).
func (c *Coordinator) backfill(ctx context.Context) error {
	if c.backfilled.Load() {
		return nil
	}
	b, err := c.cfg.Store.ReadBackfill(ctx)
	if err != nil || b.Done {
		c.backfilled.Store(err == nil)
		return err
	}
	var runs []string
	more := false
	if err := c.cfg.Store.ListRuns(ctx, func(run string) bool {
		if run <= b.After {
			return true
		}
		if len(runs) == maxBackfillReads {
			more = true
			return false
		}
		runs = append(runs, run)
		return true
	}); err != nil {
		return err
	}
	var errs []error
	for _, run := range runs {
		m, err := c.cfg.Store.ReadManifest(ctx, run)
		switch {
		case errors.Is(err, ledger.ErrNotFound):
		case err != nil:
			errs = append(errs, err)
		case !m.State.Final():
			errs = append(errs, c.cfg.Store.AddActive(ctx, ledger.ActiveOf(&m)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err // the same runs are read again next time
	}
	next := ledger.Backfill{After: b.After, Done: !more}
	if len(runs) > 0 {
		next.After = runs[len(runs)-1]
	}
	if err := c.cfg.Store.WriteBackfill(ctx, next); err != nil {
		return err
	}
	if next.Done {
		c.cfg.Logger.Info("supervision: every run recorded before the index of active runs is in it", "instance", c.cfg.Identity.Instance)
		c.backfilled.Store(true)
	}
	return nil
}

// drive moves each due run on as its check would, in the heartbeat's invocation and without a
// message, until the heartbeat's budget is spent; what is left is due at the next heartbeat.
func (c *Coordinator) drive(ctx context.Context, due []ledger.Manifest) (driven int, err error) {
	if len(due) == 0 {
		return 0, nil
	}
	ctx = withSliceBudget(ctx, heartbeatSlice)
	deadline := c.cfg.Now().Add(c.driveBudget())
	var errs []error
	for i, m := range due {
		if i > 0 && !c.cfg.Now().Before(deadline) {
			c.cfg.Logger.Warn("supervision: the heartbeat's budget is spent; the next heartbeat drives the rest", "left", len(due)-i,
				"instance", c.cfg.Identity.Instance)
			break
		}
		c.log(m.RunID, m.Epoch).Warn("supervision: the run has not moved by its bound; the heartbeat drives it", "state", m.State,
			"bound", c.nextLook(m).UTC())
		env := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindCheck, Run: m.RunID, Epoch: m.Epoch, Round: superviseRound}
		driven++
		if err := c.check(ctx, env, work.Delivery{Count: 1, Try: 1}); err != nil {
			errs = append(errs, fmt.Errorf("supervise %s: %w", m.RunID, err))
		}
		c.bounds.seen(m.RunID, time.Time{}) // read again next time
	}
	return driven, errors.Join(errs...)
}

// superviseRound numbers the checks a heartbeat drives itself, apart from the chain's and the
// planning slices'.
const superviseRound = 2_000_000_000

// sliceBudgetKey carries a shorter planning slice for runs the heartbeat drives.
type sliceBudgetKey struct{}

func withSliceBudget(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, sliceBudgetKey{}, d)
}

// sliceBudget is how long this invocation may plan a run before it hands the rest on.
func (c *Coordinator) sliceBudget(ctx context.Context) time.Duration {
	if d, ok := ctx.Value(sliceBudgetKey{}).(time.Duration); ok && (c.cfg.SliceBudget == 0 || d < c.cfg.SliceBudget) {
		return d
	}
	return c.cfg.SliceBudget
}
