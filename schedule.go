package baton

import (
	"errors"
	"fmt"
	"time"
	_ "time/tzdata" // IANA time zones work on a host without a zoneinfo database

	"github.com/batonfn/baton/internal/app"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/lib/ncrontab"
	jsonparams "github.com/batonfn/baton/internal/lib/params"
)

// Overlap is what a schedule does with an occurrence that comes while its latest run is still
// in progress. See WithOverlap.
type Overlap string

const (
	// OverlapSkip records the occurrence skipped, naming the run in progress (the default).
	OverlapSkip = Overlap(config.OverlapSkip)
	// OverlapBufferOne queues the occurrence and starts it once the run in progress ends; while
	// one is queued, later occurrences are skipped.
	OverlapBufferOne = Overlap(config.OverlapBufferOne)
	// OverlapAllow starts the occurrence beside the run in progress.
	OverlapAllow = Overlap(config.OverlapAllow)
)

// Schedule defaults and limits.
const (
	// DefaultCatchUp is how late a due occurrence may still start unless WithCatchUp says
	// otherwise.
	DefaultCatchUp = config.DefaultCatchUp
	// MaxJitter bounds WithJitter.
	MaxJitter = config.MaxJitter
	// MaxAutoPause bounds WithAutoPause.
	MaxAutoPause = config.MaxAutoPause
)

// ScheduleOption configures one schedule (see JobHandle.Schedule).
type ScheduleOption interface {
	applySchedule(*app.Schedule) error
}

type scheduleOption func(*app.Schedule) error

func (o scheduleOption) applySchedule(s *app.Schedule) error { return o(s) }

// Schedule declares a schedule of the job named name: a run on each occurrence of cron, a
// six-field NCRONTAB expression as the Azure Functions timer reads it ("0 30 2 * * *" is 02:30:00
// every day), in UTC unless InZone names a time zone. Baton runs each occurrence exactly once
// across every instance and records each one it does not run, with the reason. The name (1–32
// of a-z, 0-9 and '-', starting with a letter) is also its key in BATON_SCHEDULES. A bad
// declaration is kept as a *RegistrationError, reported by App.Err, Run and Main.
func (h *JobHandle) Schedule(name, cron string, opts ...ScheduleOption) {
	if err := h.app.schedule(h, name, cron, opts); err != nil {
		h.app.problems = append(h.app.problems, err)
	}
}

func (a *App) schedule(h *JobHandle, name, cron string, opts []ScheduleOption) error {
	fail := func(field string, err error) error {
		return &RegistrationError{Schedule: name, Job: h.name, Field: field, Err: err}
	}
	if err := ledger.ValidateScheduleName(name); err != nil {
		return fail("name", fmt.Errorf("%w: %w", ErrInvalidName, err))
	}
	for _, s := range a.schedules {
		if s.Name == name {
			return fail("name", ErrDuplicateSchedule)
		}
	}
	s := app.Schedule{Name: name, Job: h.name, Cron: cron, Overlap: config.Overlap(OverlapSkip), CatchUp: DefaultCatchUp}
	if _, err := ncrontab.Parse(cron); err != nil {
		return fail("cron", fmt.Errorf("%w: %w", ErrInvalidSchedule, err))
	}
	for _, o := range opts {
		if o == nil {
			return fail("option", fmt.Errorf("%w: a schedule option is nil", ErrInvalidSchedule))
		}
		if err := o.applySchedule(&s); err != nil {
			var re *RegistrationError
			if errors.As(err, &re) {
				re.Schedule, re.Job = name, h.name
				return re
			}
			return fail("option", err)
		}
	}
	if h.job == nil {
		return fail("job", fmt.Errorf("%w: %q was not registered (see its registration error)", ErrUnknownJob, h.name))
	}
	if s.Params == nil {
		s.Params = a.defaults[h.name]
	}
	if v, ok := h.job.(ParamsValidator); ok && s.Params != nil {
		if err := v.ValidateParams(s.Params); err != nil {
			return fail("params", fmt.Errorf("%w: %w", ErrInvalidParams, err))
		}
	}
	a.schedules = append(a.schedules, s)
	return nil
}

// InZone evaluates the schedule's expression in the IANA time zone tz ("Europe/Berlin";
// default UTC), following the wall clock across daylight-saving changes: a local time that does
// not exist that day does not fire, and one that occurs twice fires once.
func InZone(tz string) ScheduleOption {
	return scheduleOption(func(s *app.Schedule) error {
		if _, err := time.LoadLocation(tz); err != nil || tz == "" || tz == "Local" {
			return &RegistrationError{Field: "timeZone", Err: fmt.Errorf("%w: %q is not an IANA time zone such as \"Europe/Berlin\"", ErrInvalidSchedule, tz)}
		}
		s.TimeZone = tz
		return nil
	})
}

// WithParams gives the schedule's runs params: a JSON object (json.RawMessage, []byte or
// string) or a Go value that encodes to one, which the job's ParamsValidator must accept.
// Default: the job's WithDefaultParams, else none.
func WithParams(params any) ScheduleOption {
	return scheduleOption(func(s *app.Schedule) error {
		raw, err := jsonparams.Object(params)
		if err != nil {
			return &RegistrationError{Field: "params", Err: fmt.Errorf("%w: %w", ErrInvalidParams, err)}
		}
		s.Params = raw
		return nil
	})
}

// WithOverlap sets what an occurrence does while the schedule's latest run is still in
// progress: OverlapSkip (the default), OverlapBufferOne or OverlapAllow.
func WithOverlap(o Overlap) ScheduleOption {
	return scheduleOption(func(s *app.Schedule) error {
		if !config.Overlap(o).Valid() {
			return &RegistrationError{Field: "overlap", Err: fmt.Errorf("%w: %q: use OverlapSkip, OverlapBufferOne or OverlapAllow", ErrInvalidSchedule, o)}
		}
		s.Overlap = config.Overlap(o)
		return nil
	})
}

// WithCatchUp sets how late a due occurrence may still start: one that Baton finds later than
// d after its time (the app was stopped or its heartbeats failed) is recorded missed instead.
// It must be longer than the heartbeat's period (checked at start-up). Default: DefaultCatchUp.
func WithCatchUp(d time.Duration) ScheduleOption {
	return scheduleOption(func(s *app.Schedule) error {
		if d <= 0 {
			return &RegistrationError{Field: "catchUp", Err: fmt.Errorf("%w: %s must be positive", ErrInvalidSchedule, d)}
		}
		s.CatchUp = d
		return nil
	})
}

// WithAutoPause pauses the schedule once n of its runs in a row (1 to MaxAutoPause) have ended
// failed or timed out: the heartbeat after the n-th end pauses it, PausedBy "auto-pause", with a
// note naming those runs, and its occurrences are recorded paused until an operator resumes it
// (POST /api/schedules/{name}/resume, or the dashboard), which starts the count again. Any
// other end (succeeded, partial, cancelled) starts the count again too. BATON_SCHEDULES's
// "autoPause" overrides it (0 turns it off). Default: never.
func WithAutoPause(n int) ScheduleOption {
	return scheduleOption(func(s *app.Schedule) error {
		if n < 1 || n > MaxAutoPause {
			return &RegistrationError{Field: "autoPause", Err: fmt.Errorf("%w: %d runs, want 1 to %d", ErrInvalidSchedule, n, MaxAutoPause)}
		}
		s.AutoPause = n
		return nil
	})
}

// WithJitter delays each run's start by a pseudo-random duration below d, the same on every
// instance, to spread schedules that share a time. At most MaxJitter. Default: none.
func WithJitter(d time.Duration) ScheduleOption {
	return scheduleOption(func(s *app.Schedule) error {
		if d < 0 || d > MaxJitter {
			return &RegistrationError{Field: "jitter", Err: fmt.Errorf("%w: %s must be 0 to %s", ErrInvalidSchedule, d, MaxJitter)}
		}
		s.Jitter = d
		return nil
	})
}
