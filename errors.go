package baton

import (
	"errors"
	"fmt"
)

// Sentinels a *RegistrationError wraps, for errors.Is.
var (
	// ErrInvalidName: a job name is empty or not 1–63 characters of a-z, 0-9, '-' and '_'
	// starting with a letter.
	ErrInvalidName = errors.New("invalid job name")
	// ErrDuplicateJob: a job name is registered twice.
	ErrDuplicateJob = errors.New("job already registered")
	// ErrNilJob: a nil Job, a TypedJob missing a function, or a job option that is nil.
	ErrNilJob = errors.New("nil job")
	// ErrInvalidParams: a job's default params are not a JSON object its ParamsValidator accepts.
	ErrInvalidParams = errors.New("invalid params")
	// ErrInvalidRetry: a job's RetryPolicy has a field out of range.
	ErrInvalidRetry = errors.New("invalid retry policy")
)

// RegistrationError is a refused registration: which job, which field (the name, the job
// itself, or an option such as its params) and what is wrong. Match it with errors.As, and
// its cause with errors.Is (ErrInvalidName, ErrDuplicateJob, ErrNilJob, ErrInvalidParams,
// ErrInvalidRetry).
type RegistrationError struct {
	Job   string // the name passed to Register
	Field string // "name", "job", "params", or "retry.<field>" such as "retry.Attempts"
	Err   error
}

func (e *RegistrationError) Error() string {
	return fmt.Sprintf("baton: job %q: %s: %v", e.Job, e.Field, e.Err)
}

func (e *RegistrationError) Unwrap() error { return e.Err }
