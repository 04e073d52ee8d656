package baton

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/batonfn/baton/internal/app"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/limit"
	jsonparams "github.com/batonfn/baton/internal/lib/params"
	"github.com/batonfn/baton/work"
)

// JobOption configures one registration (see App.Register).
type JobOption interface {
	applyJob(*jobSpec) error
}

type jobOption func(*jobSpec) error

func (o jobOption) applyJob(s *jobSpec) error { return o(s) }

// jobSpec is a registration being built by its options.
type jobSpec struct {
	job     Job
	params  json.RawMessage
	retry   *RetryPolicy
	bundle  int           // 0: the default
	timeout time.Duration // 0: none
	budget  *ledger.Budget
	run     time.Duration // 0: the app's BATON_RUN_TIMEOUT
	limit   *limit.Spec
	field   string // the field check found wrong
}

// RetryPolicy says how often a partition whose Process fails is tried, and how long to wait
// between tries (exponential backoff with jitter). A failure marked Permanent is never retried.
// A zero field takes its default.
type RetryPolicy struct {
	// Attempts is how many times Process runs at most, the first included (1: no retry).
	// Default 5, at most 10.
	Attempts int
	// InitialDelay is the wait before the second attempt. Default 10 s.
	InitialDelay time.Duration
	// Multiplier grows each wait from the one before. Default 2; at least 1.
	Multiplier float64
	// MaxDelay caps every wait. Default 5 min; at least InitialDelay, at most 24 h.
	MaxDelay time.Duration
	// Jitter shortens each wait by up to this fraction (0..1), the same for a redelivered try.
	// Default 0.2; a negative value turns jitter off.
	Jitter float64
}

func (p RetryPolicy) engine() work.RetryPolicy {
	return work.RetryPolicy{Attempts: p.Attempts, InitialDelay: p.InitialDelay, Multiplier: p.Multiplier, MaxDelay: p.MaxDelay, Jitter: p.Jitter}
}

// WithRetry sets the job's retry policy. A failed try is retried as a new message after the
// policy's delay; after the last, the partition is recorded failed with each try's error. A
// field out of range is a *RegistrationError naming it ("retry.Attempts", ...) wrapping
// ErrInvalidRetry. Default: the zero RetryPolicy, every default.
func WithRetry(p RetryPolicy) JobOption {
	return jobOption(func(s *jobSpec) error {
		if err := p.engine().Validate(); err != nil {
			field := "retry"
			var pe *work.PolicyError
			if errors.As(err, &pe) {
				field += "." + pe.Field
			}
			return &RegistrationError{Field: field, Err: fmt.Errorf("%w: %w", ErrInvalidRetry, err)}
		}
		s.retry = &p
		return nil
	})
}

// Bundle limits: see WithMaxBundle.
const (
	// MaxBundle is the most partitions of a job one message can carry.
	MaxBundle = work.MaxBundle
	// DefaultMaxBundle is a job's cap unless WithMaxBundle sets one.
	DefaultMaxBundle = work.DefaultMaxBundle
	// BundleConcurrency is the most partitions of one message that run at once.
	BundleConcurrency = work.BundleConcurrency
	// MaxPayloadBytes is the largest payload a partition may have.
	MaxPayloadBytes = work.MaxPayloadBytes
)

// WithMaxBundle caps how many of the job's partitions one message carries, 1 to MaxBundle. A
// worker runs a bundle in one invocation, up to BundleConcurrency partitions at once, so larger
// bundles cost fewer messages and storage calls per partition but run longer and spread over
// fewer instances. Lower it for slow or resource-heavy partitions (1 sends each alone); raise
// it above the default only for many short ones, keeping a bundle well inside the function
// timeout. Out of range is a *RegistrationError for "bundle" wrapping ErrInvalidBundle.
// Default: DefaultMaxBundle.
func WithMaxBundle(n int) JobOption {
	return jobOption(func(s *jobSpec) error {
		if n < 1 || n > MaxBundle {
			return &RegistrationError{Field: "bundle", Err: fmt.Errorf("%w: %d, want 1 to %d", ErrInvalidBundle, n, MaxBundle)}
		}
		s.bundle = n
		return nil
	})
}

// MaxPartitionTimeout is the longest WithPartitionTimeout.
const MaxPartitionTimeout = 24 * time.Hour

// WithPartitionTimeout bounds each try of one of the job's partitions: after d its context is
// cancelled and the try fails as timed out ("partition timed out after d"), retried under the
// job's retry policy like any other failure. A Process that does not return within a second
// of the cancel is abandoned: its outcome is never recorded. Keep d below the function timeout,
// which bounds a whole bundle. Outside 1 ms to MaxPartitionTimeout is a *RegistrationError for
// "partitionTimeout" wrapping ErrInvalidTimeout. Default: none (the invocation's deadline).
func WithPartitionTimeout(d time.Duration) JobOption {
	return jobOption(func(s *jobSpec) error {
		if d < time.Millisecond || d > MaxPartitionTimeout {
			return &RegistrationError{Field: "partitionTimeout", Err: fmt.Errorf("%w: %s, want 1ms to %s", ErrInvalidTimeout, d, MaxPartitionTimeout)}
		}
		s.timeout = d
		return nil
	})
}

// FailureBudget bounds how many of a run's partitions may fail before the run stops early. A
// partition counts once it has failed for good (its retries spent, or a Permanent error); past
// the budget the run ends failed with the budget as its reason, and its partitions not yet
// run never run (those in flight see their context cancelled). A zero field is no bound.
type FailureBudget struct {
	// MaxFailed: the run stops once more partitions than this have failed.
	MaxFailed int
	// MaxPercent: the run stops once more than this share (0 to 100) of its partitions has
	// failed, counted once planning has ended and the partition count is known.
	MaxPercent float64
}

// BudgetOption is WithFailureBudget's option: given to App.Register it is the job's budget, to
// JobHandle.Schedule the schedule's runs' budget, in place of the job's.
type BudgetOption interface {
	JobOption
	ScheduleOption
}

type budgetOption FailureBudget

func (o budgetOption) budget() (*ledger.Budget, error) {
	b := ledger.Budget{MaxFailed: o.MaxFailed, MaxPercent: o.MaxPercent}
	if err := b.Validate(); err != nil {
		return nil, &RegistrationError{Field: "failureBudget", Err: fmt.Errorf("%w: %w", ErrInvalidBudget, err)}
	}
	return &b, nil
}

func (o budgetOption) applyJob(s *jobSpec) error {
	b, err := o.budget()
	s.budget = b
	return err
}

func (o budgetOption) applySchedule(s *app.Schedule) error {
	b, err := o.budget()
	s.Budget = b
	return err
}

// WithFailureBudget stops a run early once more of its partitions have failed than b allows,
// instead of running every partition against a dependency that is down. The setting
// BATON_FAILURE_BUDGETS overrides it per job without a rebuild. A negative bound, or a
// percentage above 100, is a *RegistrationError for "failureBudget" wrapping
// ErrInvalidBudget. Default: no budget (every partition runs).
func WithFailureBudget(b FailureBudget) BudgetOption { return budgetOption(b) }

// Run timeout limits: see WithRunTimeout.
const (
	// MinRunTimeout is the shortest WithRunTimeout.
	MinRunTimeout = time.Minute
	// MaxRunTimeout is the longest WithRunTimeout: the work queue's message time to live, so
	// a partition still queued when its run times out has not expired.
	MaxRunTimeout = config.MaxRunTimeout
)

// WithRunTimeout gives the job's runs their own run timeout in place of the app's
// BATON_RUN_TIMEOUT: d after its start (planning) or after its planning ended, a run's missing
// partitions are re-enqueued, and once the check rounds run out they are recorded timed out
// (see docs/jobs.md). Each run keeps the timeout it was created with. Outside MinRunTimeout to
// MaxRunTimeout is a *RegistrationError for "runTimeout" wrapping ErrInvalidTimeout. Default:
// BATON_RUN_TIMEOUT.
func WithRunTimeout(d time.Duration) JobOption {
	return jobOption(func(s *jobSpec) error {
		if d < MinRunTimeout || d > MaxRunTimeout {
			return &RegistrationError{Field: "runTimeout", Err: fmt.Errorf("%w: %s, want %s to %s", ErrInvalidTimeout, d, MinRunTimeout, MaxRunTimeout)}
		}
		s.run = d
		return nil
	})
}

// WithDefaultParams gives the job params for a run that names it without any: the settings'
// schedule (BATON_JOB without BATON_JOB_PARAMS), its schedules without WithParams, and manual
// runs that send none. params is a JSON object (json.RawMessage, []byte or string) or a Go
// value that encodes to one, which the job's ParamsValidator must accept. Default: none.
func WithDefaultParams(params any) JobOption {
	return jobOption(func(s *jobSpec) error {
		raw, err := jsonparams.Object(params)
		if err != nil {
			return &RegistrationError{Field: "params", Err: fmt.Errorf("%w: %w", ErrInvalidParams, err)}
		}
		s.params = raw
		return nil
	})
}

// check validates the registration as its options left it.
func (s *jobSpec) check() error {
	if s.params == nil {
		return nil
	}
	if v, ok := s.job.(ParamsValidator); ok {
		if err := v.ValidateParams(s.params); err != nil {
			s.field = "params"
			return fmt.Errorf("%w: %w", ErrInvalidParams, err)
		}
	}
	return nil
}
