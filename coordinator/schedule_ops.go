package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
)

// What an operator does with a schedule: run it now, pause it, resume it.

// runNowWait bounds how long RunNow waits for the scheduler lease, which a heartbeat holds for
// a few storage calls at a time.
const runNowWait = 10 * time.Second

// runNowPoll is how often RunNow tries the scheduler lease while it is held.
const runNowPoll = 100 * time.Millisecond

// RunNow starts a run of schedule outside its occurrences, through the scheduler lease and the
// schedule's overlap policy: with a run in progress, skip refuses it (ErrRunInProgress, with
// the run in progress; nothing is recorded), buffer-one queues it (unless one is queued
// already) and allow starts it. The run's ID names the schedule. A repeated Idempotency-Key
// answers the run it made, or ErrKeyReused when it named another request's (see repeat); a run
// beyond the caps on manual runs gets ErrTooManyRuns. Both are answered before the lease is
// contended for, so they never keep a heartbeat out. A paused schedule runs too: running it
// now is explicit.
func (c *Coordinator) RunNow(ctx context.Context, schedule, key string) (Outcome, error) {
	s, ok := c.schedules[schedule]
	if !ok {
		return Outcome{}, fmt.Errorf("%w: %q", ErrUnknownSchedule, schedule)
	}
	if s.JobError != nil {
		return Outcome{}, fmt.Errorf("%w: the schedule's job is misconfigured: %w", ErrBadRequest, s.JobError)
	}
	id := ledger.ScheduleNowRunID(schedule, key, c.cfg.Now())
	spec := runSpec{id: id, trigger: ledger.TriggerManual, schedule: s.Name, key: key, job: s.Job, params: s.Params, budget: s.Budget}
	if err := c.ensureContainer(ctx); err != nil {
		return Outcome{}, err
	}
	// A repeated key answers from the ledger without contending for the lease.
	if out, ok, err := c.repeat(ctx, spec); ok || err != nil {
		return out, err
	}
	if err := c.checkManualCaps(ctx, s.Job); err != nil {
		return Outcome{Run: id}, err
	}
	until := time.Now().Add(runNowWait)
	for {
		var out Outcome
		var runErr error
		err := c.cfg.Leader.RunAsLeader(ctx, func(ctx context.Context, lease election.Lease, beat func()) error {
			out, runErr = c.runNow(ctx, s, spec)
			out.Epoch = lease.Epoch
			return nil
		})
		var held *election.HeldError
		switch {
		case err == nil:
			return out, runErr
		case !errors.As(err, &held):
			return Outcome{}, err
		case !time.Now().Add(runNowPoll).Before(until):
			return Outcome{Status: StatusHeld, Run: id, Holder: held.Holder, HolderEpoch: held.Epoch},
				fmt.Errorf("%w: %w", ErrSchedulerBusy, err)
		}
		t := time.NewTimer(runNowPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return Outcome{}, ctx.Err()
		case <-t.C:
		}
	}
}

// runNow decides spec, a run now of s, under the scheduler lease.
func (c *Coordinator) runNow(ctx context.Context, s *Schedule, spec runSpec) (Outcome, error) {
	id := spec.id
	if spec.key != "" {
		// Another request with the same key may have made the run while this one waited for
		// the lease: its run is the answer, not the overlap policy's.
		if m, err := c.cfg.Store.ReadManifest(ctx, id); err == nil {
			return c.answerKey(ctx, spec, m)
		} else if !errors.Is(err, ledger.ErrNotFound) {
			return Outcome{}, err
		}
	}
	st, err := c.cfg.Store.ReadSchedule(ctx, s.Name)
	if err != nil && !errors.Is(err, ledger.ErrNotFound) {
		return Outcome{}, err
	}
	b := &beat{c: c, s: s, st: st, now: c.cfg.Now()}
	active, busy, err := b.busy(ctx)
	if err != nil {
		return Outcome{}, err
	}
	if !busy {
		// The latest run's end counts for auto-pause before this run replaces it as the latest.
		if err := b.countLatest(ctx); err != nil {
			return Outcome{}, err
		}
	}
	state := ledger.StatePlanning
	switch {
	case busy && (s.Overlap == config.OverlapSkip || s.Overlap == config.OverlapBufferOne && st.Buffered != ""):
		reason := fmt.Sprintf("run %s is still in progress (overlap policy: %s)", active, s.Overlap)
		if st.Buffered != "" {
			reason += fmt.Sprintf(" and %s is already waiting for it", st.Buffered)
		}
		return Outcome{Status: StatusSkipped, Run: id, State: ledger.StateSkipped, Reason: reason, ActiveRun: active}, ErrRunInProgress
	case busy && s.Overlap == config.OverlapBufferOne:
		state = ledger.StateQueued
	}
	// The schedule's state names the run before the run exists: a queued run that no state
	// names would never be started, while a name without a record is cleared by the next
	// heartbeat (a queued run) or ignored (the latest run), and the caller got an error.
	_, err = c.cfg.Store.UpdateSchedule(ctx, s.Name, func(cur *ledger.ScheduleState) error {
		if state == ledger.StateQueued {
			cur.Buffered = id
		} else {
			cur.Latest = id
		}
		return nil
	})
	if err != nil {
		return Outcome{}, err
	}
	return c.open(ctx, spec, state)
}

// MaxPauseNote bounds a pause note, in characters.
const MaxPauseNote = 500

// Pause stops schedule from starting runs from its next heartbeat on, with note as the reason
// its occurrences are recorded paused; by says who paused it. Runs in progress go on.
func (c *Coordinator) Pause(ctx context.Context, schedule, note, by string) (ledger.ScheduleState, error) {
	if _, ok := c.schedules[schedule]; !ok {
		return ledger.ScheduleState{}, fmt.Errorf("%w: %q", ErrUnknownSchedule, schedule)
	}
	if n := utf8.RuneCountInString(note); n > MaxPauseNote || !utf8.ValidString(note) {
		return ledger.ScheduleState{}, fmt.Errorf("%w: the note is %d characters; at most %d of valid UTF-8", ErrBadRequest, n, MaxPauseNote)
	}
	if err := c.ensureContainer(ctx); err != nil { // a pause may come before the first heartbeat
		return ledger.ScheduleState{}, err
	}
	now := c.cfg.Now().UTC()
	st, err := c.cfg.Store.UpdateSchedule(ctx, schedule, func(st *ledger.ScheduleState) error {
		st.Paused, st.Note, st.PausedBy, st.PausedAt = true, note, by, now
		return nil
	})
	if err == nil {
		c.cfg.Logger.Warn("schedule paused", "schedule", schedule, "note", note, "by", by, "instance", c.cfg.Identity.Instance)
	}
	return st, err
}

// Resume lets schedule start runs again from its next heartbeat on, whoever paused it (an
// operator or its auto-pause), and clears its streak of failed runs (autopause.go): the count
// starts again from the next run to end. Occurrences recorded paused stay so.
func (c *Coordinator) Resume(ctx context.Context, schedule, by string) (ledger.ScheduleState, error) {
	if _, ok := c.schedules[schedule]; !ok {
		return ledger.ScheduleState{}, fmt.Errorf("%w: %q", ErrUnknownSchedule, schedule)
	}
	if err := c.ensureContainer(ctx); err != nil {
		return ledger.ScheduleState{}, err
	}
	st, err := c.cfg.Store.UpdateSchedule(ctx, schedule, func(st *ledger.ScheduleState) error {
		if !st.Paused {
			return ledger.ErrNoChange
		}
		st.Paused, st.Note, st.PausedBy, st.PausedAt = false, "", "", time.Time{}
		st.Streak = nil // Counted stays: the run that ended the streak is not counted again
		return nil
	})
	if err == nil {
		c.cfg.Logger.Info("schedule resumed", "schedule", schedule, "by", by, "instance", c.cfg.Identity.Instance)
	}
	return st, err
}
