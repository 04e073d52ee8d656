package storagequeue

import (
	"testing"
	"time"
)

// A store that serves c calls side by side, each in d: with w in flight a call takes
// d × max(1, w/c).
func served(c, w int, d time.Duration) time.Duration {
	return d * time.Duration(max(1, (w+c-1)/c))
}

func TestWindow_OpensWhileLatencyHolds(t *testing.T) {
	w := newWindow(DefaultParallelism)
	for range 30 {
		w.observe(500, w.size(), time.Millisecond, false)
	}
	if got := w.size(); got != MaxParallelism {
		t.Errorf("window %d after steady latency, want %d", got, MaxParallelism)
	}
}

func TestWindow_SmallSendsDoNotOpenIt(t *testing.T) {
	w := newWindow(DefaultParallelism)
	for range 30 {
		w.observe(8, 8, time.Millisecond, false) // a plan batch of 8 bundles
	}
	if got := w.size(); got != DefaultParallelism {
		t.Errorf("window %d after sends smaller than it, want %d", got, DefaultParallelism)
	}
}

func TestWindow_ClosesWhenCallsQueueAtTheStore(t *testing.T) {
	w := newWindow(DefaultParallelism)
	for range 10 {
		w.observe(500, w.size(), served(64, w.size(), time.Millisecond), false)
	}
	opened := w.size()
	// The store slows to a quarter of its speed (other clients load it): the calls wait.
	for range 10 {
		w.observe(500, w.size(), 4*served(64, w.size(), time.Millisecond), false)
	}
	if got := w.size(); got >= opened/4 || got < MinParallelism {
		t.Errorf("window %d after the store slowed, want below a quarter of %d and at least %d", got, opened, MinParallelism)
	}
}

func TestWindow_SettlesAtTheStoresWidth(t *testing.T) {
	// A store serving 24 calls side by side: past 24 every call waits for a second turn.
	w := newWindow(8)
	for range 100 {
		w.observe(500, w.size(), served(24, w.size(), time.Millisecond), false)
	}
	if got := w.size(); got < 24 || got > 48 {
		t.Errorf("window %d against a store 24 wide, want 24 to 48", got)
	}
}

func TestWindow_HalvesWhenThrottled(t *testing.T) {
	w := newWindow(32)
	w.observe(10, 32, time.Millisecond, true)
	if got := w.size(); got != 16 {
		t.Errorf("window %d after a throttled send, want 16", got)
	}
	for range 10 {
		w.observe(10, w.size(), 0, true)
	}
	if got := w.size(); got != MinParallelism {
		t.Errorf("window %d, want the floor %d", got, MinParallelism)
	}
}
