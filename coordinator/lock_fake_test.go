package coordinator

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// fakeLeaseLock is an in-memory Lock that enforces the blob lease rules BlobLock relies on:
// one live lease ID at a time, expiry after the duration, renewal by the holder even after
// expiry as long as nobody took over (as Azure and Azurite do), ErrLeaseLost for a stale ID,
// and an epoch bumped on every acquisition. Tests inject failures through the hooks.
type fakeLeaseLock struct {
	duration time.Duration
	now      func() time.Time

	mu         sync.Mutex
	leaseID    string // "" when available or broken
	expires    time.Time
	epoch      int64
	holder     Identity
	since      time.Time
	releasedAt time.Time

	// renewHook, when set, runs before each renewal; a non-nil error fails it.
	renewHook func(ctx context.Context, l Lease) error

	renews   atomic.Int64
	releases atomic.Int64
	// releaseCtxErr records ctx.Err() as seen by the last Release.
	releaseCtxErr atomic.Value
}

var _ Lock = (*fakeLeaseLock)(nil)

func newFakeLeaseLock(d time.Duration) *fakeLeaseLock {
	return &fakeLeaseLock{duration: d, now: time.Now}
}

func (f *fakeLeaseLock) Duration() time.Duration { return f.duration }

func (f *fakeLeaseLock) liveLocked() bool {
	return f.leaseID != "" && f.now().Before(f.expires)
}

func (f *fakeLeaseLock) Acquire(ctx context.Context, holder Identity) (Lease, error) {
	if err := holder.validate(); err != nil {
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
	f.epoch++
	f.holder, f.since, f.releasedAt = holder, now, time.Time{}
	return Lease{ID: f.leaseID, Holder: holder, Epoch: f.epoch, AcquiredAt: now, Duration: f.duration}, nil
}

func (f *fakeLeaseLock) Renew(ctx context.Context, l Lease) error {
	f.renews.Add(1)
	if h := f.renewHook; h != nil {
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

func (f *fakeLeaseLock) Release(ctx context.Context, l Lease) error {
	f.releases.Add(1)
	f.releaseCtxErr.Store(fmt.Sprint(ctx.Err()))
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

func (f *fakeLeaseLock) State(ctx context.Context) (LeaderState, error) {
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

// breakLease breaks the lease from outside, as BreakLease with a zero break period does.
func (f *fakeLeaseLock) breakLease() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leaseID = ""
}
