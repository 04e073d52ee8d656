package coordinator

import (
	"context"
	"time"

	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/internal/lib/latency"
)

// The leader paces its enqueue so that it never saturates the storage its own lease lives in:
// a leader that sends as fast as it can slows every other call, its lease renewals among them,
// and can starve itself of the lease. The pacer watches each batch's latency per message
// against the fastest of the last paceWindow batches, and a send that failed transiently; on strain it waits
// before the next batch, doubling the pause, and when the latency is back near the baseline
// it halves the pause away (additive-increase, multiplicative-decrease in reverse: back off
// fast, recover gradually). A send the queue throttled (transport.ErrThrottled: Service Bus
// server-busy or a quota, Storage ServerBusy) goes straight to the longest pause: the service
// has said it is over its limit, and the SDK has already retried it for seconds.
//
// The baseline is the fastest of the recent batches, not of the whole run: a store that has
// become slower for good (a busier account, a machine with other work) is the new normal after
// paceWindow batches, and only a jump against it is strain. Against the fastest batch ever, a
// long run on a busy machine would count every batch as strain and pause the longest before
// each one.
type pacer struct {
	floor latency.Floor // of the per-message latencies of the last batches
	pause time.Duration
}

const (
	paceStrain   = 4                      // latency above this many baselines is strain
	paceMinPause = 25 * time.Millisecond  // the first pause on strain
	paceMaxPause = 2 * time.Second        // pauses never grow past this
	paceFloor    = 200 * time.Microsecond // below this a baseline is noise
	paceWindow   = latency.Window         // batches the baseline is the fastest of
)

// observe records a batch of n messages that took d to send (err is the send's error) and
// returns the pause before the next batch.
func (p *pacer) observe(n int, d time.Duration, err error) time.Duration {
	strained := transport.IsTransient(err)
	if n > 0 && err == nil {
		per := max(d/time.Duration(n), paceFloor)
		strained = per > paceStrain*p.floor.Observe(per)
	}
	switch {
	case transport.IsThrottled(err):
		p.pause = paceMaxPause
	case strained:
		p.pause = min(max(2*p.pause, paceMinPause), paceMaxPause)
	case p.pause > 0:
		p.pause /= 2
		if p.pause < paceMinPause/2 {
			p.pause = 0
		}
	}
	return p.pause
}

// wait pauses for d, reporting progress to the stall watchdog; false if ctx ended first.
func (p *pacer) wait(ctx context.Context, d time.Duration, beat func()) bool {
	if d <= 0 {
		return true
	}
	beat()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		beat()
		return true
	}
}
