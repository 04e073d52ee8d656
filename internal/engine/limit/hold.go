package limit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Why Hold.Start refuses a start.
var (
	// ErrUsedUp: every start the grant reserved is taken.
	ErrUsedUp = errors.New("limit grant used up")
	// ErrSlowedDown: the downstream asked the limit to slow down.
	ErrSlowedDown = errors.New("limit slowed down")
	// ErrLate: the start's reserved time passed more than Lateness ago (its holder was
	// paused, or starved of CPU): starting now could exceed the rate.
	ErrLate = errors.New("limit start missed its time")
)

// MinLateness is the least a start may be late (Spec.Lateness): the timer and scheduler
// delays of a loaded process.
const MinLateness = 10 * time.Millisecond

// Lateness is how late after its reserved time a start of the spec's rate may still be made:
// one interval of the rate, at least MinLateness.
func (s Spec) Lateness() time.Duration { return max(s.interval(), MinLateness) }

// Hold runs one grant's partitions: Start before each, Done after it, Close at the end. Its
// slots are renewed a third of a lease after their last renewal while it is open (or sooner,
// along with another write of the limit by its process); once they are lost (a renewal
// finds them gone, or none succeeds before they expire), Start refuses and Context is
// cancelled with ErrLost, so no more than the limit's slots ever run under grants that hold.
type Hold struct {
	l      *Limiter
	sem    chan struct{}
	ctx    context.Context
	cancel context.CancelCauseFunc
	loop   sync.WaitGroup
	begun  time.Time

	// first is closed when the grant's first partition is done (see renewals).
	first     chan struct{}
	firstOnce sync.Once

	mu    sync.Mutex
	g     Grant
	next  int // reserved starts handed out
	ran   int
	stop  error     // why no start is allowed any more
	wrote time.Time // the latest slow-down this hold wrote
}

// Hold opens g for its partitions; ctx bounds the renewals.
func (l *Limiter) Hold(ctx context.Context, g Grant) *Hold {
	h := &Hold{l: l, g: g, sem: make(chan struct{}, max(g.Slots, 1)), begun: l.now(), first: make(chan struct{})}
	h.ctx, h.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	if g.Holds() {
		l.opened(g.Spec.Name, g.Slots, g.tenure)
		l.register(h, g)
		h.loop.Go(h.renewals)
	}
	return h
}

// Context is cancelled with ErrLost once the grant's slots are lost: partitions running under
// it should stop.
func (h *Hold) Context() context.Context { return h.ctx }

// Grant is the grant as last renewed.
func (h *Hold) Grant() Grant {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.g
}

// Start waits for one of the grant's slots and for the next reserved start, then allows the
// start (call Done when the partition is over), or says why not (ErrUsedUp, ErrSlowedDown,
// ErrLost, ErrLate, or ctx's cause). A start is made at most Lateness after its reserved
// time, so no period of Per sees more than Rate + Burst starts of the limit (at a rate above
// one per MinLateness, plus those reserved in MinLateness).
func (h *Hold) Start(ctx context.Context) error {
	select {
	case h.sem <- struct{}{}:
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-h.ctx.Done():
		return context.Cause(h.ctx)
	}
	h.mu.Lock()
	err := h.stop
	k := h.next
	if err == nil && k >= h.g.Partitions {
		err = ErrUsedUp
	}
	var at time.Time
	if err == nil {
		h.next++
		if k < len(h.g.Starts) {
			at = h.g.Starts[k]
		}
	}
	h.mu.Unlock()
	if err == nil && !at.IsZero() {
		if d := at.Sub(h.l.now()); d > 0 {
			err = h.l.cfg.Sleep(ctx, d)
		}
	}
	if err == nil {
		err = h.check(at)
	}
	if err != nil {
		<-h.sem
		return err
	}
	return nil
}

// check allows a start reserved at at (zero: none) now, or refuses it: a start late by more
// than Lateness alone, otherwise the hold for good.
func (h *Hold) check(at time.Time) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.l.now()
	if h.stop == nil && !at.IsZero() && now.Sub(at) > h.g.Spec.Lateness() {
		return fmt.Errorf("%w: reserved for %s, now %s", ErrLate, at.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
	}
	switch {
	case h.stop != nil:
	case h.ctx.Err() != nil:
		h.stop = context.Cause(h.ctx)
	case h.pastEdge(now):
	case now.Before(h.g.SlowUntil):
		h.stop = fmt.Errorf("%w until %s", ErrSlowedDown, h.g.SlowUntil.Format(time.RFC3339))
	default:
		h.ran++
		return nil
	}
	return h.stop
}

// edge is when the grant stops: Margin before it expires (h.mu held).
func (h *Hold) edge() time.Time { return h.g.Expires.Add(-h.l.Margin()) }

// pastEdge reports whether the grant is at its edge at now, and then stops the hold for good
// and cancels its context, so the partitions running under it stop too (h.mu held).
func (h *Hold) pastEdge(now time.Time) bool {
	if !h.g.Holds() || now.Before(h.edge()) {
		return false
	}
	h.stop = fmt.Errorf("%w: it expires at %s", ErrLost, h.g.Expires.Format(time.RFC3339Nano))
	h.cancel(ErrLost)
	return true
}

// Check says whether a partition Start allowed may still begin its work: ErrLost once the
// grant is lost or at its edge (its process may have been paused since Start), which stops
// the hold for good. Call it just before the partition's call to the limited system.
func (h *Hold) Check() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if errors.Is(h.stop, ErrLost) || h.pastEdge(h.l.now()) {
		return h.stop
	}
	return nil
}

// Done ends a start Start allowed.
func (h *Hold) Done() {
	<-h.sem
	h.firstOnce.Do(func() { close(h.first) })
}

// SlowDown stops the hold's starts and holds every start of the limit, on every instance,
// back until until (written once per later time).
func (h *Hold) SlowDown(ctx context.Context, until time.Time, reason string) error {
	h.mu.Lock()
	if until.After(h.g.SlowUntil) {
		h.g.SlowUntil = until
	}
	if h.stop == nil {
		h.stop = fmt.Errorf("%w until %s", ErrSlowedDown, until.Format(time.RFC3339))
	}
	write := until.After(h.wrote)
	if write {
		h.wrote = until
	}
	h.mu.Unlock()
	if !write {
		return nil
	}
	return h.l.SlowDown(ctx, h.g.Spec.Name, until, reason)
}

// Close stops the renewals and hands the slots to the next bundle of the limit waiting in
// this process (see Limiter.AcquireWaiting), or gives them back (unless lost).
func (h *Hold) Close(ctx context.Context) error {
	h.cancel(errClosed)
	h.loop.Wait()
	h.mu.Lock()
	g, ran, lost, stopped := h.g, h.ran, errors.Is(h.stop, ErrLost), h.stop != nil && !errors.Is(h.stop, ErrUsedUp)
	h.mu.Unlock()
	if g.Holds() {
		h.l.unregister(h, g)
		// Counted closed before the slots go anywhere: a bundle they wake must not find them
		// still held here.
		h.l.closed(g.Spec.Name, g.Slots, ran, h.l.now().Sub(h.begun))
	}
	if lost {
		if g.Holds() {
			h.l.kick(g.Spec.Name) // they ask the limit: the slots come back at the lease's end
		}
		return nil
	}
	if !stopped && h.l.handOff(g) {
		return nil
	}
	err := h.l.Release(ctx, g, ran, h.l.now().Sub(h.begun))
	if g.Holds() && err == nil {
		h.l.kick(g.Spec.Name)
	}
	return err
}

var errClosed = errors.New("limit hold closed")

// writesHoldEarly reports whether g renews as soon as its first partition is done, writing
// what that took, so that bundles waiting elsewhere learn when its slots are expected back:
// when neither the limit nor this process (hold) knows a hold time yet, and g holds half the
// limit's slots or more. Slots shared among many grants come back often enough without it.
func writesHoldEarly(g Grant, hold time.Duration) bool {
	return g.Hold <= 0 && hold <= 0 && 2*g.Slots >= g.Spec.MaxInFlight
}

// renewedAlong takes g, the hold's grant renewed along with another write of its limit.
func (h *Hold) renewedAlong(g Grant) {
	h.mu.Lock()
	if !errors.Is(h.stop, ErrLost) && g.Expires.After(h.g.Expires) {
		h.g.Expires, h.g.tenure = g.Expires, later(h.g.tenure, g.tenure)
		h.g.SlowUntil = later(h.g.SlowUntil, g.SlowUntil)
	}
	h.mu.Unlock()
	h.l.extended(g.Spec.Name, g.tenure)
}

// renewals renews the grant a third of a lease after its last renewal (every twelfth of a
// lease after a failure) until the hold closes, and cancels it once the slots are lost: a
// renewal finds them gone, or the grant reaches its edge unrenewed. No sleep or renewal
// outlasts the edge, and one that ends past it (the process was paused or starved) loses
// the slots without asking the limit. See writesHoldEarly for a limit's first grants.
func (h *Hold) renewals() {
	lease := h.l.cfg.Lease
	every := time.Duration(-1)
	var early <-chan struct{}
	if g := h.Grant(); writesHoldEarly(g, h.l.holdHere(g.Spec.Name)) {
		early = h.first
	}
	for {
		d := every
		if d < 0 { // a third of a lease after the last renewal (a hand-off's included)
			d = h.Grant().Expires.Sub(h.l.now()) - 2*lease/3
		}
		d = min(d, h.untilEdge())
		var hold time.Duration
		sctx, stop := h.ctx, context.CancelFunc(func() {})
		if first := early; first != nil {
			sctx, stop = context.WithCancel(h.ctx)
			go func() { // reads its own copy: the loop clears early once it has fired
				select {
				case <-first:
					stop()
				case <-sctx.Done():
				}
			}()
		}
		err := h.l.cfg.Sleep(sctx, d)
		stop()
		if h.ctx.Err() != nil {
			return
		}
		if err != nil && early != nil {
			hold, early = h.l.now().Sub(h.begun), nil // the first partition is done
		} else if err != nil {
			return
		} else if every < 0 && h.Grant().Expires.Sub(h.l.now()) > 2*lease/3 {
			continue // renewed meanwhile along with another write of the limit here
		}
		left := h.untilEdge()
		if left <= 0 {
			h.lose(fmt.Errorf("not renewed before %s", h.Grant().Expires.Format(time.RFC3339Nano)))
			return
		}
		h.mu.Lock()
		g, parts := h.g, h.g.Partitions-h.next+len(h.sem)
		h.mu.Unlock()
		rctx, cancel := h.renewal(left)
		err = h.l.renew(rctx, &g, parts, hold)
		cancel()
		if h.ctx.Err() != nil {
			return
		}
		h.mu.Lock()
		switch {
		case err == nil:
			slow := h.g.SlowUntil
			h.g.Expires, h.g.SlowUntil, h.g.tenure = g.Expires, g.SlowUntil, g.tenure
			if slow.After(h.g.SlowUntil) {
				h.g.SlowUntil = slow
			}
			every = -1
		case errors.Is(err, ErrLost) || !h.l.now().Before(h.edge()):
			h.mu.Unlock()
			h.lose(err)
			return
		default:
			every = h.l.cfg.Lease / 12
		}
		h.mu.Unlock()
	}
}

// untilEdge is how long the grant has before its edge.
func (h *Hold) untilEdge() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.edge().Sub(h.l.now())
}

// lose stops the hold's starts for good, for why, and cancels its context with ErrLost.
func (h *Hold) lose(why error) {
	h.mu.Lock()
	if h.stop == nil || !errors.Is(h.stop, ErrLost) {
		h.stop = fmt.Errorf("%w: %w", ErrLost, why)
	}
	h.mu.Unlock()
	h.cancel(ErrLost)
}

// renewal is the context of a renewal made left before the grant's edge: it ends after a
// third of a lease, or at the edge (on the limiter's clock, Config.Sleep) when that is nearer.
func (h *Hold) renewal(left time.Duration) (context.Context, context.CancelFunc) {
	if bound := h.l.cfg.Lease / 3; left >= bound {
		return context.WithTimeout(h.ctx, bound)
	}
	c, cancel := context.WithCancelCause(h.ctx)
	go func() {
		if h.l.cfg.Sleep(c, left) == nil {
			cancel(context.DeadlineExceeded)
		}
	}()
	return c, func() { cancel(context.Canceled) }
}
