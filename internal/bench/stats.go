package bench

import (
	"math"
	"slices"
	"sync"
	"time"
)

// Samples collects durations from many goroutines.
type Samples struct {
	mu sync.Mutex
	d  []time.Duration
}

// Add records one duration.
func (s *Samples) Add(d time.Duration) {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
}

// Len is the number of durations recorded.
func (s *Samples) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.d)
}

// Percentile returns the nearest-rank p-th percentile (0 < p ≤ 100) of the recorded durations,
// or 0 when there are none: the smallest value with at least p% of the samples at or below it.
func (s *Samples) Percentile(p float64) time.Duration {
	s.mu.Lock()
	d := slices.Clone(s.d)
	s.mu.Unlock()
	return Percentile(d, p)
}

// Percentile is the nearest-rank p-th percentile of d (which it sorts), 0 when d is empty.
func Percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	rank := int(math.Ceil(p*float64(len(d))/100 - 1e-9)) // exact ranks stay exact
	return d[min(max(rank, 1), len(d))-1]
}

// Ratio is a/b, or 0 when b is 0.
func Ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
