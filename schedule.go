package baton

import (
	"errors"
	"fmt"
	"time"
	_ "time/tzdata" // IANA time zones work on a host without a zoneinfo database

	"github.com/batonfn/baton/internal/app"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/lib/ncrontab"
	jsonparams "github.com/batonfn/baton/internal/lib/params"
)

// Overlap is what a schedule does with an occurrence that comes while its latest run is still in
// progress. See WithOverlap.
type Overlap string

const (
	// OverlapSkip records the occurrence skipped, naming the run in progress (the default).
	OverlapSkip Overlap = "skip"
	// OverlapBufferOne queues the occurrence and starts it once the run in progress ends; while
	// one is queued, later occurrences are skipped.
	OverlapBufferOne Overlap = "buffer-one"
	// OverlapAllow starts the occurrence beside the run in progress.
	OverlapAllow Overlap = "allow"
)

// Schedule defaults and limits.
const (
	// DefaultCatchUp is how late a due occurrence may still start unless WithCatchUp says
	// otherwise.
	DefaultCatchUp = 10 * time.Minute
	// MaxJitter bounds WithJitter.
	MaxJitter = time.Hour
)

// ScheduleOption configures one schedule (see App.Schedule). A bad option is a
// *RegistrationError from Schedule, naming the schedule and the field.
type ScheduleOption func(*app.Schedule) error

// Schedule declares a schedule named name: on each occurrence of cron, a run of the registered
// job. cron is a six-field NCRONTAB expression, {second} {minute} {hour} {day} {month}
// {day-of-week}, as the Azure Functions timer reads it ("0 30 2 * * *" is 02:30:00 every day),
// evaluated in UTC unless InZone names a time zone. Baton fires every schedule itself on the
// app's heartbeat, exactly once per occurrence across every instance, and records each
// occurrence it does not run (skipped, queued, missed, paused) with the reason.
//
// The name (1–32 characters of a-z, 0-9 and '-', starting with a letter) names the schedule's
// runs ("<name>-<occurrence>"), its history in the ledger, its row on the dashboard and its key in
// the BATON_SCHEDULES app setting, which can change its expression, time zone and policies, or
// pause it, without a rebuild. Register the job first. A bad declaration — an invalid or
// duplicate name, an unknown job, an expression or time zone that does not parse, params the
// job refuses, an option out of range — returns a *RegistrationError naming the schedule and
// the field, and Main and Run will refuse to start.
func (a *App) Schedule(name, job, cron string, opts ...ScheduleOption) error {
	err := a.schedule(name, job, cron, opts)
	if err != nil {
		a.problems = append(a.problems, err)
	}
	return err
}

func (a *App) schedule(name, job, cron string, opts []ScheduleOption) error {
	fail := func(field string, err error) error {
		return &RegistrationError{Schedule: name, Job: job, Field: field, Err: err}
	}
	if err := ledger.ValidateScheduleName(name); err != nil {
		return fail("name", fmt.Errorf("%w: %w", ErrInvalidName, err))
	}
	for _, s := range a.schedules {
		if s.Name == name {
			return fail("name", ErrDuplicateSchedule)
		}
	}
	j, err := a.jobs.Lookup(job)
	if err != nil {
		return fail("job", fmt.Errorf("%w: %q (register the job before its schedules)", ErrUnknownJob, job))
	}
	s := app.Schedule{Name: name, Job: job, Cron: cron, Overlap: string(OverlapSkip), CatchUp: DefaultCatchUp}
	if _, err := ncrontab.Parse(cron); err != nil {
		return fail("cron", fmt.Errorf("%w: %w", ErrInvalidSchedule, err))
	}
	for _, o := range opts {
		if o == nil {
			return fail("option", fmt.Errorf("%w: a schedule option is nil", ErrInvalidSchedule))
		}
		if err := o(&s); err != nil {
			var re *RegistrationError
			if errors.As(err, &re) {
				re.Schedule, re.Job = name, job
				return re
			}
			return fail("option", err)
		}
	}
	if s.Params == nil {
		s.Params = a.defaults[job]
	}
	if v, ok := j.(ParamsValidator); ok && s.Params != nil {
		if err := v.ValidateParams(s.Params); err != nil {
			return fail("params", fmt.Errorf("%w: %w", ErrInvalidParams, err))
		}
	}
	a.schedules = append(a.schedules, s)
	return nil
}

// InZone evaluates the schedule's expression in the IANA time zone tz ("Europe/Berlin",
// "America/New_York"; default UTC). Across daylight-saving changes it follows the wall clock:
// a local time that does not exist that day (the clocks jump over it) does not fire, and one
// that occurs twice fires once, at its first instant.
func InZone(tz string) ScheduleOption {
	return func(s *app.Schedule) error {
		if _, err := time.LoadLocation(tz); err != nil || tz == "" || tz == "Local" {
			return &RegistrationError{Field: "timeZone", Err: fmt.Errorf("%w: %q is not an IANA time zone such as \"Europe/Berlin\"", ErrInvalidSchedule, tz)}
		}
		s.TimeZone = tz
		return nil
	}
}

// WithParams gives the schedule's runs params: a JSON object (json.RawMessage, []byte or
// string) or a Go value that encodes to one, which the job's ParamsValidator must accept.
// Default: the job's WithDefaultParams, else none.
func WithParams(params any) ScheduleOption {
	return func(s *app.Schedule) error {
		raw, err := jsonparams.Object(params)
		if err != nil {
			return &RegistrationError{Field: "params", Err: fmt.Errorf("%w: %w", ErrInvalidParams, err)}
		}
		s.Params = raw
		return nil
	}
}

// WithOverlap sets what an occurrence does while the schedule's latest run is still in
// progress: OverlapSkip (the default), OverlapBufferOne or OverlapAllow.
func WithOverlap(o Overlap) ScheduleOption {
	return func(s *app.Schedule) error {
		if o != OverlapSkip && o != OverlapBufferOne && o != OverlapAllow {
			return &RegistrationError{Field: "overlap", Err: fmt.Errorf("%w: %q: use OverlapSkip, OverlapBufferOne or OverlapAllow", ErrInvalidSchedule, o)}
		}
		s.Overlap = string(o)
		return nil
	}
}

// WithCatchUp sets how late a due occurrence may still start: one that Baton finds later than d
// after its time (the app was stopped, scaled to zero or its heartbeats failed) is recorded
// missed instead. It must be longer than the heartbeat's period (checked at start-up).
// Default: DefaultCatchUp.
func WithCatchUp(d time.Duration) ScheduleOption {
	return func(s *app.Schedule) error {
		if d <= 0 {
			return &RegistrationError{Field: "catchUp", Err: fmt.Errorf("%w: %s must be positive", ErrInvalidSchedule, d)}
		}
		s.CatchUp = d
		return nil
	}
}

// WithJitter delays the start of each run by a pseudo-random duration below d, derived from the
// run's ID (the same on every instance), to spread the load of schedules that share a time.
// At most MaxJitter. Default: none.
func WithJitter(d time.Duration) ScheduleOption {
	return func(s *app.Schedule) error {
		if d < 0 || d > MaxJitter {
			return &RegistrationError{Field: "jitter", Err: fmt.Errorf("%w: %s must be 0 to %s", ErrInvalidSchedule, d, MaxJitter)}
		}
		s.Jitter = d
		return nil
	}
}
