package limit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
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
	// Now is the clock (default time.Now); Sleep waits on it (default a timer).
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
}

// Limiter takes and gives back grants of named limits. It is safe for concurrent use. A
// process's updates of one limit go one at a time: those asked while one is under way are
// applied together in the next, one read and one write for all of them.
type Limiter struct {
	cfg   Config
	rules Rules

	mu    sync.Mutex
	lanes map[string]*lane
}

// lane is one limit's queue of updates in this process.
type lane struct {
	busy bool  // an update of the limit is under way
	next []*op // the updates asked meanwhile
}

// op is one update of a limit's state waiting in its lane.
type op struct {
	ctx  context.Context
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
	if cfg.Lease < 0 || cfg.Horizon < 0 || cfg.MinWait < 0 || cfg.MaxWait < 0 {
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
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleep
	}
	return &Limiter{cfg: cfg, rules: Rules{Lease: cfg.Lease, Horizon: cfg.Horizon, MinWait: cfg.MinWait, MaxWait: cfg.MaxWait},
		lanes: map[string]*lane{}}, nil
}

// update applies fn to the limit's state through its lane (see Limiter): fn's changes are
// written unless it returns an error (ErrNoChange: nothing to write, and no error).
func (l *Limiter) update(ctx context.Context, name string, fn func(*State) error) (State, error) {
	o := &op{ctx: ctx, fn: fn, done: make(chan struct{})}
	l.mu.Lock()
	ln := l.lanes[name]
	if ln == nil {
		ln = &lane{}
		l.lanes[name] = ln
	}
	ln.next = append(ln.next, o)
	start := !ln.busy
	ln.busy = true
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
		l.mu.Lock()
		ops := ln.next
		ln.next = nil
		if len(ops) == 0 {
			ln.busy = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.Lease)
		st, err := l.cfg.Store.Update(ctx, name, func(st *State) error {
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
			return nil
		})
		cancel()
		for _, o := range ops {
			o.st, o.serr = st, err
			close(o.done)
		}
	}
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
	if n < 1 {
		return Grant{}, 0, fmt.Errorf("limit %s: acquire %d partitions", spec.Name, n)
	}
	token := newToken()
	var (
		g    Grant
		wait time.Duration
	)
	_, err := l.update(ctx, spec.Name, func(st *State) error {
		now := l.now()
		g, wait = acquire(st, l.rules, spec, id, l.cfg.Holder, token, n, most, now, mrand.Float64())
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
func (l *Limiter) Renew(ctx context.Context, g *Grant) error {
	var rerr error
	cur := *g
	_, err := l.update(ctx, g.Spec.Name, func(st *State) error {
		cur = *g
		if rerr = renew(st, l.rules, &cur, l.now()); rerr != nil {
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
	return nil
}

// Release gives g's slots back; ran partitions ran under them for elapsed.
func (l *Limiter) Release(ctx context.Context, g Grant, ran int, elapsed time.Duration) error {
	if !g.Holds() {
		return nil
	}
	_, err := l.update(ctx, g.Spec.Name, func(st *State) error {
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
