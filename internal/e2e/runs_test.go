package e2e_test

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/tools/soak"
)

// occurrences is TestRuns_OnePerOccurrence's length: E2E_OCCURRENCES occurrences of the app's
// first (fastest) schedule, default 10.
func occurrences() int {
	if n, err := strconv.Atoi(os.Getenv("E2E_OCCURRENCES")); err == nil && n > 0 {
		return n
	}
	return 10
}

// TestRuns_OnePerOccurrence: the e2e app's schedules (one per overlap policy, a slow planner
// among them) on 5 instances, every heartbeat on every instance, without faults, for N
// occurrences of the fastest; then every schedule is paused and the runs settle. Each policy
// must have recorded exactly one record per due occurrence — a run; a skip naming the run in
// progress (skip, and buffer-one when one is already queued); a run queued behind the one in
// progress that plans only once it ended (buffer-one); never a skip (allow) — and nothing but
// paused records once paused; never how fast a run ends: whether an occurrence is skipped
// depends on the machine, and the checker accepts either when the record says why. Every run
// is planned under its own lease, has every partition's result once and one report; the
// leadership and no-polling invariants hold throughout (internal/soak's checker with no
// faults, and the per-run checks).
func TestRuns_OnePerOccurrence(t *testing.T) {
	t.Parallel()
	n := occurrences()
	decls := appSchedules(t)
	var names []string
	for _, d := range decls {
		names = append(names, d.Name)
	}
	started := time.Now()
	c := startCluster(t, clusterOpts{exe: appBin, instances: 5})
	ctx := testCtx(t, time.Duration(n)*10*time.Second+4*time.Minute)
	first := c.firstCursors(ctx, names)

	// N occurrences of the fastest schedule: wait for the record of its Nth.
	fast := decls[0]
	cron, err := soak.UTC(fast.Cron)
	if err != nil {
		t.Fatal(err)
	}
	last := first[fast.Name]
	for range n {
		last, _ = cron.Next(last)
	}
	lastID := ledger.ScheduleRunID(fast.Name, last)
	if err := waitFor(ctx, 200*time.Millisecond, "the record of "+lastID, func() (bool, error) {
		_, err := c.store.ReadManifest(ctx, lastID)
		return err == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	var pauses []soak.Pause
	for _, name := range names {
		p, err := c.pause(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		pauses = append(pauses, p)
	}
	settled, err := c.settle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !settled {
		t.Error("runs still not final past their bound (the checker names them)")
	}
	stop := time.Now()
	c.shutdown() // every line written; no heartbeat decides anything after end
	end := time.Now()

	runs, err := soak.ReadLedger(ctx, c.store)
	if err != nil {
		t.Fatal(err)
	}
	leases, err := c.runLeases(ctx, runs)
	if err != nil {
		t.Fatal(err)
	}
	var samples []soak.LeaseSample
	for _, s := range c.sampler.all() {
		samples = append(samples, soak.LeaseSample{At: s.At, Held: s.State.Held, Epoch: s.State.Epoch, Holder: s.State.Holder.String()})
	}
	h := soak.History{Schedules: checkerSchedules(t, decls), Heartbeat: heartbeatEach, LeaseDuration: leaseDuration,
		Started: started, First: first, WindowEnd: stop.Add(-heartbeatEach - soak.DefaultDelayMargin), Pauses: pauses,
		Fires: c.h.Fires(), Runs: runs, Lines: c.h.Lines(), Lease: samples, RunLeases: leases, End: end}
	res := soak.Check(h)
	var out bytes.Buffer
	res.Print(&out)
	t.Logf("history:\n%s", out.String())
	for _, v := range res.Violations {
		t.Errorf("%s", v)
	}

	// Every run, in detail: results, report, segments on its own lease, one creation and one
	// aggregation.
	ts := checkLeadership(t, c)
	checkNoPolling(t, c, ts)
	parts := map[string]int{}
	for _, d := range decls {
		parts[d.Name] = partitionsOf(t, d.Params)
	}
	var dupes, redelivered, stale, planned int
	for _, id := range slices.Sorted(maps.Keys(runs)) {
		m := runs[id].Manifest
		if !m.PlanDone {
			continue
		}
		planned++
		fig := checkRun(t, c, id, runWant{partitions: parts[m.Schedule], state: ledger.StateSucceeded}, ts)
		dupes += fig.Duplicates
		redelivered += fig.Redelivered
		stale += fig.StaleDropped
	}
	if planned == 0 {
		t.Error("no run ever planned")
	}
	var perSchedule []string
	for _, name := range names {
		s := res.Figures.Schedules[name]
		perSchedule = append(perSchedule, fmt.Sprintf("%s[%s queued=%d]", name, soak.Counts(s.States), s.Queued))
	}
	figures(t, "occurrences of %s=%d instances=5 heartbeats=%d schedules: %s planned=%d schedulerEpochs=%d runLeaderships=%d duplicateDeliveries=%d redeliveries=%d staleDropped=%d",
		fast.Name, n, res.Figures.Heartbeats, strings.Join(perSchedule, " "), planned, res.Figures.SchedulerEpochs, res.Figures.RunLeaderships,
		dupes, redelivered, stale)
}
