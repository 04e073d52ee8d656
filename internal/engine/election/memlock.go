package election

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/google/uuid"
)

// MemoryLock is an in-memory Lock that enforces the blob lease rules BlobLock relies on, for
// tests of code that leads (here and in other packages):
// one live lease ID at a time, expiry after the duration, renewal by the holder even after
// expiry as long as nobody took over (as Azure and Azurite do), ErrLeaseLost for a stale ID,
// and an epoch bumped on every acquisition. Tests inject failures through the hooks.
type MemoryLock struct {
	duration time.Duration
	now      func() time.Time

	mu         sync.Mutex
	leaseID    string // "" when available or broken
	expires    time.Time
	epoch      int64
	holder     ledger.Holder
	since      time.Time
	releasedAt time.Time

	// RenewHook, when set, runs before each renewal; a non-nil error fails it.
	RenewHook func(ctx context.Context, l Lease) error

	Renews   atomic.Int64
	Releases atomic.Int64
	// ReleaseCtxErr records ctx.Err() as seen by the last Release.
	ReleaseCtxErr atomic.Value
}

var _ Lock = (*MemoryLock)(nil)

// NewMemoryLock returns an available lock whose leases last d.
func NewMemoryLock(d time.Duration) *MemoryLock {
	return &MemoryLock{duration: d, now: time.Now}
}

func (f *MemoryLock) Duration() time.Duration { return f.duration }

func (f *MemoryLock) liveLocked() bool {
	return f.leaseID != "" && f.now().Before(f.expires)
}

func (f *MemoryLock) Acquire(ctx context.Context, holder ledger.Holder) (Lease, error) {
	if err := holder.Validate(); err != nil {
		return Lease{}, err
	}
	if err := ctx.Err(); err != nil {
		return Lease{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.liveLocked() {
		return Lease{}, &HeldError{Holder: f.holder, Epoch: f.epoch, Since: f.since}
	}
	now := f.now()
	f.leaseID = uuid.NewString()
	f.expires = now.Add(f.duration)
	prev, prevReleased := f.holder, f.releasedAt
	f.epoch++
	f.holder, f.since, f.releasedAt = holder, now, time.Time{}
	return Lease{ID: f.leaseID, Holder: holder, Epoch: f.epoch, AcquiredAt: now, Duration: f.duration,
		PreviousHolder: prev, PreviousReleasedAt: prevReleased}, nil
}

func (f *MemoryLock) Renew(ctx context.Context, l Lease) error {
	f.Renews.Add(1)
	if h := f.RenewHook; h != nil {
		if err := h(ctx, l); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if l.ID != f.leaseID {
		return fmt.Errorf("renew epoch %d: %w", l.Epoch, ErrLeaseLost)
	}
	f.expires = f.now().Add(f.duration)
	return nil
}

func (f *MemoryLock) Release(ctx context.Context, l Lease) error {
	f.Releases.Add(1)
	f.ReleaseCtxErr.Store(fmt.Sprint(ctx.Err()))
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if l.ID != f.leaseID {
		return fmt.Errorf("release epoch %d: %w", l.Epoch, ErrLeaseLost)
	}
	f.leaseID, f.releasedAt = "", f.now()
	return nil
}

func (f *MemoryLock) State(ctx context.Context) (LeaderState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := LeaderState{Holder: f.holder, Epoch: f.epoch, Since: f.since, ReleasedAt: f.releasedAt}
	switch {
	case f.epoch == 0:
		return LeaderState{}, nil
	case f.liveLocked():
		s.Held, s.LeaseState = true, LeaseStateLeased
	case f.leaseID != "":
		s.LeaseState = LeaseStateExpired
	case f.releasedAt.IsZero():
		s.LeaseState = LeaseStateBroken
	default:
		s.LeaseState = LeaseStateAvailable
	}
	return s, nil
}

// Lapsed reports whether, at now, the current lease (if any) has run out.
func (f *MemoryLock) Lapsed(now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !now.Before(f.expires)
}

// Break breaks the lease from outside, as BreakLease with a zero break period does.
func (f *MemoryLock) Break() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leaseID = ""
}

// MemoryLocks hands out one MemoryLock per name, created on first use: the named locks of a
// Leader (LeaderConfig.Locks) in tests. Safe for concurrent use.
type MemoryLocks struct {
	duration time.Duration
	mu       sync.Mutex
	locks    map[string]*MemoryLock
}

// NewMemoryLocks returns named locks whose leases last d.
func NewMemoryLocks(d time.Duration) *MemoryLocks {
	return &MemoryLocks{duration: d, locks: map[string]*MemoryLock{}}
}

// Lock returns the lock named name (LeaderConfig.Locks).
func (m *MemoryLocks) Lock(name string) (Lock, error) { return m.Get(name), nil }

// Get returns the lock named name, for a test to inspect or break.
func (m *MemoryLocks) Get(name string) *MemoryLock {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.locks[name]
	if !ok {
		l = NewMemoryLock(m.duration)
		m.locks[name] = l
	}
	return l
}
