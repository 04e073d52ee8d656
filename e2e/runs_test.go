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

// occurrences is TestRuns_OnePerOccurrence's length: E2E_OCCURRENCES, default 10 (50 s of
// schedule, 50 Ticks on 5 instances).
func occurrences() int {
	if n, err := strconv.Atoi(os.Getenv("E2E_OCCURRENCES")); err == nil && n > 0 {
		return n
	}
	return 10
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
	// Late duplicate ticks of the last occurrence must find nothing to do: list the runs once
	// every fired tick has been answered.
	err = waitFor(ctx, 100*time.Millisecond, "every tick answered", func() (bool, error) {
		ticks := 0
		for _, r := range c.Records() {
			if r.Function == "Tick" {
				ticks++
			}
		}
		return ticks >= 5*n, nil
	})
	if err != nil {
		t.Fatal(err)
	}
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
	var longest time.Duration
	manifests := map[string]ledger.Manifest{}
	for _, r := range runs {
		m, err := c.store.ReadManifest(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		manifests[r] = m
	}
	skipped := 0
	for _, r := range runs {
		m := manifests[r]
		if m.State == ledger.StateSkipped {
			// The overlap policy may skip an occurrence: how long a run takes depends on the
			// machine, so a skip is not a failure, but it must be one the policy allows.
			skipped++
			checkSkip(t, m, manifests)
			continue
		}
		fig := checkRun(t, c, r, runWant{partitions: partitions, state: ledger.StateSucceeded}, ts)
		dupes += fig.Duplicates
		redelivered += fig.Redelivered
		stale += fig.StaleDropped
		longest = max(longest, m.Finished.Sub(m.Occurrence))
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
	if skipped == len(runs) {
		t.Errorf("all %d occurrences were skipped: no run ever started", n)
	}
	figures(t, "occurrences=%d instances=5 ticks=%d tickWins=%d runs=%d succeeded=%d skipped=%d partitions/run=%d epochs=%d duplicateDeliveries=%d redeliveries=%d staleDropped=%d longestRun(occurrence→final)=%s",
		n, ticks, wins, len(runs), len(runs)-skipped, skipped, partitions, len(ts), dupes, redelivered, stale, longest.Round(time.Millisecond))
}

// checkSkip asserts that a skipped occurrence was skipped for a reason the policy allows, as the
// ledger shows it: either the run its reason names was still in progress when the skip was
// recorded (overlap policy: skip), or a later occurrence was due before the lease was free (an
// occurrence from the inbox that the schedule overtook).
func checkSkip(t *testing.T, m ledger.Manifest, runs map[string]ledger.Manifest) {
	t.Helper()
	if active, ok := strings.CutPrefix(m.Reason, "run "); ok && strings.HasSuffix(m.Reason, "is still in progress (overlap policy: skip)") {
		active = strings.Fields(active)[0]
		am, ok := runs[active]
		switch {
		case !ok:
			t.Errorf("run %s skipped for run %s, which is not in the ledger", m.RunID, active)
		case !am.Created.Before(m.Created):
			t.Errorf("run %s (recorded %s) skipped for run %s, which was created later (%s)", m.RunID,
				m.Created.Format(time.StampMilli), active, am.Created.Format(time.StampMilli))
		case !am.Finished.After(m.Created):
			t.Errorf("run %s skipped at %s for run %s, which was already final at %s", m.RunID,
				m.Created.Format(time.StampMilli), active, am.Finished.Format(time.StampMilli))
		}
		return
	}
	if strings.Contains(m.Reason, "came before the lease was free") {
		for _, o := range runs {
			if o.Occurrence.After(m.Occurrence) && !o.Occurrence.After(m.Created) {
				return
			}
		}
		t.Errorf("run %s (occurrence %s) skipped as overtaken, but no later occurrence was due by %s: %q", m.RunID,
			m.Occurrence.Format(time.StampMilli), m.Created.Format(time.StampMilli), m.Reason)
		return
	}
	t.Errorf("run %s skipped for a reason no policy gives: %q", m.RunID, m.Reason)
}

func errText(err error) string {
	if err != nil {
		return " (" + err.Error() + ")"
	}
	return ""
}
