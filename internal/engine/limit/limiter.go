package limit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"time"
)

// Store keeps limits' states. Update reads the state (the zero State when there is none),
// applies fn and writes the result under the version read (created when absent), retrying on
// a conflict (an update that keeps losing returns an error wrapping ErrContended); fn
// returning ErrNoChange skips the write. A state is one entity: every call names one limit.
type Store interface {
	Read(ctx context.Context, name string) (State, error)
	Update(ctx context.Context, name string, fn func(*State) error) (State, error)
}

// ErrNoChange tells Store.Update to write nothing.
var ErrNoChange = errors.New("no change")

// Defaults of Config's zero fields.
const (
	DefaultLease   = 30 * time.Second
	DefaultMinWait = 250 * time.Millisecond
)

// Config configures a Limiter. Store is required.
type Config struct {
	Store Store
	// Holder names this process in the grants it takes.
	Holder string
	// Lease: see Rules.Lease (default DefaultLease). Horizon defaults to the lease, MinWait to
	// DefaultMinWait, MaxWait to the lease.
	Lease, Horizon, MinWait, MaxWait time.Duration
	// Linger is how long a release, a renewal or an ask of AcquireWaiting (but a rate's)
	// waits for more of them to write together (default DefaultLinger; negative: not at
	// all); an Acquire ends the wait.
	Linger time.Duration
	// LocalWait is how long AcquireWaiting may wait in its call (default a third of the
	// lease; negative: not at all, and no hand-off: it is AcquireUpTo).
	LocalWait time.Duration
	// Now is the clock (default time.Now); Sleep waits on it (default a timer).
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
}

// Limiter takes and gives back grants of named limits. It is safe for concurrent use. A
// process's updates of one limit go one at a time: those asked while one is under way are
// applied together in the next, one read and one write for all of them; a release, a renewal
// or an ask of AcquireWaiting (but a rate's) first waits Config.Linger for others. Each write
// also renews the process's open holds of the limit last renewed a sixth of a lease ago or
// more.
type Limiter struct {
	cfg   Config
	rules Rules

	mu    sync.Mutex
	lanes map[string]*lane
	local map[string]*local
	holds map[string]map[string]*Hold // the open holds of each limit, by token
}

// local is what this process has of one limit: its open holds and its bundles waiting in
// AcquireWaiting for one of them to end, first come first served.
type local struct {
	waiters []*waiter
	slots   int           // the slots its open holds hold
	hold    time.Duration // the mean hold of a slot per partition of this process's holds
	// tenure is when the open holds here stop handing their slots on (the latest tenure
	// among them: see Grant).
	tenure time.Time
	// gate is when this process asks the limit next, after a refusal: its bundles that come
	// meanwhile wait for it and ask together then (one read for all of them).
	gate time.Time
	// asking is closed when the ask of the limit under way here has its answer (nil: none
	// is): a bundle that comes meanwhile waits for it rather than read the limit again.
	asking  chan struct{}
	joiners int // the bundles waiting for its answer
	// gathering: that ask still lingers in the lane, unsent; a bundle that comes meanwhile
	// asks in the same update.
	gathering bool
}

// waiter is a bundle waiting in AcquireWaiting; a hold that ends hands it its grant on ch,
// or a zero Grant when it gave its slots back to the limit instead (ask now), and wakes it.
type waiter struct {
	id      string
	n, most int
	ch      chan Grant
	wake    context.CancelCauseFunc
}

// lane is one limit's queue of updates in this process.
type lane struct {
	busy   bool          // an update of the limit is under way
	next   []*op         // the updates asked meanwhile
	urgent chan struct{} // told when an update that may not wait joins next
}

// DefaultLinger is how long an update that can wait (a release, a renewal, an ask of
// AcquireWaiting) waits for others of its process to write with it, unless one that cannot
// wait (an Acquire) comes first: bundles that end or come together give their slots back or
// ask in one write, not one each.
const DefaultLinger = 25 * time.Millisecond

// op is one update of a limit's state waiting in its lane.
type op struct {
	ctx  context.Context
	lazy bool // it may wait Config.Linger for others
	fn   func(*State) error
	err  error // fn's own answer: nil (applied), ErrNoChange, or another error (not applied)
	st   State
	serr error // the store's
	done chan struct{}
}

// New validates cfg and fills in its defaults.
func New(cfg Config) (*Limiter, error) {
	if cfg.Store == nil {
		return nil, errors.New("limiter: a store is required")
	}
	if cfg.Lease < 0 || cfg.Horizon < 0 || cfg.MinWait < 0 || cfg.MaxWait < 0 { // LocalWait < 0: off
		return nil, errors.New("limiter: durations must not be negative")
	}
	if cfg.Lease == 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.Horizon == 0 {
		cfg.Horizon = cfg.Lease
	}
	if cfg.MinWait == 0 {
		cfg.MinWait = DefaultMinWait
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = cfg.Lease
	}
	cfg.MaxWait = max(cfg.MaxWait, cfg.MinWait)
	switch {
	case cfg.Linger == 0:
		cfg.Linger = DefaultLinger
	case cfg.Linger < 0:
		cfg.Linger = 0
	}
	switch {
	case cfg.LocalWait == 0:
		cfg.LocalWait = cfg.Lease / 3
	case cfg.LocalWait < 0:
		cfg.LocalWait = 0
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleep
	}
	rules := Rules{Lease: cfg.Lease, Horizon: cfg.Horizon, MinWait: cfg.MinWait, MaxWait: cfg.MaxWait,
		Probe: min(max(cfg.LocalWait/2, cfg.MinWait), cfg.MaxWait)}
	return &Limiter{cfg: cfg, rules: rules,
		lanes: map[string]*lane{}, local: map[string]*local{}, holds: map[string]map[string]*Hold{}}, nil
}

// update applies fn to the limit's state through its lane (see Limiter): fn's changes are
// written unless it returns an error (ErrNoChange: nothing to write, and no error).
func (l *Limiter) update(ctx context.Context, name string, fn func(*State) error) (State, error) {
	return l.updateOp(&op{ctx: ctx, fn: fn, done: make(chan struct{})}, name)
}

// lazyUpdate is update for a change that may wait Config.Linger for others to go with it.
func (l *Limiter) lazyUpdate(ctx context.Context, name string, fn func(*State) error) (State, error) {
	return l.updateOp(&op{ctx: ctx, fn: fn, done: make(chan struct{}), lazy: true}, name)
}

func (l *Limiter) updateOp(o *op, name string) (State, error) {
	ctx := o.ctx
	l.mu.Lock()
	ln := l.lanes[name]
	if ln == nil {
		ln = &lane{urgent: make(chan struct{}, 1)}
		l.lanes[name] = ln
	}
	ln.next = append(ln.next, o)
	start := !ln.busy
	ln.busy = true
	if !o.lazy {
		select {
		case ln.urgent <- struct{}{}:
		default:
		}
	}
	l.mu.Unlock()
	if start {
		go l.drain(name, ln)
	}
	select {
	case <-o.done:
	case <-ctx.Done():
		return State{}, context.Cause(ctx)
	}
	switch {
	case o.serr != nil:
		return o.st, o.serr
	case o.err != nil && !errors.Is(o.err, ErrNoChange):
		return o.st, o.err
	}
	return o.st, nil
}

// drain runs ln's updates, those waiting together in one Store.Update, until none is left.
func (l *Limiter) drain(name string, ln *lane) {
	for {
		// Bundles woken together (their waits ended at once) ask in one update; updates that
		// can wait linger for more.
		runtime.Gosched()
		if l.lazyOnly(ln) {
			t := time.NewTimer(l.cfg.Linger)
			select {
			case <-t.C:
			case <-ln.urgent:
			}
			t.Stop()
		}
		l.mu.Lock()
		ops := ln.next
		ln.next = nil
		if lc := l.local[name]; lc != nil {
			lc.gathering = false // an ask lingering in ops goes now
		}
		if len(ops) == 0 {
			ln.busy = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		along := l.dueAlong(name)
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.Lease)
		st, err := l.cfg.Store.Update(ctx, name, func(st *State) error {
			for _, a := range along {
				a.ok = false // an attempt that lost its race renewed nothing
			}
			changed := false
			for _, o := range ops {
				if o.ctx.Err() != nil {
					o.err = context.Cause(o.ctx) // its caller has gone: not applied
					continue
				}
				c := st.Clone()
				if o.err = o.fn(&c); o.err == nil {
					*st, changed = c, true
				}
			}
			if !changed {
				return ErrNoChange
			}
			now := l.now()
			for _, a := range along {
				a.renewed = a.g
				a.ok = renew(st, l.rules, &a.renewed, a.left, a.queued, a.all, a.hold, now) == nil
			}
			return nil
		})
		cancel()
		for _, a := range along {
			if err == nil && a.ok {
				a.h.renewedAlong(a.renewed)
			}
		}
		for _, o := range ops {
			o.st, o.serr = st, err
			close(o.done)
		}
	}
}

// lazyOnly reports whether every update waiting in ln may wait, and clears a stale urgent
// signal.
func (l *Limiter) lazyOnly(ln *lane) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-ln.urgent:
	default:
	}
	if l.cfg.Linger <= 0 {
		return false
	}
	for _, o := range ln.next {
		if !o.lazy {
			return false
		}
	}
	return true
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// Lease is how long a grant lasts unless renewed.
func (l *Limiter) Lease() time.Duration { return l.cfg.Lease }

// Margin is how long before its expiry a grant stops starting partitions: a renewal is due
// every third of a lease, so a live holder never gets that close.
func (l *Limiter) Margin() time.Duration { return l.cfg.Lease / 6 }

func (l *Limiter) now() time.Time { return l.cfg.Now().UTC() }

// Acquire asks spec's limit for up to n starts of the bundle id (a message's ID, the same
// each time it comes back), n of them at once: one read and one conditional write. It
// returns a grant with Partitions above 0, or the wait before the bundle should ask again.
func (l *Limiter) Acquire(ctx context.Context, spec Spec, id string, n int) (Grant, time.Duration, error) {
	return l.AcquireUpTo(ctx, spec, id, n, n)
}

// AcquireUpTo is Acquire for a bundle that runs at most most of its n partitions at once: it
// takes no more slots than that, leaving the rest to other bundles.
func (l *Limiter) AcquireUpTo(ctx context.Context, spec Spec, id string, n, most int) (Grant, time.Duration, error) {
	return l.acquireUpTo(ctx, spec, id, n, most, false)
}

// acquireUpTo is AcquireUpTo; lazy: the ask may linger for others (see lazyUpdate).
func (l *Limiter) acquireUpTo(ctx context.Context, spec Spec, id string, n, most int, lazy bool) (Grant, time.Duration, error) {
	if n < 1 {
		return Grant{}, 0, fmt.Errorf("limit %s: acquire %d partitions", spec.Name, n)
	}
	token := newToken()
	var (
		g    Grant
		wait time.Duration
	)
	queued := l.queued(spec, id)
	update := l.update
	if lazy {
		update = l.lazyUpdate
	}
	_, err := update(ctx, spec.Name, func(st *State) error {
		now := l.now()
		st.prune(now)
		line := slices.Clone(st.Waiting)
		g, wait = acquire(st, l.rules, spec, id, l.cfg.Holder, token, n, most, queued, now, mrand.Float64())
		if g.Partitions == 0 && slices.Equal(line, st.Waiting) {
			return ErrNoChange // refused, its place in the line still good: one read
		}
		st.Updated = now
		return nil
	})
	if err != nil {
		return Grant{}, 0, fmt.Errorf("limit %s: acquire: %w", spec.Name, err)
	}
	return g, wait, nil
}

// Renew extends g's slots by a lease; ErrLost when they expired or were taken (nothing is
// written then). It also refreshes g.SlowUntil.
func (l *Limiter) Renew(ctx context.Context, g *Grant) error { return l.renew(ctx, g, g.Partitions, 0) }

// renew is Renew for a grant with left of its partitions yet to run, at hold a partition per
// slot (zero: this process's mean, if known).
func (l *Limiter) renew(ctx context.Context, g *Grant, left int, hold time.Duration) error {
	var rerr error
	cur := *g
	queued, all, here := l.renewArgs(*g)
	if hold <= 0 {
		hold = here
	}
	_, err := l.lazyUpdate(ctx, g.Spec.Name, func(st *State) error {
		cur = *g
		if rerr = renew(st, l.rules, &cur, left, queued, all, hold, l.now()); rerr != nil {
			return ErrNoChange
		}
		st.Updated = l.now()
		return nil
	})
	if err != nil {
		return fmt.Errorf("limit %s: renew: %w", g.Spec.Name, err)
	}
	*g = cur
	if rerr != nil {
		return fmt.Errorf("limit %s: %w", g.Spec.Name, rerr)
	}
	l.extended(g.Spec.Name, g.tenure)
	return nil
}

// renewArgs is what a renewal of g tells the limit besides its partitions left: the
// partitions of this process's bundles that may follow by hand-off (g's share of them),
// whether its holds hold every slot, and its mean hold a partition.
func (l *Limiter) renewArgs(g Grant) (queued int, all bool, hold time.Duration) {
	queued, all = l.waitingHere(g.Spec, "")
	if held := l.heldHere(g.Spec.Name); queued > 0 && held > g.Slots {
		// The bundles waiting here go to whichever holds here end first: this hold's share.
		queued = (queued*g.Slots + held - 1) / held
	}
	return queued, all, l.holdHere(g.Spec.Name)
}

// along is an open hold of this process renewed along with another write of its limit.
type along struct {
	h            *Hold
	g            Grant
	left, queued int
	all          bool
	hold         time.Duration
	renewed      Grant // g renewed, when ok
	ok           bool
}

// dueAlong is this process's open holds of the limit last renewed a sixth of a lease ago or
// more: a write of the limit renews them too, so a process that writes its limit anyway
// spends no call on its renewals.
func (l *Limiter) dueAlong(name string) []*along {
	l.mu.Lock()
	hs := make([]*Hold, 0, len(l.holds[name]))
	for _, h := range l.holds[name] {
		hs = append(hs, h)
	}
	l.mu.Unlock()
	now := l.now()
	var out []*along
	for _, h := range hs {
		h.mu.Lock()
		g, left, lost := h.g, h.g.Partitions-h.next+len(h.sem), errors.Is(h.stop, ErrLost)
		h.mu.Unlock()
		if lost || g.Expires.Sub(now) > l.cfg.Lease-l.cfg.Lease/6 {
			continue
		}
		a := &along{h: h, g: g, left: left}
		a.queued, a.all, a.hold = l.renewArgs(g)
		out = append(out, a)
	}
	return out
}

// register notes h open (unregister: closed), for its renewals to go along with the
// process's other writes of its limit.
func (l *Limiter) register(h *Hold, g Grant) {
	l.mu.Lock()
	defer l.mu.Unlock()
	hs := l.holds[g.Spec.Name]
	if hs == nil {
		hs = map[string]*Hold{}
		l.holds[g.Spec.Name] = hs
	}
	hs[g.Token] = h
}

func (l *Limiter) unregister(h *Hold, g Grant) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if hs := l.holds[g.Spec.Name]; hs[g.Token] == h {
		delete(hs, g.Token)
	}
}

// Release gives g's slots back; ran partitions ran under them for elapsed.
func (l *Limiter) Release(ctx context.Context, g Grant, ran int, elapsed time.Duration) error {
	if !g.Holds() {
		return nil
	}
	_, err := l.lazyUpdate(ctx, g.Spec.Name, func(st *State) error {
		now := l.now()
		release(st, g, ran, elapsed, now)
		st.Updated = now
		return nil
	})
	if err != nil {
		return fmt.Errorf("limit %s: release: %w", g.Spec.Name, err)
	}
	return nil
}

// SlowDown holds every start of the limit back until until.
func (l *Limiter) SlowDown(ctx context.Context, name string, until time.Time, reason string) error {
	_, err := l.update(ctx, name, func(st *State) error {
		now := l.now()
		if !until.After(st.SlowUntil) && now.Sub(st.SlowAt) < time.Second {
			return ErrNoChange
		}
		slowDown(st, until.UTC(), now, reason)
		st.Updated = now
		return nil
	})
	if err != nil {
		return fmt.Errorf("limit %s: slow down: %w", name, err)
	}
	return nil
}

// Read returns the limit's state.
func (l *Limiter) Read(ctx context.Context, name string) (State, error) {
	st, err := l.cfg.Store.Read(ctx, name)
	if err != nil {
		return st, fmt.Errorf("limit %s: %w", name, err)
	}
	return st, nil
}

func newToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// AcquireWaiting is AcquireUpTo for a bundle that may wait in the call, up to the limiter's
// LocalWait: for its wait, when that is shorter, then it asks again; or, while a bundle of
// this process holds slots of an in-flight limit, for that bundle to end and hand them on
// (then as long as the holds here hand slots on, a lease at most), when its turn among the
// bundles waiting here comes by then (else it is told to come back shortly before its turn).
// While one bundle asks, the process's others that come ask with it while the ask lingers
// (Config.Linger; not under a rate), then wait for its answer; after a refusal they do not
// ask until its wait is over (at least two of its holds per partition, at most MaxWait, while
// holds here hand slots on): they ask together then, one read for all.
// A hold hands its slots to the first bundle waiting in its process, without a call, for a
// lease after the limit granted them, and a lease after each renewal that found no other
// process waiting that holds no more than this one would without them; after that they go
// back to the limit. A refusal returns the wait left.
func (l *Limiter) AcquireWaiting(ctx context.Context, spec Spec, id string, n, most int) (Grant, time.Duration, error) {
	if l.cfg.LocalWait <= 0 {
		return l.AcquireUpTo(ctx, spec, id, n, most)
	}
	start := l.now()
	deadline := start.Add(l.cfg.LocalWait)
	joined := false // it waited for another bundle's ask
	for {
		// Right after waiting for another's ask, a bundle that may still ask asks itself.
		justJoined := joined
		joined = false
		var (
			g    = Grant{Spec: spec}
			wait time.Duration
			err  error
		)
		now := l.now()
		all := func() bool { return spec.Rate == 0 && l.heldHere(spec.Name) >= spec.MaxInFlight }
		switch gate := l.gateOf(spec.Name); {
		case all():
			// This process holds every slot: wait here for one of its bundles to end.
			wait = l.cfg.MaxWait
		case now.Before(gate):
			// Refused lately: ask with the others then.
			wait = gate.Sub(now)
		default:
			asking, mine := l.beginAsk(spec.Name, justJoined, spec.Rate == 0)
			if asking != nil {
				// Another bundle here is asking: its answer is this one's too.
				joined = true
				l.joining(spec.Name, 1)
				select {
				case <-asking:
				case <-ctx.Done():
				}
				l.joining(spec.Name, -1)
				if ctx.Err() != nil {
					return Grant{}, 0, context.Cause(ctx)
				}
				continue
			}
			// The ask lingers for the process's other bundles that come meanwhile (a host
			// delivers a batch of them at once): they ask in the same update. Not under a
			// rate: its grants reserve their starts from the ask on, and a batch of them
			// reserved at once would start late on a busy process.
			g, wait, err = l.acquireUpTo(ctx, spec, id, n, most, spec.Rate == 0)
			if err == nil && g.Partitions == 0 {
				now = l.now()
				if spec.Rate == 0 && l.heldHere(spec.Name) > 0 {
					wait = max(wait, min(2*l.holdHere(spec.Name), l.cfg.MaxWait))
				}
				l.refused(spec.Name, now.Add(wait))
			}
			if mine {
				l.endAsk(spec.Name)
			}
			if err != nil || g.Partitions > 0 {
				return g, wait, err
			}
		}
		handoff := spec.Rate == 0 && l.heldHere(spec.Name) > 0
		until := deadline
		if handoff {
			// The holds here hand slots on until their tenure ends, then its bundles ask; a
			// bundle waits for them a lease at most (a tenure moves on while slots are fairly
			// held).
			tenure := l.tenureOf(spec.Name)
			if last := start.Add(l.cfg.Lease); tenure.After(last) {
				tenure = last
			}
			until = later(deadline, tenure.Add(l.cfg.LocalWait))
		}
		left := until.Sub(now)
		turn := time.Duration(-1) // when its turn here comes (-1: not known)
		if all() {
			turn = l.turn(spec.Name, g.Hold, n, min(most, spec.MaxInFlight))
			if turn > left {
				return g, l.comeBack(turn), nil
			}
		}
		if left <= 0 || (wait > left && !handoff) {
			return g, wait, nil
		}
		sctx, wake := context.WithCancelCause(ctx)
		w := &waiter{id: id, n: n, most: most, ch: make(chan Grant, 1), wake: wake}
		if handoff {
			l.enqueue(spec.Name, w)
		}
		_ = l.cfg.Sleep(sctx, min(wait, left))
		wake(nil)
		if handoff && !l.dequeue(spec.Name, w) {
			// A hold chose it: its grant, or a zero one when the slots went back (ask now).
			if g := <-w.ch; g.Partitions > 0 {
				return g, 0, nil
			}
			continue
		}
		if ctx.Err() != nil {
			return Grant{}, 0, context.Cause(ctx)
		}
		if wait > left {
			if all() {
				if turn = l.turn(spec.Name, g.Hold, n, min(most, spec.MaxInFlight)); turn >= 0 {
					return g, l.comeBack(turn), nil
				}
			}
			return g, max(wait-l.now().Sub(now), l.cfg.MinWait), nil
		}
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// gateOf is when this process asks the limit next after a refusal (zero: at once).
func (l *Limiter) gateOf(name string) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.localOf(name).gate
}

// refused notes a refusal whose wait ends at at: the process's bundles ask then, together
// (the earliest of the waits of the bundles refused together).
func (l *Limiter) refused(name string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lc := l.localOf(name)
	if lc.gate.After(l.now()) && lc.gate.Before(at) {
		return
	}
	lc.gate = at
}

// beginAsk starts an ask of the limit by a bundle of this process: while another's is under
// way (and the bundle has not waited for one already: joined), it returns a channel closed
// once that one has its answer; else nil (ask: in the same update while that ask is still
// gathering, as an ask that lingers does: gather), and mine when this ask is the one others
// wait for (endAsk ends it).
func (l *Limiter) beginAsk(name string, joined, gather bool) (asking <-chan struct{}, mine bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lc := l.localOf(name)
	switch {
	case lc.asking != nil && !joined && !lc.gathering:
		return lc.asking, false
	case lc.asking == nil:
		lc.asking, lc.gathering = make(chan struct{}), gather
		return nil, true
	}
	return nil, false
}

// joining counts the bundles waiting for the answer to another's ask.
func (l *Limiter) joining(name string, d int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.localOf(name).joiners += d
}

// endAsk ends this process's ask of the limit begun by beginAsk: the bundles waiting for its
// answer look again (a refusal has set the gate by then).
func (l *Limiter) endAsk(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lc := l.localOf(name)
	close(lc.asking)
	lc.asking = nil
}

// tenureOf is when the open holds here stop handing slots on (zero: none is open).
func (l *Limiter) tenureOf(name string) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.localOf(name).tenure
}

// turn is how long until a bundle of n partitions, most at once, that joins this process's
// line of the limit gets slots by hand-off: a bundle's run for each one ahead and the one
// running, at hold a partition per slot (the limit's, else this process's); -1 when no hold
// is known.
func (l *Limiter) turn(name string, hold time.Duration, n, most int) time.Duration {
	l.mu.Lock()
	lc := l.localOf(name)
	ahead := len(lc.waiters)
	if hold <= 0 {
		hold = lc.hold
	}
	l.mu.Unlock()
	if hold <= 0 {
		return -1
	}
	most = max(most, 1)
	return hold * time.Duration((n+most-1)/most) * time.Duration(ahead+1)
}

// comeBack is the wait of a bundle sent back whose turn here is in turn: it comes back about
// half a LocalWait before.
func (l *Limiter) comeBack(turn time.Duration) time.Duration {
	return max(turn-l.cfg.LocalWait/2, l.cfg.MinWait)
}

// holdHere is this process's mean hold of a slot of the limit per partition (zero: none
// known yet).
func (l *Limiter) holdHere(name string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.localOf(name).hold
}

// heldHere is the slots of the limit this process's open holds hold.
func (l *Limiter) heldHere(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.localOf(name).slots
}

// Waiting is the bundles of the limit waiting in this process for a hold here to hand them
// its slots.
func (l *Limiter) Waiting(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.localOf(name).waiters)
}

// queued is the partitions of the limit's bundles waiting in this process, but id's, while
// its holds hold every slot (else they may take slots elsewhere: 0).
func (l *Limiter) queued(spec Spec, id string) int {
	n, all := l.waitingHere(spec, id)
	if !all {
		return 0
	}
	return n
}

// waitingHere is the partitions of the limit's bundles waiting in this process, but id's, and
// whether its holds hold every slot.
func (l *Limiter) waitingHere(spec Spec, id string) (n int, all bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lc := l.local[spec.Name]
	if lc == nil {
		return 0, false
	}
	for _, w := range lc.waiters {
		if w.id != id {
			n += w.n
		}
	}
	return n, lc.slots >= spec.MaxInFlight
}

func (l *Limiter) localOf(name string) *local {
	lc := l.local[name]
	if lc == nil {
		lc = &local{}
		l.local[name] = lc
	}
	return lc
}

func (l *Limiter) enqueue(name string, w *waiter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lc := l.localOf(name)
	lc.waiters = append(lc.waiters, w)
}

// dequeue takes w out of the line; false when a hold took it first.
func (l *Limiter) dequeue(name string, w *waiter) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	lc := l.localOf(name)
	k := slices.Index(lc.waiters, w)
	if k < 0 {
		return false
	}
	lc.waiters = slices.Delete(lc.waiters, k, k+1)
	return true
}

// opened counts an open hold of slots of the limit, handed on until tenure.
func (l *Limiter) opened(name string, slots int, tenure time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lc := l.localOf(name)
	lc.slots += slots
	lc.tenure = later(lc.tenure, tenure)
}

// extended notes an open hold's tenure moved on to tenure.
func (l *Limiter) extended(name string, tenure time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lc := l.localOf(name); lc.slots > 0 {
		lc.tenure = later(lc.tenure, tenure)
	}
}

// closed counts a hold closed that ran ran partitions on slots for elapsed.
func (l *Limiter) closed(name string, slots, ran int, elapsed time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lc := l.localOf(name)
	if lc.slots -= slots; lc.slots <= 0 {
		lc.tenure = time.Time{}
	}
	if ran > 0 && elapsed > 0 {
		per := elapsed * time.Duration(max(slots, 1)) / time.Duration(ran)
		if lc.hold <= 0 {
			lc.hold = per
		} else {
			lc.hold = (4*lc.hold + per) / 5
		}
	}
}

// handOff gives g to the first bundle waiting for the limit in this process, when g may still
// be handed on (slots of an in-flight limit, within their tenure, far enough from expiry to
// start); false when it may not or none waits.
func (l *Limiter) handOff(g Grant) bool {
	now := l.now()
	if !g.Holds() || g.Spec.Rate > 0 || !now.Before(g.tenure) || !now.Before(g.Expires.Add(-l.Margin())) {
		return false
	}
	w := l.first(g.Spec.Name)
	if w == nil {
		return false
	}
	g.Partitions, g.handed = w.n, g.handed+w.n
	if len(g.served) < maxServed {
		g.served = append(slices.Clip(g.served), w.id)
	}
	w.ch <- g
	w.wake(errHandedOff)
	return true
}

// kick tells the bundles waiting for the limit in this process to ask it now: slots went
// back to it.
func (l *Limiter) kick(name string) {
	l.mu.Lock()
	lc := l.localOf(name)
	ws := lc.waiters
	lc.waiters, lc.gate = nil, time.Time{}
	l.mu.Unlock()
	for _, w := range ws {
		w.ch <- Grant{}
		w.wake(errHandedOff)
	}
}

// first takes the first bundle waiting for the limit in this process out of the line.
func (l *Limiter) first(name string) *waiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	lc := l.localOf(name)
	if len(lc.waiters) == 0 {
		return nil
	}
	w := lc.waiters[0]
	lc.waiters = lc.waiters[1:]
	return w
}

var errHandedOff = errors.New("limit slots handed off")

// maxServed bounds the waiters a chain of hand-offs takes out of the line (the rest expire).
const maxServed = 64
