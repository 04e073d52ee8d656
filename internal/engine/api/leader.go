package api

import (
	"context"
	"net/http"
	"time"

	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
)

// LeaderReply is GET /api/leader. Every key is always present so clients need no guessing:
// holder and since are null when no one has ever held the lease.
type LeaderReply struct {
	// Held is true while a live lease exists (leaseState leased or breaking).
	Held bool `json:"held"`
	// Holder, Epoch and Since describe the current holder, or the last one when the lease is
	// free (kept after a release or an expiry).
	Holder *ledger.Holder `json:"holder"`
	Epoch  int64          `json:"epoch"`
	Since  *time.Time     `json:"since"`
	// ReleasedAt is when that holder released the lease gracefully; null if it has not.
	ReleasedAt *time.Time `json:"releasedAt"`
	// LeaseState is storage's lease state: available, leased, expired, breaking or broken;
	// "none" when the lease blob does not exist yet (no one has contended).
	LeaseState string `json:"leaseState"`
	// DeadLetters counts the messages each queue gave up on (Service Bus dead-letter
	// subqueue, Storage poison queue), counted at most every DeadLetterCacheTTL; an empty
	// list when the API was given no queues.
	DeadLetters []DeadLetterReply `json:"deadLetters"`
}

// LeaseStateNone is LeaderReply.LeaseState before anyone contended.
const LeaseStateNone = "none"

// Leader serves GET /api/leader: the lease as storage shows it, read without contending.
func (a *API) Leader(ctx context.Context, r Request) Reply {
	if r.Method != http.MethodGet {
		return methodNotAllowed(http.MethodGet)
	}
	st, err := a.cfg.Leader.State(ctx)
	if err != nil {
		return a.storageError(r, "read the lease", err)
	}
	out := leaderReply(st)
	out.DeadLetters = a.deadLetters.counts(ctx, a.cfg.DeadLetters, a.cfg.Now, a.logger(r))
	return jsonReply(http.StatusOK, out)
}

func leaderReply(st election.LeaderState) LeaderReply {
	out := LeaderReply{Held: st.Held, Epoch: st.Epoch, LeaseState: st.LeaseState}
	if !st.Holder.IsZero() {
		h := st.Holder
		out.Holder = &h
	}
	if !st.Since.IsZero() {
		t := st.Since.UTC()
		out.Since = &t
	}
	if !st.ReleasedAt.IsZero() {
		t := st.ReleasedAt.UTC()
		out.ReleasedAt = &t
	}
	if out.LeaseState == "" {
		out.LeaseState = LeaseStateNone
	}
	return out
}
