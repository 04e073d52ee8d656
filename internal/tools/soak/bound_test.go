package soak

import (
	"testing"
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/work"
)

// TestDocumentedBound_IsTheCoordinators: the checker's bound is the one the coordinator
// documents and supervises by, for a run planning, one planned and one stopped.
func TestDocumentedBound_IsTheCoordinators(t *testing.T) {
	leader, err := election.NewLeader(election.LeaderConfig{Lock: election.NewMemoryLock(testLease),
		Identity: ledger.Holder{App: "soak", Instance: "checker", PID: 1}, LeaseDuration: testLease})
	if err != nil {
		t.Fatal(err)
	}
	coord, err := coordinator.New(coordinator.Config{Leader: leader, Store: struct{ coordinator.Ledger }{},
		Sender: struct{ coordinator.Sender }{}, Jobs: work.NewRegistry(), RunTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []ledger.Manifest{
		{State: ledger.StatePlanning, Created: t0, Deadline: t0.Add(time.Minute), Expires: t0.Add(time.Minute)},
		{State: ledger.StateRunning, PlanDone: true, Created: t0, Enqueued: t0.Add(time.Second), Deadline: t0.Add(61 * time.Second),
			Expires: t0.Add(3 * time.Minute)},
		{State: ledger.StateRunning, PlanDone: true, Created: t0, Enqueued: t0.Add(time.Second), Deadline: t0.Add(61 * time.Second),
			Expires: t0.Add(3 * time.Minute), Stop: &ledger.Stop{State: ledger.StateCancelled, At: t0.Add(2 * time.Minute)}},
	} {
		if got, want := DocumentedBound(m, testLease), coord.FinalBound(m); !got.Equal(want) {
			t.Errorf("%s run: DocumentedBound %s, the coordinator's FinalBound %s", m.State, got, want)
		}
	}
}
