package work

import (
	"context"
	"sync"
)

// finishGate lets one attempt to finish a run run at a time in this process and coalesces the
// others into it: a call that comes while an attempt runs hands itself over and returns false
// at once, and the running attempt, if it did not finish the run, tries once more for all of
// them. The report's claim, whose token is this process's, needs one attempt at a time; why
// coalescing pays is in docs/design.md (Done shards).
type finishGate struct {
	mu   sync.Mutex
	runs map[string]*handedOver
}

// handedOver is what the calls that came during a run's attempt asked for.
type handedOver struct {
	again   bool // some call came: try once more
	listing bool // one of them wanted the listing alone to decide (TryFinishByListing)
}

// finish runs try (countFirst as asked) for run, or hands the call to the attempt already
// running. When the running attempt's context ends with calls handed to it, it fails with the
// context's error, so that its invocation is retried rather than their finish lost.
func (g *finishGate) finish(ctx context.Context, run string, countFirst bool, try func(countFirst bool) (bool, error)) (bool, error) {
	g.mu.Lock()
	if g.runs == nil {
		g.runs = map[string]*handedOver{}
	}
	if h, busy := g.runs[run]; busy {
		h.again = true
		h.listing = h.listing || !countFirst
		g.mu.Unlock()
		return false, nil
	}
	h := &handedOver{}
	g.runs[run] = h
	g.mu.Unlock()
	for {
		done, err := try(countFirst)
		g.mu.Lock()
		again := h.again && !done && err == nil
		if again && ctx.Err() != nil {
			err, again = ctx.Err(), false
		}
		if !again {
			delete(g.runs, run)
			g.mu.Unlock()
			return done, err
		}
		countFirst = countFirst && !h.listing
		*h = handedOver{}
		g.mu.Unlock()
	}
}
