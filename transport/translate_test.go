package transport

import (
	"errors"
	"testing"
)

// checkTranslated holds an adapter's error translation to the package's rules: nil stays nil,
// the transient and too-large classifications are as wanted, and the original stays in the
// chain for errors.Is/As.
func checkTranslated(t *testing.T, orig, got error, wantTransient, wantTooLarge bool) {
	t.Helper()
	if (got == nil) != (orig == nil) {
		t.Fatalf("got %v for %v", got, orig)
	}
	if IsTransient(got) != wantTransient {
		t.Errorf("IsTransient: got %v want %v", IsTransient(got), wantTransient)
	}
	if errors.Is(got, ErrTooLarge) != wantTooLarge {
		t.Errorf("errors.Is ErrTooLarge: got %v want %v", errors.Is(got, ErrTooLarge), wantTooLarge)
	}
	if orig != nil && !errors.Is(got, orig) {
		t.Errorf("the translated error %v does not wrap the original", got)
	}
}
