package coordinator

import (
	"testing"
	"time"
)

// testBlobLockDuration is the shortest lease storage allows, to keep expiry tests short.
const testBlobLockDuration = 15 * time.Second

// waitFor polls cond every 50ms until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
