package e2e_test

import (
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/tools/devhost"
)

// TestChaos_KillLeaderRightAfterRunCreated guards against a wedge this suite found: a leader
// killed between creating a run and sending its check used to leave a run in "planning" with no
// check to start it, and every later occurrence was then skipped by the overlap policy, for
// ever. The heartbeat that creates a run moves the schedule's cursor past its occurrence only
// after it sent the check, so the next heartbeat decides that occurrence again, finds its run
// and sends the check. Here the heartbeat's holder is killed the moment it logs "run created"
// (before it sends the check); the schedule must recover once the dead holder's scheduler
// lease has lapsed.
func TestChaos_KillLeaderRightAfterRunCreated(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{schedule: "*/2 * * * * *", params: `{"partitions":3}`})
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
	// The orphaned run must finish (started by its check, sent again by the next heartbeat), and
	// a later occurrence must run too: the schedule is not wedged behind it.
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
