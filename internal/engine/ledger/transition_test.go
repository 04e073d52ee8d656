package ledger_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// allStates are every state a run can be in, and the zero State: no record yet.
var allStates = []ledger.State{"", ledger.StateQueued, ledger.StatePlanning, ledger.StateEnqueuing,
	ledger.StateRunning, ledger.StateSucceeded, ledger.StatePartial, ledger.StateFailed,
	ledger.StateTimedOut, ledger.StateCancelled, ledger.StateSkipped, ledger.StateMissed, ledger.StatePaused}

// Every (from, to) pair: the moves the engine makes are allowed, every other one is refused
// with ErrTransition, and a final state has no move at all.
func TestState_Next(t *testing.T) {
	type move struct{ from, to ledger.State }
	allowed := map[move]bool{}
	for _, m := range []move{
		// a run created, or an occurrence recorded final at once
		{"", ledger.StateQueued}, {"", ledger.StatePlanning},
		{"", ledger.StateFailed}, {"", ledger.StateSkipped}, {"", ledger.StateMissed}, {"", ledger.StatePaused},
		// a queued run started once the run it waited for ended
		{ledger.StateQueued, ledger.StatePlanning},
		// planning's checkpoints
		{ledger.StatePlanning, ledger.StateEnqueuing}, {ledger.StatePlanning, ledger.StateRunning},
		{ledger.StateEnqueuing, ledger.StateEnqueuing}, {ledger.StateEnqueuing, ledger.StateRunning},
		// planning failed or stalled
		{ledger.StatePlanning, ledger.StateFailed}, {ledger.StateEnqueuing, ledger.StateFailed},
		{ledger.StatePlanning, ledger.StateTimedOut}, {ledger.StateEnqueuing, ledger.StateTimedOut},
		// a planned run aggregated
		{ledger.StateRunning, ledger.StateSucceeded}, {ledger.StateRunning, ledger.StatePartial},
		{ledger.StateRunning, ledger.StateFailed}, {ledger.StateRunning, ledger.StateTimedOut},
		// a run stopped by its Stop (an operator's cancel)
		{ledger.StateQueued, ledger.StateCancelled}, {ledger.StatePlanning, ledger.StateCancelled},
		{ledger.StateEnqueuing, ledger.StateCancelled}, {ledger.StateRunning, ledger.StateCancelled},
	} {
		allowed[m] = true
	}
	states := append(slices.Clone(allStates), "bogus")
	for _, from := range states {
		for _, to := range states {
			err := from.Next(to)
			switch {
			case allowed[move{from, to}] && err != nil:
				t.Errorf("%q → %q: %v, want allowed", from, to, err)
			case !allowed[move{from, to}] && !errors.Is(err, ledger.ErrTransition):
				t.Errorf("%q → %q: %v, want ErrTransition", from, to, err)
			case from.Final() && err == nil:
				t.Errorf("%q → %q allowed: a final state never changes", from, to)
			}
		}
	}
}

// Transition applies an allowed move and leaves the manifest as it was after a refused one.
func TestManifest_Transition(t *testing.T) {
	m := ledger.Manifest{RunID: "r1", State: ledger.StateRunning}
	if err := m.Transition(ledger.StatePartial); err != nil || m.State != ledger.StatePartial {
		t.Fatalf("running → partial: %v, state %q", err, m.State)
	}
	err := m.Transition(ledger.StateSucceeded)
	if !errors.Is(err, ledger.ErrTransition) || m.State != ledger.StatePartial {
		t.Fatalf("partial → succeeded: %v, state %q; want ErrTransition and partial kept", err, m.State)
	}
}

func TestFinalState(t *testing.T) {
	for _, c := range []struct {
		partitions, failed int
		timedOut           bool
		want               ledger.State
	}{
		{10, 0, false, ledger.StateSucceeded},
		{0, 0, false, ledger.StateSucceeded},
		{10, 3, false, ledger.StatePartial},
		{10, 10, false, ledger.StateFailed},
		{10, 3, true, ledger.StateTimedOut},
		{10, 10, true, ledger.StateTimedOut},
		{10, 0, true, ledger.StateSucceeded},
	} {
		got := ledger.FinalState(c.partitions, c.failed, c.timedOut)
		if got != c.want {
			t.Errorf("FinalState(%d, %d, %v) = %q, want %q", c.partitions, c.failed, c.timedOut, got, c.want)
		}
		if !got.Final() {
			t.Errorf("FinalState(%d, %d, %v) = %q is not final", c.partitions, c.failed, c.timedOut, got)
		}
	}
}
