package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
)

// The scheduler: on each heartbeat, whoever gets the scheduler lease gives every due occurrence
// after each schedule's cursor exactly one record — missed (past the catch-up window), paused,
// failed (a misconfigured job) or as the overlap policy decides: started, queued or skipped —
// then moves the cursor past it. Planning happens under the run's own lease, never under the
// scheduler's, and a heartbeat that finds the lease held returns at once. Run IDs derive from
// the schedule and the occurrence, so no occurrence is ever decided twice (docs/design.md).

// MaxEarly is how early a heartbeat may fire and still decide an occurrence due at most this
// long after it (never more than half the heartbeat): timers fire a little early. The run
// still starts no earlier than its occurrence.
const MaxEarly = 2 * time.Second

// MaxDecisions bounds the occurrences one heartbeat records per schedule; an outage longer than
// that many occurrences is summarised in the reason of the oldest record written.
const MaxDecisions = 1000

// Decision is what a heartbeat did with one occurrence.
type Decision struct {
	Schedule   string
	Run        string
	Occurrence time.Time
	// Status is started, queued, recorded (a final record: skipped, missed, paused or
	// failed) or existing (decided before); State is the record's state.
	Status Status
	State  ledger.State
	Reason string
}

// HeartbeatOutcome reports a heartbeat.
type HeartbeatOutcome struct {
	// Status is StatusHeld when another instance held the scheduler lease (nothing was done
	// here), else StatusStarted.
	Status      Status
	Epoch       int64
	Holder      ledger.Holder
	HolderEpoch int64
	Decisions   []Decision
	// Supervised counts the runs in progress the heartbeat drove because they had not moved
	// by their bound, within its budget (see supervise.go).
	Supervised int
	// Retention reports the retention sweep's share of the heartbeat (retention.go).
	Retention RetentionOutcome
}

// Heartbeat handles a Tick: one attempt at the scheduler lease and, when won, every schedule's
// due occurrences decided (see above). Schedules are independent: one whose storage calls fail
// does not stop the others, and the error joins every schedule's.
func (c *Coordinator) Heartbeat(ctx context.Context) (out HeartbeatOutcome, err error) {
	ctx, span := c.cfg.Telemetry.StartHeartbeat(ctx)
	began := time.Now()
	defer func() {
		span.SetEpoch(out.Epoch)
		span.End(err)
		c.cfg.Telemetry.HeartbeatDone(ctx, time.Since(began))
	}()
	var due []ledger.Manifest
	err = c.cfg.Leader.RunAsLeader(ctx, func(ctx context.Context, lease election.Lease, beat func()) error {
		out.Status, out.Epoch = StatusStarted, lease.Epoch
		if err := c.ensureContainer(ctx); err != nil {
			return err
		}
		var errs []error
		for _, name := range c.order {
			beat()
			ds, err := c.beatSchedule(ctx, c.schedules[name])
			out.Decisions = append(out.Decisions, ds...)
			if err != nil {
				c.cfg.Logger.Error("heartbeat: schedule not fully decided; the next heartbeat goes on", "schedule", name,
					"epoch", lease.Epoch, "instance", c.cfg.Identity.Instance, "err", err)
				errs = append(errs, fmt.Errorf("schedule %s: %w", name, err))
			}
		}
		// Every schedule decided, the runs in progress are supervised (supervise.go): found
		// under the lease, so one instance does it per heartbeat, and driven after it.
		beat()
		var err error
		due, err = c.dueRuns(ctx)
		if err != nil {
			c.cfg.Logger.Error("heartbeat: supervision incomplete; the next heartbeat goes on", "epoch", lease.Epoch,
				"instance", c.cfg.Identity.Instance, "err", err)
			errs = append(errs, err)
		}
		// Retention last: what is left of the budget goes to deleting old runs, never a
		// schedule's decision or a run's supervision.
		beat()
		if out.Retention, err = c.sweep(ctx, c.driveBudget(), beat); err != nil {
			c.cfg.Logger.Warn("retention: sweep incomplete; the next heartbeat goes on", "epoch", lease.Epoch,
				"instance", c.cfg.Identity.Instance, "err", err)
		}
		return errors.Join(errs...)
	})
	var held *election.HeldError
	if errors.As(err, &held) {
		return HeartbeatOutcome{Status: StatusHeld, Holder: held.Holder, HolderEpoch: held.Epoch}, nil
	}
	var derr error
	out.Supervised, derr = c.drive(ctx, due)
	if derr != nil {
		// A run that could not be moved now is due again at the next heartbeat.
		c.cfg.Logger.Warn("heartbeat: supervision could not move every run; the next heartbeat tries again",
			"instance", c.cfg.Identity.Instance, "err", derr)
	}
	return out, err
}

// beatSchedule decides s's due occurrences and writes its state.
func (c *Coordinator) beatSchedule(ctx context.Context, s *Schedule) ([]Decision, error) {
	now := c.cfg.Now()
	st, err := c.scheduleState(ctx, s, now)
	if err != nil {
		return nil, err
	}
	b := &beat{c: c, s: s, st: st, now: now}
	err = b.run(ctx)
	if werr := b.save(ctx); werr != nil {
		err = errors.Join(err, werr)
	}
	return b.decisions, err
}

// scheduleState reads s's state. A schedule's first heartbeat starts its cursor when the
// instance started (a new schedule has nothing before its deployment to run) and stores it
// before anything is decided, so
// an occurrence decided by a heartbeat that dies before it writes the state is after the
// stored cursor and the next heartbeat finds its record. The schedule the settings declare
// ("tick") takes over, on its first heartbeat, the cursor and the latest run of a ledger
// written before schedules had names, so its history goes on where it was.
func (c *Coordinator) scheduleState(ctx context.Context, s *Schedule, now time.Time) (ledger.ScheduleState, error) {
	st, err := c.cfg.Store.ReadSchedule(ctx, s.Name)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		st = ledger.ScheduleState{Schedule: s.Name}
	case err != nil:
		return st, err
	}
	if !st.Cursor.IsZero() {
		return st, nil
	}
	// The cursor starts when this instance started, not at this heartbeat: an occurrence
	// between a deployment and its first heartbeat (a schedule at 02:00, an app deployed at
	// 01:59:30 whose first heartbeat beats at 02:00:00) is decided, not passed over.
	start := ledger.ScheduleState{Cursor: minTime(now, c.started).UTC()}
	if s.Name == LegacySchedule {
		legacy, ok, err := c.cfg.Store.ReadLegacySchedule(ctx)
		if err != nil {
			return st, err
		}
		if ok {
			if !legacy.Cursor.IsZero() && !legacy.Cursor.After(now) {
				start.Cursor = legacy.Cursor
			}
			start.Latest = legacy.Latest
			c.cfg.Logger.Info("schedule takes over the single-schedule ledger", "schedule", s.Name, "cursor", start.Cursor,
				"latest", start.Latest)
		}
	}
	return c.cfg.Store.UpdateSchedule(ctx, s.Name, func(cur *ledger.ScheduleState) error {
		if !cur.Cursor.IsZero() {
			return ledger.ErrNoChange // another scheduler started it meanwhile
		}
		cur.Cursor = start.Cursor
		if cur.Latest == "" {
			cur.Latest = start.Latest // a run now before the first heartbeat keeps its place
		}
		return nil
	})
}

// LegacySchedule is the name of the schedule the BATON_SCHEDULE setting declares: its runs
// keep the IDs the single-schedule versions gave them (tick-<occurrence>).
const LegacySchedule = "tick"

// beat is one heartbeat's pass over one schedule.
type beat struct {
	c         *Coordinator
	s         *Schedule
	st        ledger.ScheduleState
	now       time.Time
	wrote     bool // the state changed and must be written
	decisions []Decision

	latest      ledger.Manifest // the latest run's record, once read
	latestKnown bool
}

func (b *beat) run(ctx context.Context) error {
	// The end of the latest run counts before anything starts after it (autopause.go).
	if err := b.countLatest(ctx); err != nil {
		return err
	}
	// A queued run goes first: it was waiting before anything due now.
	if err := b.promote(ctx); err != nil {
		return err
	}
	early := min(MaxEarly, b.c.cfg.HeartbeatPeriod/2)
	occs, dropped := b.s.due(b.st.Cursor, b.now.Add(early), MaxDecisions)
	for i, o := range occs {
		note := ""
		if i == 0 && dropped > 0 {
			note = fmt.Sprintf("; %d earlier occurrences since %s were missed too and are not recorded one by one",
				dropped, b.st.Cursor.UTC().Format(time.RFC3339))
		}
		if err := b.decide(ctx, o, note); err != nil {
			return err
		}
		b.st.Cursor, b.wrote = o, true
	}
	return nil
}

// latestRun reads the schedule's latest run (cached for the pass); ok is false when there is
// none.
func (b *beat) latestRun(ctx context.Context) (ledger.Manifest, bool, error) {
	if b.st.Latest == "" {
		return ledger.Manifest{}, false, nil
	}
	if !b.latestKnown {
		m, err := b.c.cfg.Store.ReadManifest(ctx, b.st.Latest)
		if errors.Is(err, ledger.ErrNotFound) {
			return m, false, nil
		}
		if err != nil {
			return m, false, err
		}
		b.latest, b.latestKnown = m, true
	}
	return b.latest, true, nil
}

// busy reports the schedule's run in progress, if any.
func (b *beat) busy(ctx context.Context) (string, bool, error) {
	m, ok, err := b.latestRun(ctx)
	if err != nil || !ok {
		return "", false, err
	}
	return m.RunID, !m.State.Final(), nil
}

func (b *beat) spec(id string, occurrence time.Time) runSpec {
	return runSpec{id: id, trigger: ledger.TriggerTimer, schedule: b.s.Name, occurrence: occurrence,
		job: b.s.Job, params: b.s.Params, jitter: b.s.jitter(id), budget: b.s.Budget}
}

func (b *beat) decided(d Decision) {
	d.Schedule = b.s.Name
	b.decisions = append(b.decisions, d)
}

// decide gives occurrence o its one record.
func (b *beat) decide(ctx context.Context, o time.Time, note string) error {
	id := ledger.ScheduleRunID(b.s.Name, o)
	spec := b.spec(id, o)
	// Decided before: a heartbeat whose state write failed, another scheduler, or the
	// single-schedule versions' Tick. Its record stands; the state follows it.
	if m, err := b.c.cfg.Store.ReadManifest(ctx, id); err == nil {
		b.adopt(ctx, m)
		b.decided(Decision{Run: id, Occurrence: o, Status: StatusExisting, State: m.State, Reason: m.Reason})
		if m.State == ledger.StateQueued {
			// Queued by a heartbeat that died before it saved the state: if its turn has come,
			// it starts now, before any later occurrence of this pass.
			return b.promote(ctx)
		}
		return b.c.startRun(ctx, m, spec.jitter)
	} else if !errors.Is(err, ledger.ErrNotFound) {
		return err
	}
	paused, pauseReason := b.paused()
	switch late := b.now.Sub(o); {
	case late > b.s.CatchUp:
		reason := fmt.Sprintf("found %s after its time, past the schedule's catch-up window of %s (the app was stopped, scaled to zero or its heartbeats failed)%s",
			late.Round(time.Second), b.s.CatchUp, note)
		return b.final(ctx, spec, ledger.StateMissed, reason)
	case paused:
		return b.final(ctx, spec, ledger.StatePaused, pauseReason)
	case b.s.JobError != nil:
		b.c.log(id, 0).Error("schedule's job is misconfigured; occurrence recorded as failed", "schedule", b.s.Name, "reason", b.s.JobError)
		return b.final(ctx, spec, ledger.StateFailed, b.s.JobError.Error())
	}
	active, busy, err := b.busy(ctx)
	if err != nil {
		return err
	}
	switch {
	case busy && b.s.Overlap == config.OverlapSkip:
		return b.final(ctx, spec, ledger.StateSkipped, fmt.Sprintf("run %s is still in progress (overlap policy: skip)", active))
	case busy && b.s.Overlap == config.OverlapBufferOne && b.st.Buffered != "":
		return b.final(ctx, spec, ledger.StateSkipped, fmt.Sprintf("run %s is still in progress and %s is already waiting for it (overlap policy: buffer-one)",
			active, b.st.Buffered))
	case busy && b.s.Overlap == config.OverlapBufferOne:
		out, err := b.c.open(ctx, spec, ledger.StateQueued)
		if err != nil {
			return err
		}
		b.st.Buffered = id
		b.decided(Decision{Run: id, Occurrence: o, Status: out.Status, State: out.State, Reason: "waiting for " + active})
		return nil
	}
	out, err := b.c.open(ctx, spec, ledger.StatePlanning)
	if err != nil {
		return err
	}
	b.setLatest(id)
	b.decided(Decision{Run: id, Occurrence: o, Status: out.Status, State: out.State})
	return nil
}

// final records o with a final state and its reason.
func (b *beat) final(ctx context.Context, spec runSpec, state ledger.State, reason string) error {
	if err := b.c.record(ctx, spec, state, reason); err != nil {
		return err
	}
	b.decided(Decision{Run: spec.id, Occurrence: spec.occurrence, Status: StatusRecorded, State: state, Reason: reason})
	return nil
}

// adopt makes the state follow a record decided before: a queued run is the buffered one, a
// run that was started is the latest.
func (b *beat) adopt(ctx context.Context, m ledger.Manifest) {
	switch {
	case m.State == ledger.StateQueued:
		b.st.Buffered = m.RunID
	case m.State == ledger.StateSkipped || m.State == ledger.StateMissed || m.State == ledger.StatePaused:
	case m.State == ledger.StateFailed && m.Lease == "" && m.Epoch == 0:
		// a misconfigured job's record: no run was started
	default:
		if m.RunID != b.st.Buffered {
			b.setLatest(m.RunID)
			b.latest, b.latestKnown = m, true
		}
	}
}

func (b *beat) setLatest(id string) {
	b.st.Latest, b.latestKnown, b.wrote = id, false, true
}

// paused reports whether the schedule is paused and the reason its occurrences get.
func (b *beat) paused() (bool, string) {
	switch {
	case b.s.Paused:
		return true, "schedule paused by " + b.s.PausedBy
	case b.st.Paused && b.st.Note != "":
		return true, "schedule paused: " + b.st.Note
	case b.st.Paused:
		return true, "schedule paused"
	}
	return false, ""
}

// promote starts the queued run once the run it waited for has ended.
func (b *beat) promote(ctx context.Context) error {
	if b.st.Buffered == "" {
		return nil
	}
	if _, busy, err := b.busy(ctx); err != nil || busy {
		return err
	}
	id := b.st.Buffered
	start := b.c.startAt(time.Time{}, b.s.jitter(id)).UTC()
	m, err := b.c.cfg.Store.UpdateManifest(ctx, id, ledger.NoFence, func(m *ledger.Manifest) error {
		if m.State != ledger.StateQueued {
			return ledger.ErrNoChange
		}
		if err := m.Transition(ledger.StatePlanning); err != nil {
			return err
		}
		rt := b.c.runTimeout(*m)
		m.Deadline, m.Expires = start.Add(rt), start.Add(rt)
		return nil
	})
	if err != nil && !errors.Is(err, ledger.ErrNotFound) {
		return err
	}
	if err == nil && !m.State.Final() { // a queued run cancelled never starts
		if err := b.c.startRun(ctx, m, b.s.jitter(id)); err != nil {
			return err
		}
		b.c.cfg.Telemetry.RunStarted(ctx, m.Schedule, m.Job, string(m.Trigger))
		b.c.log(id, 0).Info("queued run started: the run it waited for has ended", "schedule", b.s.Name)
		b.decided(Decision{Run: id, Occurrence: m.Occurrence, Status: StatusStarted, State: m.State, Reason: "the run it waited for has ended"})
		b.setLatest(id)
	}
	b.st.Buffered, b.wrote = "", true
	return nil
}

// save writes the state when it changed, unless another scheduler has moved the cursor
// further; the operator's pause fields are never touched here.
func (b *beat) save(ctx context.Context) error {
	if !b.wrote {
		return nil
	}
	_, err := b.c.cfg.Store.UpdateSchedule(ctx, b.s.Name, func(cur *ledger.ScheduleState) error {
		if cur.Cursor.After(b.st.Cursor) {
			return ledger.ErrNoChange
		}
		cur.Cursor, cur.Latest, cur.Buffered = b.st.Cursor.UTC(), b.st.Latest, b.st.Buffered
		return nil
	})
	return err
}
