package latency

import (
	"testing"
	"time"
)

func TestFloor_LowestOfTheRecentWindow(t *testing.T) {
	var f Floor
	if got := f.Observe(5 * time.Millisecond); got != 5*time.Millisecond {
		t.Fatalf("first observation: floor %s, want itself", got)
	}
	if got := f.Observe(9 * time.Millisecond); got != 5*time.Millisecond {
		t.Errorf("floor %s, want the earlier 5ms", got)
	}
	if got := f.Observe(2 * time.Millisecond); got != 2*time.Millisecond {
		t.Errorf("floor %s, want the new 2ms", got)
	}
	// Once Window slower observations have followed, the 2 ms is forgotten.
	for range Window {
		f.Observe(10 * time.Millisecond)
	}
	if got := f.Observe(10 * time.Millisecond); got != 10*time.Millisecond {
		t.Errorf("floor %s after %d observations of 10ms, want 10ms", got, Window)
	}
}

func TestFloor_LowIsTheLowestRecorded(t *testing.T) {
	var f Floor
	if got := f.Low(); got != 0 {
		t.Fatalf("Low before any observation: %s, want 0", got)
	}
	f.Observe(7 * time.Millisecond)
	f.Observe(3 * time.Millisecond)
	f.Observe(9 * time.Millisecond)
	if got := f.Low(); got != 3*time.Millisecond {
		t.Errorf("Low: %s, want 3ms", got)
	}
	for range Window {
		f.Observe(10 * time.Millisecond)
	}
	if got := f.Low(); got != 10*time.Millisecond {
		t.Errorf("Low after %d observations of 10ms: %s, want 10ms (the 3ms is out of the window)", Window, got)
	}
}
