package baton

import (
	"fmt"
	"time"

	"github.com/batonfn/baton/internal/engine/limit"
	"github.com/batonfn/baton/work"
)

// Limit is a named limit on what a job calls, counted across every instance, run and job
// that names it: at most MaxInFlight of their partitions run at once, and at most Rate start
// per Per, Burst of them at once. A zero MaxInFlight or Rate leaves that bound off; one of
// them must be set. The setting BATON_LIMITS overrides a limit's fields without a rebuild.
type Limit struct {
	// Name: 1–63 characters of a-z, 0-9, '-' and '_' starting with a letter.
	Name        string
	MaxInFlight int
	Rate        int
	// Per is the rate's period (default 1 s); Burst the starts allowed at once (default 1,
	// at most Rate).
	Per   time.Duration
	Burst int
}

// WithLimit puts the job's partitions under limit l, shared with every job that names it
// (each must declare it alike). A partition that cannot start under it waits on the queue,
// not in an invocation, without spending a try or a delivery (see docs/jobs.md). A field out
// of range, or a limit declared otherwise by another job, is a *RegistrationError for
// "limit" wrapping ErrInvalidLimit. Default: no limit.
func WithLimit(l Limit) JobOption {
	return jobOption(func(s *jobSpec) error {
		spec, err := limit.Spec{Name: l.Name, MaxInFlight: l.MaxInFlight, Rate: l.Rate, Per: l.Per, Burst: l.Burst}.Normalize()
		if err != nil {
			return &RegistrationError{Field: "limit", Err: fmt.Errorf("%w: %w", ErrInvalidLimit, err)}
		}
		s.limit = &spec
		return nil
	})
}

// ErrSlowDown marks an error made by SlowDown.
var ErrSlowDown = work.ErrSlowDown

// SlowDown returns an error saying the downstream asked for no work for d (a 429 or 503 with
// Retry-After, say): the partition is tried again after d without spending a try or a
// delivery, and when the job has a limit, no partition of the limit starts on any instance
// for d. d is clamped to 1 s to an hour. errors.Is(err, ErrSlowDown) holds, and err wraps
// cause.
func SlowDown(d time.Duration, cause error) error { return work.SlowDown(d, cause) }

// registerLimit records the job's limit, refusing one declared otherwise before.
func (a *App) registerLimit(spec limit.Spec) error {
	if prev, ok := a.limits[spec.Name]; ok && prev != spec {
		return fmt.Errorf("%w: limit %q is declared as %s by another job, here as %s", ErrInvalidLimit, spec.Name, prev, spec)
	}
	a.limits[spec.Name] = spec
	return nil
}
