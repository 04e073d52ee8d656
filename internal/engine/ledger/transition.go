package ledger

import (
	"errors"
	"fmt"
)

// ErrTransition marks a change of a run's state that the run's lifecycle forbids (Next).
var ErrTransition = errors.New("forbidden run state change")

// Next reports whether a run in state s may move to state to: nil when it may, an error
// wrapping ErrTransition when not. The zero State is a run without a record yet. The moves:
//
//	(none)    → queued, planning, or straight to failed, skipped, missed or paused
//	queued    → planning, cancelled
//	planning  → enqueuing, running, failed, timed-out, cancelled
//	enqueuing → enqueuing (a checkpoint), running, failed, timed-out, cancelled
//	running   → succeeded, partial, failed, timed-out, cancelled
//
// A final state never changes, but for Manifest.Reopen (a redrive round).
func (s State) Next(to State) error {
	ok := false
	switch s {
	case "":
		switch to {
		case StateQueued, StatePlanning, StateFailed, StateSkipped, StateMissed, StatePaused:
			ok = true
		}
	case StateQueued:
		ok = to == StatePlanning || to == StateCancelled
	case StatePlanning, StateEnqueuing:
		switch to {
		case StateEnqueuing, StateRunning, StateFailed, StateTimedOut, StateCancelled:
			ok = true
		}
	case StateRunning:
		switch to {
		case StateSucceeded, StatePartial, StateFailed, StateTimedOut, StateCancelled:
			ok = true
		}
	}
	if !ok {
		from := string(s)
		if from == "" {
			from = "(no record)"
		}
		return fmt.Errorf("%w: from %s to %s", ErrTransition, from, to)
	}
	return nil
}

// Transition moves m to state to when Next allows it, and leaves m unchanged with Next's error
// when not. Every change of a run's state goes through it.
func (m *Manifest) Transition(to State) error {
	if err := m.State.Next(to); err != nil {
		return fmt.Errorf("run %s: %w", m.RunID, err)
	}
	m.State = to
	return nil
}

// FinalState is the final state of a run of partitions partitions, failed of which failed;
// timedOut says some of the failures were recorded because the run's deadline passed without
// a result.
func FinalState(partitions, failed int, timedOut bool) State {
	switch {
	case timedOut && failed > 0:
		return StateTimedOut
	case failed == 0:
		return StateSucceeded
	case failed >= partitions:
		return StateFailed
	default:
		return StatePartial
	}
}
