package bench

import (
	"math"
	"testing"
	"time"
)

// Starts every 10 ms, each running 30 ms: 100 starts/s, 3 in flight, at most 100 starts in any
// second; the first and last tenth are left out of the steady part.
func TestMeasurePace_Steady(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var spans []Span
	for i := 199; i >= 0; i-- { // out of order: MeasurePace sorts
		s := t0.Add(time.Duration(i) * 10 * time.Millisecond)
		spans = append(spans, Span{s, s.Add(30 * time.Millisecond)})
	}
	p := MeasurePace(spans, time.Second)
	if p.Partitions != 200 || p.SteadyStarts != 159 {
		t.Errorf("partitions %d, steady starts %d; want 200, 159", p.Partitions, p.SteadyStarts)
	}
	if !p.SteadyFrom.Equal(t0.Add(200*time.Millisecond)) || !p.SteadyTo.Equal(t0.Add(1790*time.Millisecond)) {
		t.Errorf("steady part %s to %s, want 200ms to 1.79s", p.SteadyFrom.Sub(t0), p.SteadyTo.Sub(t0))
	}
	if r := p.SteadyRate(); math.Abs(r-100) > 1e-9 {
		t.Errorf("steady rate %f, want 100", r)
	}
	// An end at the instant of a later start frees its slot first: 3 at once, never 4.
	if p.PeakInFlight != 3 {
		t.Errorf("peak in flight %d, want 3", p.PeakInFlight)
	}
	if math.Abs(p.MeanInFlight-3) > 0.02 {
		t.Errorf("mean in flight %f, want 3", p.MeanInFlight)
	}
	if p.PeakStarts != 100 {
		t.Errorf("peak starts per second %d, want 100", p.PeakStarts)
	}
}

// A burst, a pause and another burst: the peak counts the densest second, the steady rate the
// whole middle, pause included.
func TestMeasurePace_Bursts(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var spans []Span
	for i := range 50 {
		s := t0.Add(time.Duration(i) * time.Millisecond)
		spans = append(spans, Span{s, s.Add(time.Millisecond)})
	}
	for i := range 50 {
		s := t0.Add(5*time.Second + time.Duration(i)*time.Millisecond)
		spans = append(spans, Span{s, s.Add(time.Millisecond)})
	}
	p := MeasurePace(spans, time.Second)
	if p.PeakStarts != 50 || p.PeakInFlight != 1 {
		t.Errorf("peak starts %d, peak in flight %d; want 50, 1", p.PeakStarts, p.PeakInFlight)
	}
	want := 79 / (5*time.Second + 39*time.Millisecond - 10*time.Millisecond).Seconds()
	if r := p.SteadyRate(); math.Abs(r-want) > 1e-9 {
		t.Errorf("steady rate %f, want %f", r, want)
	}
}

func TestMeasurePace_Empty(t *testing.T) {
	if p := MeasurePace(nil, time.Second); p.Partitions != 0 || p.SteadyRate() != 0 {
		t.Errorf("empty: %+v", p)
	}
	one := time.Now()
	if p := MeasurePace([]Span{{one, one.Add(time.Second)}}, 0); p.SteadyRate() != 0 || p.PeakInFlight != 1 || p.PeakStarts != 0 {
		t.Errorf("one partition: %+v", p)
	}
}

// Starts reserved one interval (10 ms) apart: on time, the bound is 0; when the fourth to the
// seventh ran together at the seventh's time, the fourth ran (at least) 30 ms late.
func TestBehind(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	spans := func(ms ...int) []Span {
		var out []Span
		for _, m := range ms {
			s := t0.Add(time.Duration(m) * time.Millisecond)
			out = append(out, Span{s, s})
		}
		return out
	}
	if got := Behind(spans(0, 10, 20, 30, 40, 50, 60, 70, 80, 90), 10*time.Millisecond); got != 0 {
		t.Errorf("on time: behind %s, want 0", got)
	}
	if got := Behind(spans(0, 10, 20, 60, 60, 60, 60, 70, 80, 90), 10*time.Millisecond); got != 30*time.Millisecond {
		t.Errorf("behind %s, want 30ms", got)
	}
	if got := Behind(nil, time.Millisecond); got != 0 {
		t.Errorf("no starts: behind %s", got)
	}
}
