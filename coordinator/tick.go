package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/batonfn/baton/election"
	"github.com/batonfn/baton/ledger"
)

// Every schedule occurrence ends with exactly one record in the ledger: a run, or a skipped or
// missed record that says why. In Azure the timer fires each occurrence on ONE instance and
// never retries a reply of 2xx, so a Tick may not return success with nothing recorded:
//
//   - it tries the lease; the winner decides the occurrence (run it, or record it skipped);
//   - a Tick that finds the lease held records the occurrence in the schedule's inbox
//     (ledger.Pending) and waits up to TickWait for the lease (a crashed leader's lease lapses
//     within it). The holder decides every inbox entry before it lets go, so an entry written
//     while the lease stayed busy for the whole wait is always seen;
//   - a Tick that finds its occurrence's record (or run) already in the ledger is done (it
//     still fails when its own attempt failed, so the host logs the failure);
//   - a Tick that cannot reach storage for the whole wait fails (non-2xx), and the occurrence
//     is recorded as missed by the next lease holder, from the schedule cursor.
//
// Occurrences that never fired (the app was stopped, scaled to zero or broken across them)
// are found from the cursor by whoever holds the lease next and recorded as missed; with
// MisfireRunLatest the most recent one is run instead when the next has not come yet.

// Tick handles a timer invocation.
func (c *Coordinator) Tick(ctx context.Context, in TickInput) (Outcome, error) {
	occ, err := c.cfg.Schedule.Occurrence(in)
	if err != nil {
		return Outcome{}, err
	}
	spec := runSpec{id: TimerRunID(occ), trigger: ledger.TriggerTimer, occurrence: occ, job: c.cfg.Job, params: c.cfg.Params}
	c.cfg.Logger.Info("tick", "run", spec.id, "occurrence", occ, "pastDue", in.PastDue, "statusNext", in.Next,
		"instance", c.cfg.Identity.Instance)
	return c.tick(ctx, spec)
}

// tickRetry is the pause between lease attempts (and storage retries) of a waiting Tick.
const tickRetry = time.Second

// tick decides spec's occurrence, or leaves it recorded for the lease holder: see above.
func (c *Coordinator) tick(ctx context.Context, spec runSpec) (Outcome, error) {
	// The wait is real time (leases lapse in real time), whatever clock the ledger uses.
	until := time.Now().Add(c.cfg.TickWait)
	if d, ok := ctx.Deadline(); ok && d.Add(-2*tickRetry).Before(until) {
		until = d.Add(-2 * tickRetry)
	}
	log := c.cfg.Logger.With("run", spec.id, "instance", c.cfg.Identity.Instance)
	var (
		recorded bool
		held     Outcome
		lastErr  error
	)
	for {
		out, err := c.start(ctx, spec)
		switch {
		case err == nil && out.Status != StatusHeld:
			return out, nil
		case err == nil:
			held, lastErr = out, nil
			// The ledger already covers the occurrence: another instance decided it.
			if m, rerr := c.cfg.Store.ReadManifest(ctx, spec.id); rerr == nil {
				out.Status, out.State = StatusExisting, m.State
				return out, nil
			} else if !errors.Is(rerr, ledger.ErrNotFound) {
				lastErr = rerr
				break
			}
			if !recorded {
				p := ledger.Pending{Run: spec.id, Occurrence: spec.occurrence, FiredBy: c.cfg.Identity,
					FiredAt: c.cfg.Now().UTC(), BusyWith: out.Holder.String()}
				perr := c.ensureContainer(ctx)
				if perr == nil {
					perr = c.cfg.Store.PutPending(ctx, p)
				}
				if perr != nil {
					lastErr = perr
					break
				}
				recorded = true
				log.Info("lease busy; occurrence recorded in the schedule inbox", "holder", out.Holder.String(),
					"holderEpoch", out.HolderEpoch, "activeRun", out.ActiveRun, "wait", c.cfg.TickWait.String())
			}
		default:
			// A run that exists is accounted for (its check chain resumes it). When this
			// attempt led and failed, report the failure; when it never reached the lease,
			// another instance decided the occurrence and there is nothing to report. Without a
			// run, storage failed before the occurrence was recorded: retry.
			if m, rerr := c.cfg.Store.ReadManifest(ctx, spec.id); rerr == nil {
				if errors.Is(err, errNoLease) {
					return Outcome{Status: StatusExisting, Run: spec.id, State: m.State}, nil
				}
				return out, err
			}
			lastErr = err
			log.Warn("tick attempt failed before the occurrence was recorded; retrying within the wait", "err", err)
		}
		if ctx.Err() != nil || !time.Now().Add(tickRetry).Before(until) {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(tickRetry):
		}
	}
	if recorded {
		log.Info("lease still busy; the holder decides the occurrence from the inbox", "holder", held.Holder.String())
		held.Status = StatusDeferred
		return held, nil
	}
	if m, rerr := c.cfg.Store.ReadManifest(context.WithoutCancel(ctx), spec.id); rerr == nil {
		return Outcome{Status: StatusExisting, Run: spec.id, State: m.State}, nil
	}
	if lastErr == nil {
		lastErr = context.Cause(ctx)
	}
	return Outcome{}, fmt.Errorf("occurrence %s: not decided and not recorded (the next lease holder records it as missed): %w", spec.id, lastErr)
}

// housekeep runs under the lease after the holder's own task: decide the occurrences that
// fired while the lease was busy, then record the ones that never fired.
func (c *Coordinator) housekeep(ctx context.Context, lease election.Lease, beat func()) error {
	pending, err := c.cfg.Store.ListPending(ctx)
	if err != nil {
		return err
	}
	for _, p := range pending {
		beat()
		if err := c.decidePending(ctx, lease, beat, p); err != nil {
			return err
		}
	}
	return c.recordMissed(ctx, lease, beat)
}

// decidePending decides an occurrence from the inbox and removes the entry. One that a newer
// occurrence has overtaken is recorded as skipped: the schedule has moved on.
func (c *Coordinator) decidePending(ctx context.Context, lease election.Lease, beat func(), p ledger.Pending) error {
	spec := runSpec{id: p.Run, trigger: ledger.TriggerTimer, occurrence: p.Occurrence, job: c.cfg.Job, params: c.cfg.Params}
	if _, err := c.cfg.Store.ReadManifest(ctx, p.Run); errors.Is(err, ledger.ErrNotFound) {
		latest, err := c.cfg.Schedule.Prev(c.cfg.Now())
		if err != nil {
			return err
		}
		if p.Occurrence.Before(latest) {
			reason := fmt.Sprintf("fired on %s while the lease was held by %s, and occurrence %s came before the lease was free",
				p.FiredBy.Instance, p.BusyWith, latest.UTC().Format(time.RFC3339))
			if err := c.record(ctx, lease, spec, ledger.StateSkipped, reason); err != nil {
				return err
			}
		} else if _, err := c.decide(ctx, lease, beat, spec); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	return c.cfg.Store.DeletePending(ctx, p.Run)
}

// MaxMissedRecords bounds the missed records one lease holder writes; an outage longer than
// that many occurrences is summarised in the reason of the oldest record written.
const MaxMissedRecords = 1000

// missedGrace is how long after its time an occurrence may still be deciding on the instance
// it fired on (the Tick's wait for the lease, plus slack) before anyone calls it missed.
func (c *Coordinator) missedGrace() time.Duration {
	return c.cfg.TickWait + 2*checkMargin + MaxEarly
}

// recordMissed records, from the schedule cursor on, every occurrence older than the grace
// period that has no record, then moves the cursor. The first lease holder ever starts the
// cursor at the latest occurrence: a new deployment has no history to miss.
func (c *Coordinator) recordMissed(ctx context.Context, lease election.Lease, beat func()) error {
	sched := c.cfg.Schedule
	if sched.expr == "" {
		return nil
	}
	now := c.cfg.Now()
	bound, err := sched.Prev(now.Add(-c.missedGrace()))
	if err != nil {
		return err
	}
	cur, ok, err := c.cfg.Store.ReadCursor(ctx)
	if err != nil {
		return err
	}
	if !ok {
		// The first lease holder ever: nothing before now was this deployment's to run.
		first, err := sched.Prev(now)
		if err != nil {
			return err
		}
		return c.cfg.Store.AdvanceCursor(ctx, first)
	}
	if !bound.After(cur.Last) {
		return nil
	}
	var occs []time.Time
	dropped := 0
	for o, err := sched.Next(cur.Last); !o.After(bound); o, err = sched.Next(o) {
		if err != nil {
			return err
		}
		if len(occs) == MaxMissedRecords {
			occs, dropped = occs[1:], dropped+1
		}
		occs = append(occs, o)
	}
	var missed []time.Time
	for _, o := range occs {
		beat()
		if _, err := c.cfg.Store.ReadManifest(ctx, TimerRunID(o)); errors.Is(err, ledger.ErrNotFound) {
			missed = append(missed, o)
		} else if err != nil {
			return err
		}
	}
	for i, o := range missed {
		spec := runSpec{id: TimerRunID(o), trigger: ledger.TriggerTimer, occurrence: o, job: c.cfg.Job, params: c.cfg.Params}
		latest := i == len(missed)-1
		if latest && c.cfg.Misfire == MisfireRunLatest && c.runLate(o, now) {
			c.log(spec.id, lease.Epoch).Warn("occurrence never fired; running it late (misfire policy: run-latest)", "occurrence", o)
			if _, err := c.decide(ctx, lease, beat, spec); err != nil {
				return err
			}
			continue
		}
		reason := fmt.Sprintf("no instance decided this occurrence within %s of its time (the app was stopped, scaled to zero or failing)", c.missedGrace())
		if i == 0 && dropped > 0 {
			reason += fmt.Sprintf("; %d earlier occurrences since %s were missed too and are not recorded one by one",
				dropped, cur.Last.UTC().Format(time.RFC3339))
		}
		if err := c.record(ctx, lease, spec, ledger.StateMissed, reason); err != nil {
			return err
		}
	}
	return c.cfg.Store.AdvanceCursor(ctx, bound)
}

// runLate reports whether MisfireRunLatest still starts missed occurrence o at now: the next
// occurrence has not come yet and o is within the starting deadline.
func (c *Coordinator) runLate(o, now time.Time) bool {
	next, err := c.cfg.Schedule.Next(o)
	return err == nil && next.After(now) && now.Sub(o) <= c.cfg.StartingDeadline
}
