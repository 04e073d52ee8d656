package work

import (
	"testing"
	"time"
)

// WaitFor waits until cond holds, failing t after a generous deadline. It is exported for
// this package's external tests (package work_test) as well as its own.
func WaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
