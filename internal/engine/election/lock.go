package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// Lock is a try-once mutex with a time-bounded lease. Implementations must make Acquire a
// single attempt (no waiting for the holder to go away) and must give every acquisition a
// fresh lease ID and an epoch one higher than the previous acquisition's.
type Lock interface {
	// Acquire makes ONE attempt to take the lock for holder. It returns *HeldError when
	// someone else holds it.
	Acquire(ctx context.Context, holder ledger.Holder) (Lease, error)
	// Renew extends l by its duration. It returns an error wrapping ErrLeaseLost when the
	// lease is gone or taken; any other error means the outcome is unknown.
	Renew(ctx context.Context, l Lease) error
	// Release gives l up so the next contender wins at once. It returns an error wrapping
	// ErrLeaseLost when l was no longer held.
	Release(ctx context.Context, l Lease) error
	// State reads the current leadership without contending for it.
	State(ctx context.Context) (LeaderState, error)
}

// Lease is one acquisition of the lock: a plain value, safe to copy.
type Lease struct {
	// ID is the storage lease ID, a UUID unique to this acquisition.
	ID string
	// Holder is who acquired it.
	Holder ledger.Holder
	// Epoch is the fencing token: strictly increasing across acquisitions of the same lock.
	// Writes made on behalf of this lease should carry it, so that a reader can reject writes
	// from an older leader.
	Epoch int64
	// AcquiredAt is the local time just before the acquire request was sent; the lease lasts
	// at least until AcquiredAt+Duration unless renewed.
	AcquiredAt time.Time
	// Duration is the lease duration the lock was acquired with.
	Duration time.Duration
	// Name is the named lock's name (Leader.RunAsLeaderOf), "" for the Leader's own lock.
	Name string
	// PreviousHolder and PreviousReleasedAt are what the lock recorded about the acquisition
	// before this one (epoch Epoch-1) when this one took it: its holder, and when that holder
	// released the lease — zero when its lease lapsed instead (it crashed or stalled), or when
	// there was no previous holder. They tell a takeover after a crash from a handover.
	PreviousHolder     ledger.Holder
	PreviousReleasedAt time.Time
}

// HeldError reports that another process holds the lock. Match it with errors.As.
type HeldError struct {
	// Holder, Epoch and Since describe the current holder as recorded in storage. Right after
	// a takeover by a process that crashed before recording itself they may still describe the
	// previous holder; Holder is zero when nothing was recorded.
	Holder ledger.Holder
	Epoch  int64
	Since  time.Time
}

func (e *HeldError) Error() string {
	if e.Holder.IsZero() {
		return "lease held by an unrecorded holder"
	}
	return fmt.Sprintf("lease held by %s (epoch %d) since %s", e.Holder, e.Epoch, e.Since.UTC().Format(time.RFC3339))
}

var (
	// ErrLeaseLost means a renewal or release found the lease gone, broken or taken by another
	// holder, or that leadership could no longer be guaranteed.
	ErrLeaseLost = errors.New("lease lost")
	// ErrStalled means the leader task stopped reporting progress, so the leader stopped
	// renewing and let the lease lapse.
	ErrStalled = errors.New("leader task stalled")
	// ErrHandover means the leadership was given up on purpose (ReleaseAll, e.g. on SIGTERM).
	ErrHandover = errors.New("leadership handed over")
	// ErrLeaderClosed is returned by RunAsLeader after ReleaseAll.
	ErrLeaderClosed = errors.New("leader closed")
)
