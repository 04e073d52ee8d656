package baton

import (
	"errors"
	"fmt"

	"github.com/batonfn/baton/work"
)

// ErrRunStopped is the cause (context.Cause) of a partition's context when its run was stopped:
// cancelled by an operator, or past its failure budget. What Process returns then is not
// recorded; return promptly.
var ErrRunStopped = work.ErrRunStopped

// Sentinels a *RegistrationError wraps, for errors.Is.
var (
	// ErrInvalidName: a job name is not 1–63 characters of a-z, 0-9, '-' and '_' starting with
	// a letter, or a schedule name is not 1–32 characters of a-z, 0-9 and '-' starting with a
	// letter and not ending with '-' (or is "manual", which ad-hoc runs use).
	ErrInvalidName = errors.New("invalid name")
	// ErrDuplicateJob: a job name is registered twice.
	ErrDuplicateJob = errors.New("job already registered")
	// ErrNilJob: a nil Job, a TypedJob missing a function, or a job option that is nil.
	ErrNilJob = errors.New("nil job")
	// ErrInvalidParams: a job's default params (WithDefaultParams) or a schedule's params
	// (WithParams) are not a JSON object the job's ParamsValidator accepts.
	ErrInvalidParams = errors.New("invalid params")
	// ErrInvalidRetry: a job's RetryPolicy has a field out of range.
	ErrInvalidRetry = errors.New("invalid retry policy")
	// ErrInvalidBundle: a job's WithMaxBundle is not 1 to MaxBundle.
	ErrInvalidBundle = errors.New("invalid bundle size")
	// ErrInvalidBudget: a WithFailureBudget bound is out of range.
	ErrInvalidBudget = errors.New("invalid failure budget")
	// ErrInvalidTimeout: a job's WithPartitionTimeout or WithRunTimeout is out of range.
	ErrInvalidTimeout = errors.New("invalid timeout")
	// ErrInvalidLimit: a job's WithLimit has a field out of range, or names a limit another
	// job declares otherwise.
	ErrInvalidLimit = errors.New("invalid limit")
	// ErrDuplicateSchedule: a schedule name is declared twice.
	ErrDuplicateSchedule = errors.New("schedule already declared")
	// ErrUnknownJob: a schedule names a job that is not registered (register it first).
	ErrUnknownJob = errors.New("no such job")
	// ErrInvalidSchedule: a schedule's expression, time zone or policy is invalid.
	ErrInvalidSchedule = errors.New("invalid schedule")
)

// RegistrationError is a refused registration of a job or a schedule: which one, which field
// (the name, the job itself, or an option such as its params) and what is wrong. Match it with
// errors.As, and its cause with errors.Is (ErrInvalidName, ErrDuplicateJob, ErrNilJob,
// ErrInvalidParams, ErrInvalidRetry, ErrInvalidBundle, ErrInvalidTimeout, ErrInvalidBudget, ErrInvalidLimit, ErrDuplicateSchedule, ErrUnknownJob,
// ErrInvalidSchedule).
type RegistrationError struct {
	// Schedule is the name passed to Schedule ("" for a job's registration).
	Schedule string
	// Job is the name passed to Register, or the job a schedule names.
	Job string
	// Field is "name", "job", "params", "bundle", "partitionTimeout", "runTimeout", "limit",
	// "retry.<field>" such as "retry.Attempts", "option" (a nil option, or an option's own
	// error), or a schedule's "cron", "timeZone", "overlap", "catchUp", "jitter" or
	// "autoPause".
	Field string
	Err   error
}

func (e *RegistrationError) Error() string {
	if e.Schedule != "" {
		return fmt.Sprintf("baton: schedule %q (job %q): %s: %v", e.Schedule, e.Job, e.Field, e.Err)
	}
	return fmt.Sprintf("baton: job %q: %s: %v", e.Job, e.Field, e.Err)
}

func (e *RegistrationError) Unwrap() error { return e.Err }
