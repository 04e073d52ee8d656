// Package eventually waits in tests for a condition that other goroutines make true.
package eventually

import (
	"testing"
	"time"
)

// True returns once cond reports true, looking every millisecond; it fails tb when a minute
// passes first.
func True(tb testing.TB, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatal("condition not met within a minute")
		}
		time.Sleep(time.Millisecond)
	}
}
