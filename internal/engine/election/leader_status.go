package election

import "github.com/batonfn/baton/internal/engine/ledger"

import "time"

// Storage lease states as reported by LeaderState.LeaseState.
const (
	LeaseStateAvailable = "available"
	LeaseStateLeased    = "leased"
	LeaseStateExpired   = "expired"
	LeaseStateBreaking  = "breaking"
	LeaseStateBroken    = "broken"
)

// LeaderState is the leadership as storage shows it, read without contending. The Leader HTTP
// function serves it as JSON.
//
// Storage does not report when a lease expires, only its state; a holder that crashed shows as
// "leased" until the lease runs out and then as "expired".
type LeaderState struct {
	// Held is true while a live lease exists (LeaseState "leased" or "breaking").
	Held bool `json:"held"`
	// Holder, Epoch and Since are the most recent holder's record (kept after it releases or
	// its lease expires). Zero when no one has ever held the lock.
	Holder ledger.Holder `json:"holder,omitzero"`
	Epoch  int64         `json:"epoch"`
	Since  time.Time     `json:"since,omitzero"`
	// ReleasedAt is when that holder released the lease gracefully; zero if it has not (it
	// still holds it, or it crashed and the lease expired).
	ReleasedAt time.Time `json:"releasedAt,omitzero"`
	// LeaseState is storage's lease state: available, leased, expired, breaking or broken.
	// Empty when the lease blob does not exist yet (no one has contended).
	LeaseState string `json:"leaseState"`
}
