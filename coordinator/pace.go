package coordinator

import (
	"context"
	"time"

	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/internal/lib/latency"
)

// pacer paces a leader's enqueue so it never saturates the storage its own lease lives in:
// against the fastest of the last paceWindow batches' latency per message, strain (or a failed
// send) doubles the pause before the next batch and recovery halves it; a throttled send goes
// straight to the longest pause.
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
