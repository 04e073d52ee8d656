package e2e_test

import (
	"testing"
	"time"

	"github.com/batonfn/baton/internal/devhost"
	"github.com/batonfn/baton/ledger"
)

// TestChaos_KillLeaderRightAfterRunCreated guards against a wedge this suite found: a leader
// killed between creating a run and scheduling its check used to leave a run in "planning"
// with no check to resume it, and every later occurrence was then skipped by the overlap
// policy, for ever. The leader now schedules the check before it creates the run, and the next
// tick resumes an orphaned run before applying the policy. Here the leader is killed the moment
// it logs "run created"; the schedule must recover once the dead leader's lease has expired.
func TestChaos_KillLeaderRightAfterRunCreated(t *testing.T) {
	c := startCluster(t, clusterOpts{maxFires: 8, params: `{"partitions":3}`})
	killed := make(chan devhost.LogLine, 1)
	unsub := c.h.Subscribe(func(l devhost.LogLine) {
		if l.Msg != "run created" {
			return
		}
		select {
		case killed <- l:
			_ = c.h.Instance(l.Instance).Kill() // synchronously, before it schedules the check
		default:
		}
	})
	defer unsub()
	ctx := testCtx(t, 2*time.Minute)
	var first devhost.LogLine
	select {
	case first = <-killed:
	case <-ctx.Done():
		t.Fatal("no run created")
	}
	// The orphaned run must finish (resumed by its check or by the next tick), and a later
	// occurrence must run too: the schedule is not wedged behind it.
	orphan := first.Str("run")
	finished := 0
	err := waitFor(ctx, 500*time.Millisecond, "the orphaned run and a later run to succeed", func() (bool, error) {
		runs, err := listRuns(ctx, c)
		if err != nil {
			return false, err
		}
		finished = 0
		orphanDone := false
		for _, r := range runs {
			m, err := c.store.ReadManifest(ctx, r)
			if err != nil {
				return false, err
			}
			if m.State == ledger.StateSucceeded {
				finished++
				orphanDone = orphanDone || r == orphan
			}
		}
		return orphanDone && finished >= 2, nil
	})
	if err != nil {
		runs, _ := listRuns(ctx, c)
		for _, r := range runs {
			m, _ := c.store.ReadManifest(ctx, r)
			t.Logf("run %s: %s %s", r, m.State, m.Reason)
		}
		t.Fatal(err)
	}
	t.Logf("orphaned run %s finished; %d runs succeeded", orphan, finished)
}
