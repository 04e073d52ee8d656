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
