package work

import (
	"context"
	"sync"
)

// finishGate lets one attempt to finish a run run at a time in this process, and coalesces
// the others into it. A call that comes while an attempt runs hands itself over and returns
// false at once; the running attempt, if it did not finish the run, tries once more for all
// the calls handed to it, since their appends may have landed after it read the counts.
//
// Why: striped done shards reach their counts together at the end of a run, and each shard's
// last append asks for a finish. Without the gate every one of them read the counts and the
// partials at once, all but one in vain; with it an instance makes at most one attempt at a
// time and one more after it. Across instances the report's claim still decides.
//
// One attempt at a time per run is also what the claim needs: its token is this process's, so
// two of its callers at once would both take the claim for their own.
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
