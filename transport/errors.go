package transport

import "errors"

var (
	// ErrTooLarge means a message body exceeds what the transport can carry (48 KiB raw on the
	// Storage queue; the batch/message size limit of the Service Bus entity). Permanent: the
	// same message will never fit.
	ErrTooLarge = errors.New("message too large")
	// ErrInvalid means a message breaks a rule every transport enforces (empty or overlong ID,
	// negative TTL). Permanent.
	ErrInvalid = errors.New("invalid message")
	// ErrClosed is returned by Send after Close.
	ErrClosed = errors.New("sender closed")
	// ErrTransient marks a failure where sending the same messages again later may succeed
	// (connection lost, timeout, server busy, 5xx). errors.Is(err, ErrTransient) and
	// IsTransient(err) are equivalent. Context cancellation is never transient: it is the
	// caller's decision.
	ErrTransient = errors.New("transient")
)

// IsTransient reports whether err is marked as transient: re-sending the same messages
// (same IDs) later may succeed. False for nil, validation errors, ErrTooLarge, auth or
// not-found failures and context cancellation.
func IsTransient(err error) bool { return errors.Is(err, ErrTransient) }

// transientError is an error marked transient.
type transientError struct{ err error }

func (e transientError) Error() string        { return e.err.Error() }
func (e transientError) Unwrap() error        { return e.err }
func (e transientError) Is(target error) bool { return target == ErrTransient }

// MarkTransient marks err as transient without changing its message (for adapters).
func MarkTransient(err error) error { return transientError{err} }
