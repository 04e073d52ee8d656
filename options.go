package baton

import (
	"encoding/json"
	"errors"
	"fmt"

	jsonparams "github.com/batonfn/baton/internal/lib/params"
	"github.com/batonfn/baton/work"
)

// JobOption configures one registration (see Register). A bad option is a *RegistrationError
// from Register, naming the field.
type JobOption func(*jobSpec) error

// jobSpec is a registration being built by its options.
type jobSpec struct {
	job    Job
	params json.RawMessage
	retry  *RetryPolicy
	bundle int    // 0: the default
	field  string // the field check found wrong
}

// RetryPolicy says how often a partition whose Process fails is tried and how long to wait
// between tries (exponential backoff with jitter); a failure marked Permanent is never
// retried. Each zero field takes its default: 5 tries, 10 s before the second, doubling, at
// most 5 min, each wait shortened by up to a fifth. See WithRetry.
type RetryPolicy = work.RetryPolicy

// WithRetry sets the job's retry policy. A try that fails is retried as a new message
// scheduled after the policy's delay, on Service Bus and the Storage queue alike; after the
// last try the partition is recorded failed with each try's error, and the run can finish
// partial. A field out of range is a *RegistrationError naming it ("retry.Attempts", ...)
// wrapping ErrInvalidRetry. Default: the zero RetryPolicy, i.e. every default.
func WithRetry(p RetryPolicy) JobOption {
	return func(s *jobSpec) error {
		if err := p.Validate(); err != nil {
			field := "retry"
			var pe *work.PolicyError
			if errors.As(err, &pe) {
				field += "." + pe.Field
			}
			return &RegistrationError{Field: field, Err: fmt.Errorf("%w: %w", ErrInvalidRetry, err)}
		}
		s.retry = &p
		return nil
	}
}

// MaxBundle is the most partitions of a job one message can carry (see WithMaxBundle).
const MaxBundle = work.MaxBundle

// DefaultMaxBundle is a job's cap on partitions per message unless WithMaxBundle sets one.
const DefaultMaxBundle = work.DefaultMaxBundle

// BundleConcurrency is the most partitions of one message that run at once; the rest of a
// bundle waits for a free slot.
const BundleConcurrency = work.BundleConcurrency

// WithMaxBundle caps how many of the job's partitions one message carries. The leader sends a
// plan batch in bundles of consecutive partitions — a power of two up to the cap, small enough
// that the batch still spreads over at least 8 messages and that the payloads fit one message —
// and a worker runs a bundle's partitions in one invocation, up to BundleConcurrency at once.
// Each partition keeps its own result, retries and report entry; a bundle that comes back (its
// invocation failed, timed out, or its instance died) is sent again one partition per message.
// A bundle costs one send, delivery and completion on the queue and one done record append and
// partial update in storage, so larger bundles cost less per partition. They also take longer:
// beyond BundleConcurrency a bundle's partitions run one after another, so a job whose
// partitions take long enough that a bundle's would come near the function timeout, or that
// holds scarce resources per partition (connections, memory: an instance runs up to the host's
// concurrent deliveries times min(cap, BundleConcurrency) of them at once), should set a
// smaller cap. 1 sends every partition alone.
//
// A cap above DefaultMaxBundle, up to MaxBundle, is for jobs of many short partitions: it
// trades spread for fewer messages, in proportion. A batch then goes as at least
// 8×DefaultMaxBundle/n messages instead of 8 — 4 at 512, 2 at 1,024, so the default batch of
// 2,048 goes as 2 messages of 1,024 — and a bundle runs up to n/BundleConcurrency partition
// times one after another (32 at 1,024), which must stay well inside the function timeout
// (host.json's functionTimeout, which the Service Bus lock renewal must cover, a setting Baton
// checks at start-up). Fewer, larger messages mean fewer instances at work on a run at once.
// The storage calls per partition stay the same: a bundle over 256 updates one partial and
// appends one done record per 256 partitions.
//
// n outside 1 to MaxBundle is a *RegistrationError for the field "bundle" wrapping
// ErrInvalidBundle. Default: DefaultMaxBundle (256).
func WithMaxBundle(n int) JobOption {
	return func(s *jobSpec) error {
		if n < 1 || n > MaxBundle {
			return &RegistrationError{Field: "bundle", Err: fmt.Errorf("%w: %d, want 1 to %d", ErrInvalidBundle, n, MaxBundle)}
		}
		s.bundle = n
		return nil
	}
}

// WithDefaultParams gives the job params for a run that names it without any: the timer's
// run when BATON_JOB names the job and BATON_JOB_PARAMS is unset, and a manual run that names
// the job and sends no params. params is a JSON object (json.RawMessage, []byte or string) or
// a Go value that encodes to one; the job's ParamsValidator must accept it. Default: none, so
// such a run gets no params.
func WithDefaultParams(params any) JobOption {
	return func(s *jobSpec) error {
		raw, err := jsonparams.Object(params)
		if err != nil {
			return &RegistrationError{Field: "params", Err: fmt.Errorf("%w: %w", ErrInvalidParams, err)}
		}
		s.params = raw
		return nil
	}
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
