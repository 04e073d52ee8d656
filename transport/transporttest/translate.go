package transporttest

import (
	"errors"
	"testing"

	"github.com/batonfn/baton/transport"
)

// CheckTranslated holds an adapter's error translation to the package's rules: nil stays nil,
// the transient and too-large classifications are as wanted, and the original stays in the
// chain for errors.Is/As.
func CheckTranslated(t *testing.T, orig, got error, wantTransient, wantTooLarge bool) {
	t.Helper()
	if (got == nil) != (orig == nil) {
		t.Fatalf("got %v for %v", got, orig)
	}
	if transport.IsTransient(got) != wantTransient {
		t.Errorf("IsTransient: got %v want %v", transport.IsTransient(got), wantTransient)
	}
	if errors.Is(got, transport.ErrTooLarge) != wantTooLarge {
		t.Errorf("errors.Is ErrTooLarge: got %v want %v", errors.Is(got, transport.ErrTooLarge), wantTooLarge)
	}
	if orig != nil && !errors.Is(got, orig) {
		t.Errorf("the translated error %v does not wrap the original", got)
	}
}
