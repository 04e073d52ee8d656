package election

import (
	"context"
	"sync"
	"time"
)

// leadershipKey finds the running leadership in a task's context.
type leadershipKey struct{}

// renewHooks are the functions a leadership calls after each successful renewal.
type renewHooks struct {
	mu   sync.Mutex
	next int
	fns  map[int]func(time.Time)
}

func (h *renewHooks) add(fn func(time.Time)) func() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fns == nil {
		h.fns = map[int]func(time.Time){}
	}
	id := h.next
	h.next++
	h.fns[id] = fn
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.fns, id)
	}
}

// call runs every hook with the time the renewal was confirmed.
func (h *renewHooks) call(at time.Time) {
	h.mu.Lock()
	fns := make([]func(time.Time), 0, len(h.fns))
	for _, fn := range h.fns {
		fns = append(fns, fn)
	}
	h.mu.Unlock()
	for _, fn := range fns {
		fn(at)
	}
}

// OnRenewal registers fn to be called after each successful renewal of the leadership whose
// task context is ctx (a context passed to a RunAsLeader task, or one derived from it), with
// the time the renewal was confirmed. It returns the function that unregisters fn; outside a
// leadership it does nothing.
func OnRenewal(ctx context.Context, fn func(renewed time.Time)) (remove func()) {
	ld, ok := ctx.Value(leadershipKey{}).(*leadership)
	if !ok {
		return func() {}
	}
	return ld.hooks.add(fn)
}
