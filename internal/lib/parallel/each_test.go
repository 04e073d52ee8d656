package parallel

import (
	"sync"
	"sync/atomic"
	"testing"
)

func TestEach_EveryIndexOnceWithinTheBound(t *testing.T) {
	for _, workers := range []int{0, 1, 4, 100} {
		const n = 50
		var (
			inFlight, peak atomic.Int64
			mu             sync.Mutex
			seen           = map[int]int{}
		)
		Each(n, workers, func(i int) bool {
			k := inFlight.Add(1)
			defer inFlight.Add(-1)
			for p := peak.Load(); k > p && !peak.CompareAndSwap(p, k); p = peak.Load() {
			}
			mu.Lock()
			seen[i]++
			mu.Unlock()
			return true
		})
		if len(seen) != n {
			t.Errorf("workers %d: %d indexes called, want %d", workers, len(seen), n)
		}
		for i, c := range seen {
			if c != 1 || i < 0 || i >= n {
				t.Errorf("workers %d: index %d called %d times", workers, i, c)
			}
		}
		if bound := int64(min(max(workers, 1), n)); peak.Load() > bound {
			t.Errorf("workers %d: %d calls at once, want at most %d", workers, peak.Load(), bound)
		}
	}
}

func TestEach_FalseStopsThatWorker(t *testing.T) {
	var calls atomic.Int64
	Each(10, 1, func(i int) bool {
		calls.Add(1)
		return i < 3
	})
	if got := calls.Load(); got != 4 {
		t.Errorf("%d calls, want 4 (indexes 0 to 3, the last returning false)", got)
	}
}

func TestEach_Empty(t *testing.T) {
	Each(0, 4, func(int) bool { t.Error("called for n = 0"); return true })
}
