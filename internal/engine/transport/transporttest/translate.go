package transporttest

import (
	"errors"
	"testing"

	"github.com/batonfn/baton/internal/engine/transport"
)

// Class is the classification an adapter's error translation gives an SDK error.
type Class string

// The classes of the transport package: exactly one applies to every non-nil translated error.
const (
	// Permanent: no class marker (auth, not found, validation, context cancellation, unknown).
	Permanent Class = "permanent"
	// Transient: transport.IsTransient and not throttled (connection lost, timeout).
	Transient Class = "transient"
	// Throttled: transport.IsThrottled, which implies transient (server busy, quota).
	Throttled Class = "throttled"
	// TooLarge: errors.Is transport.ErrTooLarge, not transient.
	TooLarge Class = "too large"
	// Closed: errors.Is transport.ErrClosed, not transient.
	Closed Class = "closed"
)

// ClassOf returns the class of a translated error ("" for nil).
func ClassOf(err error) Class {
	switch {
	case err == nil:
		return ""
	case transport.IsThrottled(err):
		return Throttled
	case transport.IsTransient(err):
		return Transient
	case errors.Is(err, transport.ErrTooLarge):
		return TooLarge
	case errors.Is(err, transport.ErrClosed):
		return Closed
	}
	return Permanent
}

// CheckTranslated holds an adapter's error translation to the package's rules: nil stays nil,
// the class is the one wanted, a throttled error is transient too, a too-large or closed one
// is not, and the original stays in the chain for errors.Is/As.
func CheckTranslated(t *testing.T, orig, got error, want Class) {
	t.Helper()
	if (got == nil) != (orig == nil) {
		t.Fatalf("got %v for %v", got, orig)
	}
	if got == nil {
		return
	}
	if c := ClassOf(got); c != want {
		t.Errorf("class of %v: got %s want %s", got, c, want)
	}
	if transport.IsThrottled(got) && !transport.IsTransient(got) {
		t.Errorf("%v is throttled but not transient", got)
	}
	if (errors.Is(got, transport.ErrTooLarge) || errors.Is(got, transport.ErrClosed)) && transport.IsTransient(got) {
		t.Errorf("%v is permanent (too large or closed) yet marked transient", got)
	}
	if !errors.Is(got, orig) {
		t.Errorf("the translated error %v does not wrap the original", got)
	}
}
