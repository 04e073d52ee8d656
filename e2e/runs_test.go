package e2e_test

import (
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/ledger"
)

func occurrences() int {
	if n, err := strconv.Atoi(os.Getenv("E2E_OCCURRENCES")); err == nil && n > 0 {
		return n
	}
	return 20
}

// TestRuns_OnePerOccurrence: 5 instances, every timer fire on every instance, N consecutive
// occurrences → exactly N runs, one per fired occurrence, each with every partition's result
// once and one report; leadership and no-polling invariants hold throughout.
func TestRuns_OnePerOccurrence(t *testing.T) {
	n := occurrences()
	const partitions = 6
	c := startCluster(t, clusterOpts{instances: 5, maxFires: n, params: `{"partitions":6,"workMs":20}`})
	ctx := testCtx(t, time.Duration(n)*5*time.Second+2*time.Minute)

	fires, err := c.h.WaitFires(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Time{}
	for _, f := range fires {
		if len(f.Instances) != 5 {
			t.Errorf("occurrence %s fired on %v, want all 5 instances", f.Occurrence, f.Instances)
		}
		want[coordinator.TimerRunID(f.Occurrence)] = f.Occurrence
	}
	// Every fired occurrence's run must end; give the last one time to be created first.
	var runs []string
	err = waitFor(ctx, 200*time.Millisecond, "every fired occurrence has a final run", func() (bool, error) {
		var err error
		runs, err = listRuns(ctx, c)
		if err != nil || len(runs) < len(want) {
			return false, err
		}
		for _, r := range runs {
			m, err := c.store.ReadManifest(ctx, r)
			if err != nil || !m.State.Final() {
				return false, err
			}
		}
		return true, nil
	})
	if err != nil {
		var have []string
		rctx := testCtx(t, 30*time.Second)
		runs, _ = listRuns(rctx, c)
		for _, r := range runs {
			m, rerr := c.store.ReadManifest(rctx, r)
			have = append(have, r+"="+string(m.State)+errText(rerr))
		}
		var wanted []string
		for r := range want {
			wanted = append(wanted, r)
		}
		sort.Strings(wanted)
		t.Fatalf("%v\nwant runs %v\nhave %v", err, wanted, have)
	}
	time.Sleep(time.Second) // late duplicate ticks of the last occurrence must find nothing to do
	if runs, err = listRuns(ctx, c); err != nil {
		t.Fatal(err)
	}

	// Invariant 2: exactly the fired occurrences, once each.
	sort.Strings(runs)
	if len(runs) != n {
		t.Errorf("%d runs for %d occurrences: %v", len(runs), n, runs)
	}
	for _, r := range runs {
		if _, ok := want[r]; !ok {
			t.Errorf("run %s matches no fired occurrence", r)
		}
	}
	ts := checkLeadership(t, c)
	checkNoPolling(t, c, ts)
	var dupes, redelivered, stale int
	var states []string
	for _, r := range runs {
		m, err := c.store.ReadManifest(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if m.State == ledger.StateSkipped {
			// The overlap policy may skip an occurrence whose predecessor is still running;
			// that is still one recorded decision, and it must say why.
			states = append(states, "skipped")
			if m.Reason == "" {
				t.Errorf("run %s skipped without a reason", r)
			}
			continue
		}
		fig := checkRun(t, c, r, runWant{partitions: partitions, state: ledger.StateSucceeded}, ts)
		dupes += fig.Duplicates
		redelivered += fig.Redelivered
		stale += fig.StaleDropped
		states = append(states, string(m.State))
	}
	ticks, wins := 0, 0
	for _, l := range c.h.Lines() {
		switch l.Msg {
		case "tick won the election":
			wins++
			ticks++
		case "tick lost the election", "tick skipped the occurrence":
			ticks++
		}
	}
	if ticks != 5*n {
		t.Errorf("%d ticks answered, want %d (5 instances × %d occurrences)", ticks, 5*n, n)
	}
	skipped := strings.Count(strings.Join(states, ","), "skipped")
	if skipped > 0 {
		t.Errorf("%d of %d occurrences were skipped by the overlap policy: a run outlasted the 5 s period", skipped, n)
	}
	figures(t, "occurrences=%d instances=5 ticks=%d tickWins=%d runs=%d succeeded=%d skipped=%d partitions/run=%d epochs=%d duplicateDeliveries=%d redeliveries=%d staleDropped=%d",
		n, ticks, wins, len(runs), len(runs)-skipped, skipped, partitions, len(ts), dupes, redelivered, stale)
}

func errText(err error) string {
	if err != nil {
		return " (" + err.Error() + ")"
	}
	return ""
}
