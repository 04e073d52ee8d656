package storagequeue

import (
	"sync"
	"time"

	"github.com/batonfn/baton/internal/lib/latency"
)

// The bounds of an adaptive QueueSender's parallelism.
const (
	MinParallelism = 2
	MaxParallelism = 64
)

// window is an adaptive QueueSender's number of EnqueueMessage calls in flight. The queue has
// no batch API, so a sender is latency-bound: more calls in flight send faster as long as the
// store serves them side by side, and only queue up behind each other once it does not. After
// each Send the window compares the calls' mean latency with the lowest of the recent Sends
// (the base) and estimates how many of its calls were waiting at the store rather than being
// served, w × (1 − base/latency), as TCP Vegas does for packets: with fewer than
// windowGrowBelow waiting it opens by an eighth (only after a Send that filled it: a smaller
// one says nothing about more); with more than windowShrinkAbove it closes by a quarter, and by
// half when the store said it is busy. A store slowed by other clients — the workers of the
// same Azurite — shows as latency above the base, so the leader's sender yields to them.
type window struct {
	mu    sync.Mutex
	cur   int
	floor latency.Floor // of the mean latencies of the last Sends
}

const (
	windowGrowBelow   = 2 // calls waiting below which the window opens
	windowShrinkAbove = 8 // calls waiting above which it closes
)

func newWindow(start int) *window {
	return &window{cur: min(max(start, MinParallelism), MaxParallelism)}
}

// size is the number of calls the next Send keeps in flight.
func (w *window) size() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur
}

// observe records a Send that made calls calls, at most inFlight at once, with mean latency
// lat, throttled when the store refused one as busy.
func (w *window) observe(calls, inFlight int, lat time.Duration, throttled bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if throttled {
		w.cur = max(w.cur/2, MinParallelism)
		return
	}
	if calls == 0 || lat <= 0 {
		return
	}
	base := w.floor.Observe(lat)
	waiting := float64(inFlight) * (1 - float64(base)/float64(lat))
	switch {
	case waiting > windowShrinkAbove:
		w.cur = max(w.cur-max(1, w.cur/4), MinParallelism)
	case waiting < windowGrowBelow && calls >= w.cur:
		w.cur = min(w.cur+max(1, w.cur/8), MaxParallelism)
	}
}
