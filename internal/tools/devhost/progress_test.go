package devhost

import (
	"slices"
	"strings"
	"testing"

	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
)

// TestProgress_TracksEveryRunCreated: the progress line follows every run the instances report
// creating, whatever made it, once each and in order; other lines are ignored.
func TestProgress_TracksEveryRunCreated(t *testing.T) {
	w := &progressWatcher{}
	for _, l := range []LogLine{
		{Msg: "run created", Attrs: map[string]any{"run": "nightly-20261125t020000z", "schedule": "nightly"}},
		{Msg: "heartbeat: occurrence decided", Attrs: map[string]any{"run": "hourly-20261125t020000z"}},
		{Msg: "run created", Attrs: map[string]any{"run": "manual-20261125t020001z-1a2b", "trigger": "manual"}},
		{Msg: "run created", Attrs: map[string]any{"run": "nightly-20261125t020000z"}}, // another instance's log of the same run
		{Msg: "run created", Attrs: map[string]any{"run": "tick-now-9f00"}},
		{Msg: "run created"},
	} {
		w.track(l)
	}
	want := []string{"nightly-20261125t020000z", "manual-20261125t020001z-1a2b", "tick-now-9f00"}
	if got := w.tracked(); !slices.Equal(got, want) {
		t.Errorf("tracked %v, want %v", got, want)
	}
}

// TestProgress_Line: each state reads as what the run is doing, naming the run's own lease.
func TestProgress_Line(t *testing.T) {
	holder := ledger.Holder{App: "local", Instance: "instance-2", PID: 42}
	lease := election.LeaderState{LeaseState: "leased", Holder: holder, Epoch: 3}
	for _, c := range []struct {
		p    Progress
		want []string
	}{
		{Progress{Run: "r", State: ledger.StatePlanning, Lease: "runs/r"},
			[]string{"progress r planning: waiting for a planner to take the run's lease", "lease runs/r: -, last holder none"}},
		{Progress{Run: "r", State: ledger.StatePlanning, Epoch: 3, Enqueued: 250, Done: 10, Lease: "runs/r", Leader: lease},
			[]string{"250 partitions enqueued so far, 10 done", "planned under epoch 3", "lease runs/r: leased, last holder local/instance-2/42 epoch 3"}},
		{Progress{Run: "r", State: ledger.StateRunning, Epoch: 3, PlanDone: true, Partitions: 16, Done: 9, Lease: "runs/r"},
			[]string{"progress r running: 9/16 partitions done"}},
		{Progress{Run: "r", State: ledger.StateQueued, Lease: "runs/r"},
			[]string{"progress r queued: waits for its schedule's run in progress to end"}},
		{Progress{Run: "r", State: ledger.StateSucceeded, Epoch: 3, PlanDone: true, Partitions: 16, Succeeded: 16, Lease: "runs/r"},
			[]string{"progress r succeeded: 16 succeeded, 0 failed of 16 partitions"}},
		{Progress{Run: "r", State: ledger.StateFailed, Reason: "BATON_JOB_PARAMS: container is required"},
			[]string{"progress r failed: BATON_JOB_PARAMS: container is required"}},
	} {
		got := c.p.Line()
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%+v: line %q, want it to contain %q", c.p, got, w)
			}
		}
	}
}
