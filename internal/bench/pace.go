package bench

import (
	"slices"
	"time"
)

// Span is when one partition ran: its result's Started and Finished.
type Span struct{ Start, End time.Time }

// Pace is what a run's partition spans say about its pace under a limit. The steady part of
// a run is from the start of its partition at the 10th percentile of start times to the one at
// the 90th (the first and last tenth of the partitions left out: planning's start-up, and the
// tail where fewer bundles are left than the limit admits).
type Pace struct {
	Partitions int
	// SteadyFrom and SteadyTo bound the steady part; SteadyStarts are the starts after the
	// first in it.
	SteadyFrom, SteadyTo time.Time
	SteadyStarts         int
	// PeakInFlight is the most partitions running at once anywhere in the run; MeanInFlight
	// the mean over the steady part (the partitions' run time within it ÷ its length).
	PeakInFlight int
	MeanInFlight float64
	// PeakStarts is the most starts within any stretch of Per (a rate limit's period).
	Per        time.Duration
	PeakStarts int
}

// SteadyRate is the starts per second over the steady part (0 when it has no length).
func (p Pace) SteadyRate() float64 {
	d := p.SteadyTo.Sub(p.SteadyFrom)
	if d <= 0 {
		return 0
	}
	return float64(p.SteadyStarts) / d.Seconds()
}

// MeasurePace measures spans (which it sorts by start); per is the period PeakStarts counts
// over (0: not counted).
func MeasurePace(spans []Span, per time.Duration) Pace {
	p := Pace{Partitions: len(spans), Per: per}
	if len(spans) == 0 {
		return p
	}
	slices.SortFunc(spans, func(a, b Span) int { return a.Start.Compare(b.Start) })
	lo, hi := len(spans)/10, len(spans)-1-len(spans)/10
	p.SteadyFrom, p.SteadyTo, p.SteadyStarts = spans[lo].Start, spans[hi].Start, hi-lo

	// In flight: +1 at a start, −1 at an end; an end at the same instant as a start comes first.
	type event struct {
		at time.Time
		d  int
	}
	events := make([]event, 0, 2*len(spans))
	var busy time.Duration
	for _, s := range spans {
		events = append(events, event{s.Start, +1}, event{s.End, -1})
		from, to := maxTime(s.Start, p.SteadyFrom), minTime(s.End, p.SteadyTo)
		if to.After(from) {
			busy += to.Sub(from)
		}
	}
	slices.SortFunc(events, func(a, b event) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.d - b.d
	})
	n := 0
	for _, e := range events {
		n += e.d
		p.PeakInFlight = max(p.PeakInFlight, n)
	}
	if d := p.SteadyTo.Sub(p.SteadyFrom); d > 0 {
		p.MeanInFlight = float64(busy) / float64(d)
	}

	if per > 0 {
		i := 0
		for j := range spans {
			for spans[j].Start.Sub(spans[i].Start) >= per {
				i++
			}
			p.PeakStarts = max(p.PeakStarts, j-i+1)
		}
	}
	return p
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Behind is a lower bound on how late some start ran behind its reservation, for starts
// under a rate of one start per interval with a burst of 1: every reservation is at least an
// interval after the one before, so k+1 starts within less than k intervals mean one of them
// ran at least the difference late (and caught up in a burst). It sorts spans by start.
func Behind(spans []Span, interval time.Duration) time.Duration {
	if len(spans) == 0 {
		return 0
	}
	slices.SortFunc(spans, func(a, b Span) int { return a.Start.Compare(b.Start) })
	// With a_k = k·interval − (t_k − t_0), the bound over starts j < k is a_k − a_j.
	var worst, low time.Duration
	for k, s := range spans {
		a := time.Duration(k)*interval - s.Start.Sub(spans[0].Start)
		worst, low = max(worst, a-low), min(low, a)
	}
	return worst
}
