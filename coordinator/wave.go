package coordinator

import (
	"context"
	"time"

	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
)

// Refill polling: how soon a leader whose backlog is full first looks again, and the least it
// waits between two looks.
const refillPoll = 25 * time.Millisecond

// backlog counts what of the run's enqueued partitions is done and reports whether the backlog
// is full: the partitions enqueued but not done leave no room for the next plan batch
// (MaxBacklog − a batch; with nothing outstanding there is always room, so a bound smaller
// than a batch sends one batch at a time). One HEAD per done shard that can hold them, and
// counting stops once there is room. A run whose done layout this version does not know has no
// backlog bound (its records cannot be counted).
func (c *Coordinator) backlog(ctx context.Context, m ledger.Manifest) (done int64, full bool, err error) {
	next := m.Checkpoint.Next
	room := max(c.cfg.MaxBacklog-m.BatchSize, 0) // outstanding partitions that leave room for a batch
	if c.cfg.MaxBacklog <= 0 || next <= room || !m.DoneLayout.Known() {
		return 0, false, nil
	}
	done, err = ledger.CountDone(ctx, c.cfg.Store, m.RunID, m.DoneLayout, next, int64(next-room))
	if err != nil {
		return done, false, err
	}
	// Redeliveries can append twice, so done may overcount: the backlog is then a little
	// larger than the bound, never stuck.
	return done, int64(next)-done > int64(room), nil
}

// waitForWave ends the slice when the backlog is full: a check sends the next wave after
// WavePause. It reports whether it did.
func (c *Coordinator) waitForWave(ctx context.Context, lease election.Lease, m ledger.Manifest) (bool, error) {
	done, full, err := c.backlog(ctx, m)
	if err != nil || !full {
		return false, err
	}
	return true, c.leaveWave(ctx, lease, m, done)
}

// awaitRoom returns once the backlog has room for the next plan batch. While workers drain a
// full backlog the leader waits in its invocation, polling the done count at the pace the
// completions it sees promise (refillPoll to RefillWait), so a run larger than the backlog is
// fed as fast as it is worked. Should the backlog stay full past RefillWait, or past the
// slice's budget, it leaves the next wave to a check (leaveWave) and reports that the slice
// ended.
//
// drain carries the completion rate seen while waiting from one batch to the next within a
// slice, so each wait after the first starts at the time that rate needs (one poll, mostly).
func (c *Coordinator) awaitRoom(ctx context.Context, lease election.Lease, beat func(), m ledger.Manifest, sliceStart time.Time, drain *drainRate) (bool, error) {
	done, full, err := c.backlog(ctx, m)
	if err != nil || !full {
		return false, err
	}
	limit := c.cfg.RefillWait
	if budget := c.sliceBudget(ctx); budget > 0 {
		limit = min(limit, budget-time.Since(sliceStart))
	}
	over := func(done int64) int64 {
		return int64(m.Checkpoint.Next) - done - int64(max(c.cfg.MaxBacklog-m.BatchSize, 0))
	}
	var pace pacer
	first, firstDone := time.Now(), done
	wait := drain.wait(over(done), refillPoll)
	for waited := time.Duration(0); waited < limit; {
		wait = min(wait, limit-waited)
		if !pace.wait(ctx, wait, beat) {
			return true, context.Cause(ctx)
		}
		waited += wait
		if done, full, err = c.backlog(ctx, m); err != nil {
			return false, err
		}
		drain.observe(done-firstDone, time.Since(first))
		if !full {
			c.log(m.RunID, lease.Epoch).Debug("backlog has room: the next batch goes out", "next", m.Checkpoint.Next,
				"done", done, "waitedMs", time.Since(first).Milliseconds())
			return false, nil
		}
		wait = drain.wait(over(done), 2*wait)
	}
	return true, c.leaveWave(ctx, lease, m, done)
}

// drainRate is the rate, in partitions per second, at which workers were last seen to
// complete a run's partitions (0: none seen yet).
type drainRate float64

// observe records progress partitions completed in elapsed (nothing when none were).
func (r *drainRate) observe(progress int64, elapsed time.Duration) {
	if progress > 0 && elapsed > 0 {
		*r = drainRate(float64(progress) / elapsed.Seconds())
	}
}

// wait is how long the rate takes to complete over more partitions, at least refillPoll; else
// (no rate seen yet) backoff.
func (r drainRate) wait(over int64, backoff time.Duration) time.Duration {
	if r <= 0 {
		return backoff
	}
	return max(time.Duration(float64(over)/float64(r)*float64(time.Second)), refillPoll)
}

// leaveWave ends a slice whose backlog is full: it records the workers' progress (done, more
// than the manifest last saw, moves the run's hard deadline on: the run is not stuck) and
// sends the check that continues WavePause later.
func (c *Coordinator) leaveWave(ctx context.Context, lease election.Lease, m ledger.Manifest, done int64) error {
	if done > m.Checkpoint.Done {
		now := c.cfg.Now().UTC()
		if _, err := c.cfg.Store.UpdateManifest(ctx, m.RunID, ledger.NoFence, func(cur *ledger.Manifest) error {
			if cur.State.Final() || cur.PlanDone || cur.Checkpoint.Done >= done {
				return ledger.ErrNoChange
			}
			cur.Checkpoint.Done = done
			cur.Expires = now.Add(c.runTimeout(*cur))
			return nil
		}); err != nil {
			return err
		}
	}
	at := c.cfg.Now().Add(c.cfg.WavePause)
	if err := c.scheduleCheck(ctx, m.RunID, lease.Epoch, continueRound+m.Checkpoint.Batches, at); err != nil {
		return err
	}
	c.log(m.RunID, lease.Epoch).Info("backlog full; the next wave goes out later", "next", m.Checkpoint.Next,
		"maxBacklog", c.cfg.MaxBacklog, "at", at.UTC())
	return nil
}
