package work

import (
	"context"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// heldClaim is an in-progress report as its aggregator wrote it, and its version.
type heldClaim struct {
	report ledger.Report
	etag   ledger.ETag
}

// claimHold keeps a report claim fresh while its aggregator works: every third of StaleClaim it
// rewrites the claim with Renewed set to now, under the last version it wrote. A claim is
// therefore stale only when its aggregator has stopped (crashed, stalled, or cut off from
// storage) for StaleClaim, however long a live aggregation takes.
//
// When a renewal finds the claim is no longer its own (another worker took it over after the
// renewals stopped for StaleClaim: the process was paused, or storage unreachable), ctx is
// cancelled so the aggregation stops early; its report could not be written anyway, as the
// takeover changed the version.
type claimHold struct {
	w     *Worker
	ctx   context.Context // the aggregation's: cancelled when the claim is lost
	lose  context.CancelFunc
	claim heldClaim // owned by the renewing goroutine until done is closed
	lost  bool
	quit  chan struct{}
	done  chan struct{}
}

// holdClaim starts renewing c until stop. The aggregation runs under the hold's ctx.
func (w *Worker) holdClaim(ctx context.Context, c heldClaim) *claimHold {
	h := &claimHold{w: w, claim: c, quit: make(chan struct{}), done: make(chan struct{})}
	h.ctx, h.lose = context.WithCancel(ctx)
	go h.renewEvery(max(w.cfg.StaleClaim/3, time.Millisecond))
	return h
}

// stop ends the renewals (waiting for one in flight, so its version is not lost) and returns
// the claim's current version, or lost when another worker holds it now.
func (h *claimHold) stop() (ledger.ETag, bool) {
	close(h.quit)
	<-h.done
	h.lose()
	return h.claim.etag, h.lost
}

func (h *claimHold) renewEvery(every time.Duration) {
	defer close(h.done)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-h.quit:
			return
		case <-h.ctx.Done():
			return
		case <-tick.C:
		}
		if !h.renew() {
			h.lost = true
			h.lose()
			return
		}
	}
}

// renew writes the claim again with Renewed set, and reports false only when the claim is
// someone else's now. A failed write whose outcome is unknown (an outage, a timeout that may
// have taken effect) is settled by reading the claim back: if it is still ours, its current
// version is the one to write under next; if the read fails too, the next tick tries again.
func (h *claimHold) renew() bool {
	// Not cancelled by stop: a renewal that takes effect must have its version recorded.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(h.ctx), h.w.cfg.RecordTimeout)
	defer cancel()
	next := h.claim.report
	next.Renewed = h.w.now()
	etag, err := h.w.cfg.Store.WriteReport(ctx, next, h.claim.etag)
	if err == nil {
		h.claim = heldClaim{next, etag}
		return true
	}
	cur, curTag, rerr := h.w.cfg.Store.ReadReport(ctx, next.Run)
	switch {
	case rerr != nil:
		h.w.logger().Warn("could not renew the report claim; trying again", "run", next.Run, "err", err, "readErr", rerr)
		return true
	case cur.Claim == next.Claim && !cur.State.Final():
		h.claim = heldClaim{cur, curTag}
		return true
	default:
		return false
	}
}
