package work_test

import (
	"strings"
	"testing"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/work"
	"github.com/batonfn/baton/work/synthetic"
)

// A run with a failure budget of 2: the first two permanent failures are within it; a
// redelivery of a failed partition counts it once; the third distinct failure stops the run
// (a Stop in state failed, by the failure budget, saying how many of how many failed), and
// the next partition message of the run is dropped unrun.
func TestWorker_FailureBudgetStopsTheRun(t *testing.T) {
	f := newFixture(t)
	f.createRun("r-budget", synthetic.Params{Partitions: 10, Permanent: []int{0, 1, 2, 3}}, func(m *ledger.Manifest) {
		m.Budget = &ledger.Budget{MaxFailed: 2}
	})
	f.mustDeliver("r-budget", 0, 1)
	f.mustDeliver("r-budget", 1, 1)
	f.mustDeliver("r-budget", 1, 2) // a redelivery: the failure is found recorded and counted again
	if m := f.manifest("r-budget"); m.Stop != nil {
		t.Fatalf("stopped within the budget (2 distinct failures, one counted twice): %+v", m.Stop)
	}
	if idx, err := f.store.ReadFailed(f.ctx, "r-budget"); err != nil || len(idx) != 3 {
		t.Fatalf("failure log %v, %v; want 3 records (partition 1 twice)", idx, err)
	}
	f.mustDeliver("r-budget", 2, 1)
	m := f.manifest("r-budget")
	if m.Stop == nil || m.Stop.State != ledger.StateFailed || m.Stop.By != work.FailureBudgetStopper ||
		!strings.Contains(m.Stop.Note, "3 of 10 partitions failed, past its budget of at most 2 failed partitions") {
		t.Fatalf("after the third failure: stop %+v, want failed by the budget", m.Stop)
	}
	if m.State.Final() {
		t.Fatalf("the run is %s: the stop's finish is the coordinator's, after the grace", m.State)
	}
	before := f.job.processCalls.Load()
	f.mustDeliver("r-budget", 5, 1)
	if f.job.processCalls.Load() != before {
		t.Error("a partition of the stopped run ran")
	}
}

// A percentage budget is checked against the partition count: 2 of 10 is not past 20%, 3 is.
func TestWorker_FailureBudgetPercent(t *testing.T) {
	f := newFixture(t)
	f.createRun("r-pct", synthetic.Params{Partitions: 10, Permanent: []int{0, 1, 2}}, func(m *ledger.Manifest) {
		m.Budget = &ledger.Budget{MaxPercent: 20}
	})
	f.mustDeliver("r-pct", 0, 1)
	f.mustDeliver("r-pct", 1, 1)
	if m := f.manifest("r-pct"); m.Stop != nil {
		t.Fatalf("stopped at 2 of 10 with a budget of 20%%: %+v", m.Stop)
	}
	f.mustDeliver("r-pct", 2, 1)
	if m := f.manifest("r-pct"); m.Stop == nil || !strings.Contains(m.Stop.Note, "at most 20% of the partitions failed") {
		t.Fatalf("at 3 of 10: stop %+v, want the budget's", m.Stop)
	}
}
