package coordinator

import (
	"context"
	"math"
	"time"

	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/work"
)

// Refill polling: how soon a leader whose backlog is full first looks again, and the least it
// waits between two looks.
const refillPoll = 25 * time.Millisecond

// room is how many partitions may be outstanding (enqueued, not done) for the next plan batch
// to fit under the run's backlog bound; with nothing outstanding there is always room, so a
// bound smaller than a batch sends one batch at a time.
func (c *Coordinator) room(m ledger.Manifest) int { return max(c.maxBacklog(m)-m.BatchSize, 0) }

// maxBacklog is the run's backlog bound: MaxBacklog, raised for a job under a limit to two plan
// batches (the limit paces its work, so a batch queued behind the running one closes the gap
// while the planner sees that one done and sends the next, and the two do not finish in step),
// and under an in-flight limit to twice the partitions the limit keeps outstanding at once. A
// bundle holds all of its partitions until its last is done but runs at most
// BundleConcurrency of them at once, so MaxInFlight takes MaxInFlight/min(bundle,
// BundleConcurrency) bundles' partitions to fill; the second half of the bound is the next
// bundles, queued for the slots the running ones give back. Unbounded (0) stays unbounded.
func (c *Coordinator) maxBacklog(m ledger.Manifest) int {
	n := c.cfg.MaxBacklog
	spec, ok := c.cfg.Jobs.Limit(m.Job)
	if n <= 0 || !ok {
		return n
	}
	n = max(n, 2*m.BatchSize)
	if spec.MaxInFlight <= 0 {
		return n
	}
	bundle := c.bundleSize(m, m.BatchSize)
	slots := min(bundle, work.BundleConcurrency)
	running := (spec.MaxInFlight + slots - 1) / slots * bundle
	return max(n, 2*running)
}

// bounded reports whether the backlog bound can hold the next batch back: a bound is set, more
// than room is enqueued, the run's done layout is one this version can count (a run whose
// layout it does not know has no backlog bound), and the bound was not lifted (leaveWave).
func (c *Coordinator) bounded(m ledger.Manifest) bool {
	return c.maxBacklog(m) > 0 && m.Checkpoint.Next > c.room(m) && m.DoneLayout.Known() && !m.Checkpoint.Unbounded
}

// backlog counts what of the run's enqueued partitions is done and reports whether the backlog
// is full: the partitions outstanding leave no room for the next plan batch. One HEAD per done
// shard that can hold them and that counts (the slice's) has not yet seen hold all it records;
// counting stops once there is room.
func (c *Coordinator) backlog(ctx context.Context, m ledger.Manifest, counts *ledger.DoneCounts) (done int64, full bool, err error) {
	if !c.bounded(m) {
		return 0, false, nil
	}
	next, room := m.Checkpoint.Next, c.room(m)
	done, err = counts.Count(ctx, c.cfg.Store, m.RunID, m.DoneLayout, next, int64(next-room))
	if err != nil {
		return done, false, err
	}
	// Redeliveries can append twice, so done may overcount: the backlog is then a little
	// larger than the bound, never stuck.
	return done, int64(next)-done > int64(room), nil
}

// sentinel reads the one done shard that records the last partition that must be done for the
// next batch to fit, and returns how many of that shard's partitions up to it are not: while
// any are, the backlog is taken as full (work completes roughly in the order it was sent), at
// one HEAD. 0 says there is likely room, which the full count (backlog) decides.
func (c *Coordinator) sentinel(ctx context.Context, m ledger.Manifest, counts *ledger.DoneCounts) (int64, error) {
	target := m.Checkpoint.Next - c.room(m) // partitions [0, target) done leave room
	lay := m.DoneLayout
	s := lay.Shard(target - 1)
	n, err := c.cfg.Store.DoneCount(ctx, m.RunID, s)
	if err != nil {
		return 0, err
	}
	counts.Saw(s, n) // the count that follows need not read it again
	return max(lay.Expected(target, s)-n, 0), nil
}

// waitForWave ends the slice when the backlog is full: a check sends the next wave after
// WavePause. It reports whether it did.
func (c *Coordinator) waitForWave(ctx context.Context, lease election.Lease, m *ledger.Manifest, counts *ledger.DoneCounts) (bool, error) {
	done, full, err := c.backlog(ctx, *m, counts)
	if err != nil || !full {
		return false, err
	}
	return c.leaveWave(ctx, lease, m, done, 0)
}

// awaitRoom returns once the backlog has room for the next plan batch. While workers drain a
// full backlog the leader waits in its invocation, looking at the sentinel shard (one HEAD)
// at the pace the completions it has seen promise (refillPoll to RefillWait), and counts the
// backlog when the sentinel says there is likely room: a run larger than the backlog is fed as
// fast as it is worked, at about a count and a few HEADs a batch. A count every RefillWait
// tells whether the backlog drains (more done than the last count, or than the run's
// checkpoint recorded); draining, the leader waits on, as long as the slice's budget lasts, so
// a slowly drained backlog (a limited job's) is refilled as it drains. Once no count has seen
// it drain for its patience (RefillWait, or twice the longest quiet spell between completions
// seen: this slice's, or the one the last leader left on), it leaves the next wave to a check
// (leaveWave) and reports that the slice ended. drain carries the completion rate and the
// quiet spells from batch to batch.
func (c *Coordinator) awaitRoom(ctx context.Context, lease election.Lease, beat func(), m ledger.Manifest, sliceStart time.Time, drain *drainRate) (bool, error) {
	if !c.bounded(m) {
		return false, nil
	}
	limit := time.Duration(math.MaxInt64) // the slice's budget left
	if budget := c.sliceBudget(ctx); budget > 0 {
		limit = budget - time.Since(sliceStart)
	}
	start := c.cfg.Now()
	// moved: when a count last saw the backlog drain; counted: when the last count was.
	var wait, waited, moved, counted time.Duration
	drained := false          // a count in this call saw the backlog drain
	last := m.Checkpoint.Done // the last count's done
	var lastShort int64       // what the sentinel's last look found left to complete (-1: none)
	// count counts the backlog: room (true), or what is left to complete before there is.
	count := func() (bool, int64, error) {
		done, full, err := c.backlog(ctx, m, &drain.counts)
		if err != nil || !full {
			return !full, 0, err
		}
		drain.observe(done, c.cfg.Now())
		counted = waited
		if done > last {
			if drained { // the spell since the last drain this call saw (not since the checkpoint)
				drain.quiet = max(drain.quiet, waited-moved)
			}
			moved, last, drained = waited, done, true
		}
		return false, int64(m.Checkpoint.Next) - done - int64(c.room(m)), nil
	}
	// quiet: no count has seen the backlog drain for longer than its completions' quiet
	// spells (the leader leaves).
	quiet := func() bool { return moved != waited && waited-moved >= drain.patience(c.cfg.RefillWait) }
	room := func() (bool, error) {
		if waited > 0 {
			c.log(m.RunID, lease.Epoch).Debug("backlog has room: the next batch goes out", "next", m.Checkpoint.Next,
				"waitedMs", c.cfg.Now().Sub(start).Milliseconds())
		}
		return false, nil
	}
waiting:
	for first := true; ; first = false {
		if !first {
			if waited >= limit || c.cfg.RefillWait < 0 {
				break
			}
			if waited-max(moved, counted) >= c.cfg.RefillWait {
				ok, over, err := count()
				switch {
				case err != nil:
					return false, err
				case ok:
					return room()
				case quiet():
					break waiting
				}
				wait = drain.wait(over, max(2*wait, refillPoll))
			}
			// At least four looks a RefillWait: completions may come in waves the rate
			// does not foresee.
			wait = min(wait, limit-waited, c.cfg.RefillWait-(waited-max(moved, counted)), max(c.cfg.RefillWait/4, refillPoll))
			if !c.sleep(ctx, wait, beat) {
				return true, context.Cause(ctx)
			}
			waited += wait
		}
		backoff := max(2*wait, refillPoll)
		var (
			short int64
			err   error
		)
		if lastShort >= 0 { // once its shard had all the batch needs, only counts tell
			if short, err = c.sentinel(ctx, m, &drain.counts); err != nil {
				return false, err
			}
		}
		if short > 0 {
			// At least short partitions are to complete: the least time they take, at one
			// HEAD a look, however much more the other shards have to do. None of them done
			// since the last look (work that completes in bursts), the looks back off: the
			// shard is not polled faster than its partitions complete.
			wait = drain.wait(short, backoff)
			if short == lastShort {
				wait = max(wait, backoff)
			}
			lastShort = short
			continue
		}
		lastShort = -1
		ok, over, err := count()
		switch {
		case err != nil:
			return false, err
		case ok:
			return room()
		case quiet():
			break waiting
		}
		wait = drain.wait(over, backoff)
	}
	done, full, err := c.backlog(ctx, m, &drain.counts) // the progress to record, if it is still full
	if err != nil || !full {
		return false, err
	}
	return c.leaveWave(ctx, lease, &m, done, waited-moved)
}

// sleep waits d (Config.Sleep, else a timer), reporting progress to the stall watchdog before
// and after; false if ctx ended first.
func (c *Coordinator) sleep(ctx context.Context, d time.Duration, beat func()) bool {
	if c.cfg.Sleep == nil {
		var p pacer
		return p.wait(ctx, d, beat)
	}
	beat()
	if !c.cfg.Sleep(ctx, d) {
		return false
	}
	beat()
	return true
}

// drainRate is the rate at which workers complete a run's partitions, from the counts of its
// backlog, the longest quiet spell between two counts that saw them drain, and the done shards'
// counts read so far (a count of a large run reads only the shards still filling).
type drainRate struct {
	perSec float64   // 0: not known yet
	at     time.Time // the first count
	done   int64     // what it found done
	quiet  time.Duration
	counts ledger.DoneCounts
}

// patience is how long a full backlog may show no completion before the leader leaves its
// wave: twice the longest quiet spell seen, at least refillWait.
func (r *drainRate) patience(refillWait time.Duration) time.Duration {
	return max(refillWait, 2*r.quiet)
}

// observe records a count: done partitions at at. The rate is the mean since the slice's first
// count: work that completes in bursts would look far faster between two counts around one.
func (r *drainRate) observe(done int64, at time.Time) {
	if r.at.IsZero() {
		r.at, r.done = at, done
		return
	}
	if done > r.done && at.After(r.at) {
		r.perSec = float64(done-r.done) / at.Sub(r.at).Seconds()
	}
}

// wait is how long the rate takes to complete over more partitions, at least refillPoll and
// the time lookParts take (no shard is looked at more often than that); else (no rate known
// yet) backoff.
func (r *drainRate) wait(over int64, backoff time.Duration) time.Duration {
	if r.perSec <= 0 {
		return backoff
	}
	return max(time.Duration(float64(max(over, lookParts))/r.perSec*float64(time.Second)), refillPoll)
}

// lookParts is the fewest partitions a leader waiting for room expects to complete between two
// looks: a shard it looks at takes under one call per 50 partitions (and room comes while the
// backlog still holds the rest of the bound, so a look later costs no work).
const lookParts = 100

// stallAfter is how long a run's full backlog may go without any completion before the bound
// is lifted: a quarter of its run timeout.
func (c *Coordinator) stallAfter(m ledger.Manifest) time.Duration { return c.runTimeout(m) / 4 }

// leaveWave ends a slice whose backlog is full and reports that it did: it records the
// workers' progress (done, more than the manifest last saw, moves the run's hard deadline on:
// the run is not stuck) and sends the check that continues WavePause later. A backlog that has
// not drained at all for stallAfter (no checkpoint and no completion recorded since) is
// waiting on partitions that will not complete by themselves, a lost message say: the bound
// is lifted for the run (Checkpoint.Unbounded), the slice goes on with the rest of the plan,
// and the run's re-enqueue rounds bring back what never completed, as for any run.
//
// quiet, how long the backlog had shown no completion (0: not known), is recorded for the
// next leader's patience (Checkpoint.Quiet). m is the caller's copy of the manifest; a
// lifted bound is noted in it.
func (c *Coordinator) leaveWave(ctx context.Context, lease election.Lease, m *ledger.Manifest, done int64, quiet time.Duration) (bool, error) {
	log := c.log(m.RunID, lease.Epoch)
	now := c.cfg.Now().UTC()
	lifted, unbounded := false, false
	if _, err := c.cfg.Store.UpdateManifest(ctx, m.RunID, lease.Epoch, func(cur *ledger.Manifest) error {
		if unbounded = cur.Checkpoint.Unbounded; unbounded || cur.State.Final() || cur.PlanDone {
			return ledger.ErrNoChange // lifted before (m is older than that), or over
		}
		rt := c.runTimeout(*cur)
		switch {
		case done > cur.Checkpoint.Done:
			cur.Checkpoint.Done = done
			cur.Expires = now.Add(rt)
		case now.Sub(cur.Expires.Add(-rt)) >= c.stallAfter(*cur):
			cur.Checkpoint.Unbounded, lifted = true, true
			cur.Expires = now.Add(rt)
		case quiet > cur.Checkpoint.Quiet: // no progress: only the quiet spell to record
		default:
			return ledger.ErrNoChange
		}
		if quiet > 0 {
			cur.Checkpoint.Quiet = quiet
		}
		return nil
	}); err != nil {
		return false, err
	}
	if unbounded || lifted {
		m.Checkpoint.Unbounded = true
	}
	if unbounded {
		return false, nil
	}
	if lifted {
		log.Warn("backlog has not drained; the rest of the run goes out regardless (its re-enqueue rounds bring back what never completes)",
			"next", m.Checkpoint.Next, "done", done, "maxBacklog", c.maxBacklog(*m), "stalledFor", c.stallAfter(*m).String())
		return false, nil
	}
	at := c.cfg.Now().Add(c.cfg.WavePause)
	if err := c.scheduleCheck(ctx, m.RunID, lease.Epoch, continueRound+m.Checkpoint.Batches, at); err != nil {
		return false, err
	}
	log.Info("backlog full; the next wave goes out later", "next", m.Checkpoint.Next,
		"maxBacklog", c.maxBacklog(*m), "at", at.UTC())
	return true, nil
}
