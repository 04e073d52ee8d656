package coordinator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// Retention: the heartbeat deletes final runs older than their state's retention
// (Config.Retention, BATON_RETENTION), with everything recorded under them. It is a bounded
// sweep under the scheduler lease, after the schedules and the supervision:
//
//   - a pass lists the ledger's runs in name order (a schedule's occurrences oldest first),
//     one page of at most RetentionPage IDs a heartbeat, resuming from the listing's token
//     kept in the ledger (ledger.Sweep), so it never relists from the start; runs created
//     behind the token wait for the next pass. A pass starts at most once per SweepInterval;
//   - each run of the page is read once per process (its deletion time is remembered), except
//     occurrences whose ID says they are younger than the shortest retention;
//   - a run is deleted when it is final, its end (Finished, else Updated) is older than its
//     state's retention, and it is neither its schedule's latest run nor its buffered one;
//   - before deleting a schedule's occurrences, the sweep moves the schedule's Retained
//     horizon past them, so the dashboard's strip shows "deleted by retention", not a gap;
//   - a run is deleted manifest last (ledger.Store.DeleteRun): one cut short is found by the
//     next pass and finished. A page with an error, or one the heartbeat's budget cut short, is
//     listed again at the next heartbeat.
//
// The index of active runs holds only runs that are not final, which the sweep never deletes.

// DefaultRetentionPage bounds the runs one heartbeat examines, and so deletes.
const DefaultRetentionPage = 100

// retainMemoMax bounds the runs whose deletion time the sweep remembers; past it the memo
// starts over.
const retainMemoMax = 65536

// SweepInterval is the least time between the starts of two retention passes.
const SweepInterval = 24 * time.Hour

// RetentionOutcome reports a heartbeat's retention sweep.
type RetentionOutcome struct {
	// Examined counts the runs listed; Deleted those deleted.
	Examined, Deleted int
	// PassEnded is true when the heartbeat listed the pass's last page.
	PassEnded bool
}

// retentionOn reports whether any final state is ever deleted.
func (c *Coordinator) retentionOn() bool {
	for _, d := range c.cfg.Retention {
		if d > 0 {
			return true
		}
	}
	return false
}

// shortestRetention is the least retention of a state that has one.
func (c *Coordinator) shortestRetention() time.Duration {
	var least time.Duration
	for _, d := range c.cfg.Retention {
		if d > 0 && (least == 0 || d < least) {
			least = d
		}
	}
	return least
}

// deleteAt is when m may be deleted (zero: never; m is not final or its state is kept).
func (c *Coordinator) deleteAt(m ledger.Manifest) time.Time {
	d := c.cfg.Retention[m.State]
	if !m.State.Final() || d <= 0 {
		return time.Time{}
	}
	end := m.Finished
	if end.IsZero() {
		end = m.Updated
	}
	return end.Add(d)
}

// keepForever marks, in the retention memo, a final run whose state is never deleted.
var keepForever = finalBound

// sweep runs the heartbeat's share of the retention pass; budget bounds the time it spends
// deleting, and beat reports progress to the lease's stall watchdog after each run.
func (c *Coordinator) sweep(ctx context.Context, budget time.Duration, beat func()) (RetentionOutcome, error) {
	var out RetentionOutcome
	now := c.cfg.Now()
	if !c.retentionOn() || now.UnixNano() < c.sweepRest.Load() {
		return out, nil
	}
	sw, err := c.cfg.Store.ReadSweep(ctx)
	if err != nil {
		return out, err
	}
	if !sw.Active {
		if next := sw.Started.Add(SweepInterval); now.Before(next) {
			c.sweepRest.Store(next.UnixNano())
			return out, nil
		}
		sw = ledger.Sweep{Active: true, Started: now.UTC()}
		c.cfg.Logger.Info("retention: a pass over the ledger's runs starts", "instance", c.cfg.Identity.Instance)
	}
	runs, next, err := c.cfg.Store.ListRunPage(ctx, sw.Token, c.retentionPage())
	if err != nil {
		return out, fmt.Errorf("retention: list runs: %w", err)
	}
	out.Examined = len(runs)
	doomed, err := c.doomed(ctx, runs, now)
	complete := err == nil
	deadline := c.cfg.Now().Add(budget)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	if len(doomed) > 0 {
		if err := c.markRetained(ctx, doomed); err != nil {
			errs = append(errs, err)
			doomed, complete = nil, false // no deletion the strips would show as gaps
		}
	}
	for i, m := range doomed {
		if i > 0 && !c.cfg.Now().Before(deadline) {
			c.cfg.Logger.Warn("retention: the heartbeat's budget is spent; the next heartbeat goes on", "left", len(doomed)-i,
				"instance", c.cfg.Identity.Instance)
			complete = false
			break
		}
		beat()
		if err := c.cfg.Store.DeleteRun(ctx, m.RunID); err != nil {
			c.log(m.RunID, m.Epoch).Warn("retention: the run could not be deleted; the next heartbeat tries again", "err", err)
			errs, complete = append(errs, fmt.Errorf("retention: delete %s: %w", m.RunID, err)), false
			continue
		}
		c.retain.Delete(m.RunID)
		out.Deleted++
		c.log(m.RunID, m.Epoch).Info("retention: run deleted", "state", m.State, "ended", endOf(m).UTC(),
			"retention", c.cfg.Retention[m.State].String())
	}
	if complete {
		sw.Token = next
		if next == "" {
			sw.Active, out.PassEnded = false, true
			c.sweepRest.Store(sw.Started.Add(SweepInterval).UnixNano())
			c.cfg.Logger.Info("retention: the pass over the ledger's runs ended", "started", sw.Started,
				"instance", c.cfg.Identity.Instance)
		}
	}
	if err := c.cfg.Store.WriteSweep(ctx, sw); err != nil {
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}

func (c *Coordinator) retentionPage() int {
	if c.cfg.RetentionPage > 0 {
		return c.cfg.RetentionPage
	}
	return DefaultRetentionPage
}

func endOf(m ledger.Manifest) time.Time {
	if !m.Finished.IsZero() {
		return m.Finished
	}
	return m.Updated
}

// doomed returns the runs of the page to delete now, in page order: each run read unless the
// memo or its ID says it is not due, and its schedule's latest and buffered runs spared.
func (c *Coordinator) doomed(ctx context.Context, runs []string, now time.Time) ([]ledger.Manifest, error) {
	young := now.Add(-c.shortestRetention())
	var due []ledger.Manifest
	var errs []error
	for _, run := range runs {
		if at, ok := c.retain.Get(run); ok && now.Before(at) {
			continue
		}
		if name, ok := ledger.ParseRunID(run); ok && !name.Occurrence.IsZero() && name.Occurrence.After(young) {
			continue // ended after its occurrence, so younger than every retention
		}
		m, err := c.cfg.Store.ReadManifest(ctx, run)
		switch {
		case errors.Is(err, ledger.ErrNotFound):
			continue // a run with records but no manifest is no run of the ledger's; never deleted
		case err != nil:
			errs = append(errs, fmt.Errorf("retention: %w", err))
			continue
		}
		at := c.deleteAt(m)
		switch {
		case !m.State.Final():
			continue // read again next pass
		case at.IsZero():
			c.retain.Put(run, keepForever)
			continue
		case now.Before(at):
			c.retain.Put(run, at)
			continue
		}
		due = append(due, m)
	}
	// A schedule's latest run and its buffered one stay, however old.
	states := map[string]ledger.ScheduleState{}
	kept := due[:0]
	for _, m := range due {
		schedule := scheduleOf(m)
		if schedule != "" {
			st, ok := states[schedule]
			if !ok {
				var err error
				st, err = c.cfg.Store.ReadSchedule(ctx, schedule)
				if err != nil && !errors.Is(err, ledger.ErrNotFound) {
					errs = append(errs, fmt.Errorf("retention: %w", err))
					continue
				}
				states[schedule] = st
			}
			if m.RunID == st.Latest || m.RunID == st.Buffered {
				continue // read again next pass: it stays only while it is the latest
			}
		}
		kept = append(kept, m)
	}
	return kept, errors.Join(errs...)
}

// scheduleOf names m's schedule ("" for an ad-hoc run); a run recorded before runs named
// their schedule has it in its ID.
func scheduleOf(m ledger.Manifest) string {
	if m.Schedule != "" {
		return m.Schedule
	}
	if name, ok := ledger.ParseRunID(m.RunID); ok {
		return name.Schedule
	}
	return ""
}

// markRetained moves the Retained horizon of each schedule with an occurrence among doomed to
// its latest such occurrence (and RetainedFrom back to its oldest), before any is deleted: one
// state update per schedule.
func (c *Coordinator) markRetained(ctx context.Context, doomed []ledger.Manifest) error {
	horizon, oldest := map[string]time.Time{}, map[string]time.Time{}
	for _, m := range doomed {
		occ := m.Occurrence
		if occ.IsZero() {
			if name, ok := ledger.ParseRunID(m.RunID); ok {
				occ = name.Occurrence
			}
		}
		s := scheduleOf(m)
		if s == "" || occ.IsZero() {
			continue
		}
		if occ.After(horizon[s]) {
			horizon[s] = occ
		}
		if o, ok := oldest[s]; !ok || occ.Before(o) {
			oldest[s] = occ
		}
	}
	var errs []error
	for _, s := range slices.Sorted(maps.Keys(horizon)) {
		h, from := horizon[s].UTC(), oldest[s].UTC()
		_, err := c.cfg.Store.UpdateSchedule(ctx, s, func(st *ledger.ScheduleState) error {
			older := st.RetainedFrom.IsZero() || from.Before(st.RetainedFrom)
			if !h.After(st.Retained) && !older {
				return ledger.ErrNoChange
			}
			if h.After(st.Retained) {
				st.Retained = h
			}
			if older {
				st.RetainedFrom = from
			}
			return nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("retention: schedule %s: move its retained horizon: %w", s, err))
		}
	}
	return errors.Join(errs...)
}
