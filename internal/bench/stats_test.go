package bench

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // 100..1, unsorted on purpose
	}
	for _, c := range []struct {
		name string
		d    []time.Duration
		p    float64
		want time.Duration
	}{
		{"empty is zero", nil, 50, 0},
		{"one sample is every percentile", ms(7), 99, 7 * time.Millisecond},
		{"median of an odd count", ms(3, 1, 2), 50, 2 * time.Millisecond},
		{"median of an even count is the lower middle", ms(4, 1, 3, 2), 50, 2 * time.Millisecond},
		{"p50 of 1..100 is 50", ms(hundred...), 50, 50 * time.Millisecond},
		{"p99 of 1..100 is 99, not the max", ms(hundred...), 99, 99 * time.Millisecond},
		{"p100 is the max", ms(hundred...), 100, 100 * time.Millisecond},
		{"p1 of 1..100 is 1", ms(hundred...), 1, 1 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Percentile(c.d, c.p); got != c.want {
				t.Errorf("Percentile(%v, %v) = %v, want %v", c.d, c.p, got, c.want)
			}
		})
	}
}

func TestSamples_ConcurrentAdd(t *testing.T) {
	var s Samples
	done := make(chan struct{})
	for g := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 100 {
				s.Add(time.Duration(g*100+i+1) * time.Microsecond)
			}
		}()
	}
	for range 8 {
		<-done
	}
	if s.Len() != 800 {
		t.Fatalf("Len = %d, want 800", s.Len())
	}
	if got := s.Percentile(100); got != 800*time.Microsecond {
		t.Errorf("max = %v, want 800µs", got)
	}
	if got := s.Percentile(50); got != 400*time.Microsecond {
		t.Errorf("median = %v, want 400µs", got)
	}
}

func TestRatio(t *testing.T) {
	if got := Ratio(3*time.Second, 2*time.Second); got != 1.5 {
		t.Errorf("Ratio(3s, 2s) = %v, want 1.5", got)
	}
	if got := Ratio(time.Second, 0); got != 0 {
		t.Errorf("Ratio(1s, 0) = %v, want 0", got)
	}
}
