package coordinator

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
)

// Cron says when a schedule fires: its expression evaluated in its time zone.
type Cron interface {
	// Next is the first occurrence strictly after t; ok is false when there is none.
	Next(t time.Time) (next time.Time, ok bool)
	// Prev is the latest occurrence at or before t; ok is false when there is none.
	Prev(t time.Time) (prev time.Time, ok bool)
	// String is the expression, for logs and reasons.
	String() string
}

// Schedule is one named schedule as the coordinator fires it: a job with its params, when it
// fires, and its policies. Zero fields take the defaults noted on each.
type Schedule struct {
	// Name identifies the schedule in the ledger, run IDs and the API (ledger.ValidateScheduleName).
	Name string
	// Job and Params are what each occurrence runs.
	Job    string
	Params json.RawMessage
	// JobError, when non-nil, means the job or its params are misconfigured (by a setting):
	// each occurrence is recorded as a failed run whose reason is this error's text, which
	// names the setting to fix.
	JobError error
	// Cron says when it fires (required).
	Cron Cron
	// TimeZone (the IANA name Cron evaluates in) and Description (Cron in words) are for
	// people: the API and the dashboard show them.
	TimeZone, Description string
	// Overlap is the policy for an occurrence that comes while the latest run is in progress
	// (default config.DefaultOverlap).
	Overlap config.Overlap
	// CatchUp is how late an occurrence may still start: one found later than this after its
	// time (the app was stopped, or heartbeats failed) is recorded missed (default
	// config.DefaultCatchUp).
	CatchUp time.Duration
	// Jitter delays the start of each run by a pseudo-random duration below it, derived from
	// the run ID (default 0, at most config.MaxJitter).
	Jitter time.Duration
	// Paused is a pause by configuration (an app setting); PausedBy says which. The operator's
	// pause is kept in the ledger and adds to it.
	Paused   bool
	PausedBy string
	// Budget, when not nil, is the failure budget of the schedule's runs, in place of its job's
	// (a setting's budget for the job still wins: work.Registry.FailureBudget).
	Budget *ledger.Budget
	// AutoPause, when positive, pauses the schedule (in the ledger, as an operator's pause,
	// PausedBy ledger.AutoPauseBy) once that many of its started runs in a row have ended
	// failed or timed out (0: never; at most config.MaxAutoPause). See countEnd.
	AutoPause int
}

func (s *Schedule) withDefaults() {
	if s.Overlap == "" {
		s.Overlap = config.DefaultOverlap
	}
	if s.CatchUp == 0 {
		s.CatchUp = config.DefaultCatchUp
	}
}

// Validate checks s as New would (its zero fields taking their defaults), naming the schedule
// and the field; heartbeat is the heartbeat's period (0: not checked).
func (s Schedule) Validate(heartbeat time.Duration) error {
	s.withDefaults()
	return s.validate(heartbeat)
}

// validate checks s (with its defaults), naming the schedule and the field.
func (s *Schedule) validate(heartbeat time.Duration) error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("schedule %q: "+format, append([]any{s.Name}, args...)...))
	}
	if err := ledger.ValidateScheduleName(s.Name); err != nil {
		errs = append(errs, err)
	}
	if s.Job == "" {
		add("Job is required")
	}
	if s.Cron == nil {
		add("Cron is required")
	}
	if !s.Overlap.Valid() {
		add("Overlap %q must be %q, %q or %q", s.Overlap, config.OverlapSkip, config.OverlapBufferOne, config.OverlapAllow)
	}
	if s.CatchUp < 0 {
		add("CatchUp %s must be positive", s.CatchUp)
	} else if heartbeat > 0 && s.CatchUp <= heartbeat {
		add("CatchUp %s must be longer than the heartbeat's period %s: an occurrence waits up to one heartbeat to be decided", s.CatchUp, heartbeat)
	}
	if s.Jitter < 0 || s.Jitter > config.MaxJitter {
		add("Jitter %s must be 0 to %s", s.Jitter, config.MaxJitter)
	}
	if s.AutoPause < 0 || s.AutoPause > config.MaxAutoPause {
		add("AutoPause %d must be 0 to %d", s.AutoPause, config.MaxAutoPause)
	}
	return errors.Join(errs...)
}

// jitter is the delay of run's start: a hash of the run ID spread over [0, s.Jitter), so every
// instance computes the same one.
func (s *Schedule) jitter(run string) time.Duration {
	if s.Jitter <= 0 {
		return 0
	}
	var h uint64 = 14695981039346656037 // FNV-1a
	for i := 0; i < len(run); i++ {
		h ^= uint64(run[i])
		h *= 1099511628211
	}
	return time.Duration(h % uint64(s.Jitter))
}

// due returns the occurrences of s after cursor and at or before now, oldest first, at most
// limit of them: when there are more, the oldest are dropped and counted in dropped.
func (s *Schedule) due(cursor, now time.Time, limit int) (occs []time.Time, dropped int) {
	for o, ok := s.Cron.Next(cursor); ok && !o.After(now); o, ok = s.Cron.Next(o) {
		if len(occs) == limit {
			occs, dropped = occs[1:], dropped+1
		}
		occs = append(occs, o)
	}
	return occs, dropped
}
