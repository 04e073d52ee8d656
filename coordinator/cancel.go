package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/work"
)

// ErrFinal refuses to change a run that is already final.
var ErrFinal = errors.New("the run is final")

// MaxCancelNote bounds a cancel's note, in characters.
const MaxCancelNote = MaxPauseNote

// stopRound numbers the check that finishes a stopped run once its grace has passed.
const stopRound = 1_500_000_000

// Cancel stops run on behalf of by, with note: the run's manifest gets a Stop (state
// cancelled), so planning stops at its next checkpoint, workers drop its messages and cancel the
// partitions they have in flight, and the run is finished as cancelled from the results it has
// one stop grace later (StopGrace). A queued run ends cancelled at once. Cancelling a run that
// is already stopping returns its manifest unchanged (the first cancel stands); ErrFinal when
// the run is final without a cancel, ledger.ErrNotFound when there is no such run.
func (c *Coordinator) Cancel(ctx context.Context, run, note, by string) (ledger.Manifest, error) {
	if n := utf8.RuneCountInString(note); n > MaxCancelNote {
		return ledger.Manifest{}, fmt.Errorf("%w: note is %d characters; at most %d", ErrBadRequest, n, MaxCancelNote)
	}
	now := c.cfg.Now().UTC()
	stop := ledger.Stop{State: ledger.StateCancelled, By: by, At: now, Note: note}
	m, err := c.cfg.Store.UpdateManifest(ctx, run, ledger.NoFence, func(m *ledger.Manifest) error {
		switch {
		case m.Stop != nil:
			return ledger.ErrNoChange
		case m.State.Final():
			return fmt.Errorf("%w: run %s is %s", ErrFinal, run, m.State)
		}
		s := stop
		m.Stop = &s
		if m.State == ledger.StateQueued {
			// Never started: nothing runs, nothing to aggregate.
			if err := m.Transition(ledger.StateCancelled); err != nil {
				return err
			}
			m.Finished, m.Reason = now, s.Reason(0)
		}
		return nil
	})
	if err != nil {
		return m, err
	}
	log := c.log(run, m.Epoch).With("by", m.Stop.By, "note", m.Stop.Note)
	if m.State.Final() {
		log.Warn("run cancelled before it started")
		return m, nil
	}
	log.Warn("run cancelled: planning stops, workers drop its partitions; it is finished once the stop grace has passed",
		"state", m.State, "finishAt", m.Stop.At.Add(c.StopGrace()).UTC())
	// The fast path; the heartbeat's supervision finishes it should the check be lost.
	if err := c.scheduleCheck(ctx, run, m.Epoch, stopRound, m.Stop.At.Add(c.StopGrace())); err != nil {
		log.Warn("cancel: the check that finishes the run was not sent; the heartbeat finishes it", "err", err)
	}
	return m, nil
}

// StopGrace is how long after a run's Stop it is finished: a check delay and a stop poll. By
// then a worker's copy of the manifest from before the Stop has expired (the app sets
// work.WorkerConfig.CopyTTL to the lease duration), so no partition of the run starts any more,
// and the partitions in flight have seen their contexts cancelled (within work.DefaultStopPoll)
// and recorded what they finished.
func (c *Coordinator) StopGrace() time.Duration {
	return c.checkDelay() + work.DefaultStopPoll
}

// finishStopped finishes m, which has a Stop, once its grace has passed, and otherwise
// schedules the check that does (round next).
func (c *Coordinator) finishStopped(ctx context.Context, m ledger.Manifest, next int) error {
	at := m.Stop.At.Add(c.StopGrace())
	if c.cfg.Now().Before(at) {
		return c.scheduleCheck(ctx, m.RunID, m.Epoch, next, at)
	}
	if c.cfg.Finisher != nil {
		done, err := c.cfg.Finisher.FinishStopped(ctx, m.RunID)
		if err != nil {
			return fmt.Errorf("finish stopped run %s: %w", m.RunID, err)
		}
		if done {
			c.log(m.RunID, m.Epoch).Warn("stopped run finished", "state", m.Stop.State, "by", m.Stop.By)
			return nil
		}
	}
	// Another aggregator holds the claim (or finished meanwhile): look again.
	return c.scheduleCheck(ctx, m.RunID, m.Epoch, next, c.cfg.Now().Add(c.checkDelay()))
}

var _ Finisher = (*work.Worker)(nil)
