package e2e_test

import (
	"os"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/devhost"
	"github.com/batonfn/baton/ledger"
)

// TestKnownBug_KillLeaderRightAfterRunCreated reproduces a coordinator bug found by this suite
// (reported, not fixed here; it fails today, so it runs only with E2E_KNOWN_BUGS=1):
//
// coordinator.lead creates the manifest and records the run as active before it schedules the
// run's check message. A leader killed in between leaves a run in "planning" with no check to
// resume it; every later occurrence then finds that run "in progress" and is skipped by the
// overlap policy, for ever. Here the leader is killed the moment it logs "run created"; the
// test expects the schedule to recover once the dead leader's lease has expired: either the
// orphaned run is resumed and finishes, or later occurrences run.
func TestKnownBug_KillLeaderRightAfterRunCreated(t *testing.T) {
	if os.Getenv("E2E_KNOWN_BUGS") == "" {
		t.Skip("reproduces an open coordinator bug; run with E2E_KNOWN_BUGS=1")
	}
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
	if _, err := c.h.WaitFires(ctx, 8); err != nil { // 5 occurrences after the lease expired
		t.Fatal(err)
	}
	time.Sleep(10 * time.Second)
	runs, err := listRuns(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	finished := 0
	for _, r := range runs {
		m, err := c.store.ReadManifest(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("run %s: %s %s", r, m.State, m.Reason)
		if m.State == ledger.StateSucceeded {
			finished++
		}
	}
	if finished == 0 {
		t.Errorf("the schedule never recovered after the leader of %s died between creating the run and scheduling its check: no run succeeded in %d occurrences",
			first.Str("run"), 8)
	}
}
