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
	// ErrClosed is returned by Send after Close (also when the SDK reports its own sender or
	// connection closed). Permanent for this sender.
	ErrClosed = errors.New("sender closed")
	// ErrTransient marks a failure where sending the same messages again later may succeed
	// (connection lost, timeout, server busy, 5xx). errors.Is(err, ErrTransient) and
	// IsTransient(err) are equivalent. Context cancellation is never transient: it is the
	// caller's decision.
	ErrTransient = errors.New("transient")
	// ErrThrottled marks a transient failure in which the service asked the sender to slow
	// down (Service Bus server-busy, an entity or namespace quota reached; Storage 503
	// ServerBusy or 429). Every throttled error is also transient: errors.Is(err,
	// ErrTransient) holds. Callers back off for longer than after a blip, since sending again
	// at once adds to the load that caused it.
	ErrThrottled = errors.New("throttled")
)

// IsTransient reports whether err is marked as transient: re-sending the same messages
// (same IDs) later may succeed. False for nil, validation errors, ErrTooLarge, auth or
// not-found failures and context cancellation. True for throttling too.
func IsTransient(err error) bool { return errors.Is(err, ErrTransient) }

// IsThrottled reports whether err is marked as throttled (see ErrThrottled).
func IsThrottled(err error) bool { return errors.Is(err, ErrThrottled) }

// classified is an error marked with one or more classes, its message unchanged.
type classified struct {
	err     error
	classes []error
}

func (e classified) Error() string { return e.err.Error() }
func (e classified) Unwrap() error { return e.err }

func (e classified) Is(target error) bool {
	for _, c := range e.classes {
		if target == c {
			return true
		}
	}
	return false
}

// MarkTransient marks err as transient without changing its message (for adapters).
func MarkTransient(err error) error { return classified{err, []error{ErrTransient}} }

// MarkThrottled marks err as throttled, and so transient, without changing its message (for
// adapters).
func MarkThrottled(err error) error {
	return classified{err, []error{ErrThrottled, ErrTransient}}
}
