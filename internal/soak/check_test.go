package soak

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/devhost"
	"github.com/batonfn/baton/ledger"
)

const testLease = 15 * time.Second

var t0 = time.Date(2026, 11, 25, 1, 0, 0, 0, time.UTC)

func line(at time.Time, inst string, pid int, msg string, attrs map[string]any) devhost.LogLine {
	return devhost.LogLine{Instance: inst, PID: pid, Time: at, Level: "INFO", Msg: msg, Attrs: attrs}
}

func holder(inst string, pid int) string { return fmt.Sprintf("/%s/%d", inst, pid) }

// planned builds a finished run with n partitions whose failed indexes failed.
func planned(id string, trig ledger.Trigger, occ, created time.Time, n int, failed ...int) Run {
	isFailed := map[int]bool{}
	for _, i := range failed {
		isFailed[i] = true
	}
	state := ledger.StateSucceeded
	if len(failed) > 0 {
		state = ledger.StatePartial
	}
	m := ledger.Manifest{RunID: id, Trigger: trig, Occurrence: occ, Epoch: 1, Job: "synthetic",
		Params: json.RawMessage(fmt.Sprintf(`{"partitions":%d}`, n)), State: state, Partitions: n, PlanDone: true,
		Created: created, Deadline: created.Add(time.Minute), Finished: created.Add(2 * time.Second),
		Succeeded: n - len(failed), Failed: len(failed)}
	if state == ledger.StatePartial {
		m.Reason = "some failed"
	}
	r := Run{Manifest: m, Results: map[int]ledger.Result{}}
	for i := range n {
		r.Indexes = append(r.Indexes, i)
		r.Results[i] = ledger.Result{Run: id, Index: i, OK: !isFailed[i]}
	}
	r.Report = &ledger.Report{Run: id, State: state, Partitions: n, Succeeded: n - len(failed), Failed: len(failed),
		Aggregator: ledger.Holder{Instance: "instance-2", PID: 202}, Created: m.Finished}
	return r
}

// goodHistory is a soak in which every promise holds: three occurrences (two runs and a
// skip), one manual run asked for twice with a key, three leaderships one after another.
func goodHistory(t *testing.T) History {
	t.Helper()
	sched, err := coordinator.ParseSchedule("*/5 * * * * *", nil)
	if err != nil {
		t.Fatal(err)
	}
	occ := []time.Time{t0, t0.Add(5 * time.Second), t0.Add(10 * time.Second)}
	ids := make([]string, len(occ))
	for i, o := range occ {
		ids[i] = coordinator.TimerRunID(o)
	}
	manualID := coordinator.ManualRunID("k1", time.Time{})
	runs := map[string]Run{
		ids[0]:   planned(ids[0], ledger.TriggerTimer, occ[0], occ[0], 3),
		ids[2]:   planned(ids[2], ledger.TriggerTimer, occ[2], occ[2], 3, 1),
		manualID: planned(manualID, ledger.TriggerManual, time.Time{}, occ[1].Add(2*time.Second), 2),
	}
	mr := runs[manualID]
	mr.Manifest.IdempotencyKey = "k1"
	runs[manualID] = mr
	runs[ids[1]] = Run{Manifest: ledger.Manifest{RunID: ids[1], Trigger: ledger.TriggerTimer, Occurrence: occ[1], Epoch: 2,
		State: ledger.StateSkipped, Reason: "run still in progress", Created: occ[1], Deadline: occ[1].Add(time.Minute), Finished: occ[1]}}

	var lines []devhost.LogLine
	acq := func(at time.Time, inst string, pid int, epoch int64, hold time.Duration) {
		h := holder(inst, pid)
		lines = append(lines,
			line(at, inst, pid, "leadership acquired", map[string]any{"epoch": float64(epoch), "holder": h}),
			line(at.Add(hold), inst, pid, "leadership released", map[string]any{"epoch": float64(epoch), "holder": h}))
	}
	acq(occ[0], "instance-1", 101, 1, time.Second)
	acq(occ[1].Add(2*time.Second), "instance-3", 303, 2, time.Second)
	acq(occ[2], "instance-1", 101, 3, time.Second)
	for _, id := range []string{ids[0], manualID, ids[2]} {
		lines = append(lines,
			line(runs[id].Manifest.Created, "instance-1", 101, "run created", map[string]any{"run": id}),
			line(runs[id].Manifest.Finished, "instance-2", 202, "run finished", map[string]any{"run": id}))
	}
	return History{
		Schedule: sched, LeaseDuration: testLease,
		Fires: []devhost.TimerFire{
			{Function: "Tick", Occurrence: occ[0], Instances: []string{"instance-1"}},
			{Function: "Tick", Occurrence: occ[1], Instances: []string{"instance-2"}},
			{Function: "Tick", Occurrence: occ[2], Instances: []string{"instance-3"}},
		},
		Runs:  runs,
		Lines: lines,
		Lease: []LeaseSample{{At: occ[0], Held: true, Epoch: 1, Holder: holder("instance-1", 101)},
			{At: occ[2], Held: true, Epoch: 3, Holder: holder("instance-1", 101)}},
		Manual: []ManualCall{
			{At: occ[1].Add(2 * time.Second), Key: "k1", Status: 202, Run: manualID},
			{At: occ[1].Add(3 * time.Second), Key: "k1", Status: 200, Run: manualID},
			{At: occ[1].Add(4 * time.Second), Status: 409},
		},
		End: occ[2].Add(time.Minute),
	}
}

func TestCheck_GoodHistoryHasNoViolations(t *testing.T) {
	res := Check(goodHistory(t))
	if len(res.Violations) != 0 {
		t.Fatalf("violations in a good history: %v", res.Violations)
	}
	f := res.Figures
	if f.Fired != 3 || f.Occurrences != 3 || f.TimerStates["succeeded"] != 1 || f.TimerStates["partial"] != 1 ||
		f.TimerStates["skipped"] != 1 || f.ManualCalls != 3 || f.ManualRuns["succeeded"] != 1 || f.Runs != 4 ||
		f.Planned != 3 || f.Partitions != 8 || f.Epochs != 3 {
		t.Errorf("figures = %+v", f)
	}
	var sb strings.Builder
	res.Print(&sb)
	if !strings.Contains(sb.String(), "violations: 0") {
		t.Errorf("printed:\n%s", sb.String())
	}
}

// TestCheck_DetectsEachViolation breaks one promise at a time in a good history; the checker
// must name it (a checker that cannot fail proves nothing).
func TestCheck_DetectsEachViolation(t *testing.T) {
	id0 := coordinator.TimerRunID(t0)
	id1 := coordinator.TimerRunID(t0.Add(5 * time.Second))
	id2 := coordinator.TimerRunID(t0.Add(10 * time.Second))
	manualID := coordinator.ManualRunID("k1", time.Time{})
	editRun := func(h *History, id string, fn func(*Run)) {
		r := h.Runs[id]
		fn(&r)
		h.Runs[id] = r
	}
	for _, c := range []struct {
		name   string
		kind   string
		break_ func(h *History)
	}{
		{"a fired occurrence has no record", VUnrecorded, func(h *History) { delete(h.Runs, id1) }},
		{"an occurrence fired nowhere is not recorded as missed", VUnrecorded, func(h *History) {
			h.Fires[1].Instances = nil
			delete(h.Runs, id1)
		}},
		{"a skip without a reason", VBadRecord, func(h *History) { editRun(h, id1, func(r *Run) { r.Manifest.Reason = "" }) }},
		{"a timer record with another occurrence", VBadRecord, func(h *History) {
			editRun(h, id0, func(r *Run) { r.Manifest.Occurrence = t0.Add(time.Second) })
		}},
		{"a timer record with a manual trigger", VBadRecord, func(h *History) {
			editRun(h, id0, func(r *Run) { r.Manifest.Trigger = ledger.TriggerManual })
		}},
		{"a timer record after the end of the soak", VUnexpected, func(h *History) {
			occ := t0.Add(2 * time.Minute)
			id := coordinator.TimerRunID(occ)
			h.Runs[id] = Run{Manifest: ledger.Manifest{RunID: id, Trigger: ledger.TriggerTimer, Occurrence: occ, State: ledger.StateMissed,
				Reason: "never fired", Created: occ, Deadline: occ}}
		}},
		{"a run still running at the end", VNotFinal, func(h *History) {
			editRun(h, id0, func(r *Run) { r.Manifest.State = ledger.StateRunning; r.Report = nil })
		}},
		{"a run finished long after its bound", VNotFinal, func(h *History) {
			editRun(h, id0, func(r *Run) {
				r.Manifest.Finished = FinalBound(r.Manifest.Deadline, testLease).Add(DefaultSlack + time.Second)
			})
		}},
		{"a partition without a result", VResults, func(h *History) {
			editRun(h, id0, func(r *Run) { r.Indexes = r.Indexes[:2]; delete(r.Results, 2) })
		}},
		{"a result beyond the partitions", VResults, func(h *History) {
			editRun(h, id0, func(r *Run) {
				r.Indexes = append(r.Indexes, 3)
				r.Results[3] = ledger.Result{Run: id0, Index: 3, OK: true}
			})
		}},
		{"results for a skipped run", VResults, func(h *History) {
			editRun(h, id1, func(r *Run) { r.Indexes = []int{0} })
		}},
		{"the report counts disagree with the results", VReport, func(h *History) {
			editRun(h, id2, func(r *Run) { rep := *r.Report; rep.Failed = 0; rep.Succeeded = 3; r.Report = &rep })
		}},
		{"a finished planned run without a report", VReport, func(h *History) { editRun(h, id0, func(r *Run) { r.Report = nil }) }},
		{"aggregated twice", VAggregation, func(h *History) {
			h.Lines = append(h.Lines, line(t0.Add(3*time.Second), "instance-4", 404, "run finished", map[string]any{"run": id0}))
		}},
		{"no aggregation logged", VAggregation, func(h *History) {
			var keep []devhost.LogLine
			for _, l := range h.Lines {
				if !(l.Msg == "run finished" && l.Str("run") == id0) {
					keep = append(keep, l)
				}
			}
			h.Lines = keep
		}},
		{"created twice", VDuplicate, func(h *History) {
			h.Lines = append(h.Lines, line(t0.Add(time.Second), "instance-5", 505, "run created", map[string]any{"run": id0}))
		}},
		{"a repeated key answered with another run", VDuplicate, func(h *History) { h.Manual[1].Run = "manual-other" }},
		{"two runs recorded for one key", VDuplicate, func(h *History) {
			r := planned("manual-second", ledger.TriggerManual, time.Time{}, t0, 1)
			r.Manifest.IdempotencyKey = "k1"
			h.Runs["manual-second"] = r
			h.Manual = append(h.Manual, ManualCall{Status: 202, Run: "manual-second"})
		}},
		{"an accepted start whose run does not exist", VManual, func(h *History) {
			h.Manual = append(h.Manual, ManualCall{At: t0, Status: 202, Run: "manual-20261125t010000z-abcd1234"})
		}},
		{"a manual run nobody asked for", VUnexpected, func(h *History) {
			h.Runs["manual-stray"] = planned("manual-stray", ledger.TriggerManual, time.Time{}, t0, 1)
		}},
		{"two leaders at once", VLeadership, func(h *History) {
			h.Lines = append(h.Lines, line(t0.Add(500*time.Millisecond), "instance-4", 404, "leadership acquired",
				map[string]any{"epoch": float64(9), "holder": holder("instance-4", 404)}))
		}},
		{"epochs going back", VLeadership, func(h *History) {
			// Epoch 2 becomes 5: the next acquisition, epoch 3, is then lower.
			for i, l := range h.Lines {
				if l.Int("epoch") == 2 {
					h.Lines[i].Attrs = map[string]any{"epoch": float64(5), "holder": l.Str("holder")}
				}
			}
		}},
		{"a renewed leader overlapping the next", VLeadership, func(h *History) {
			h.Lines = append(h.Lines, line(t0.Add(6*time.Second), "instance-1", 101, "lease renewed",
				map[string]any{"epoch": float64(1), "holder": holder("instance-1", 101)}))
			// Its release line now comes before the renewal: drop it so the lease stays valid.
			var keep []devhost.LogLine
			for _, l := range h.Lines {
				if !(l.Msg == "leadership released" && l.Int("epoch") == 1) {
					keep = append(keep, l)
				}
			}
			h.Lines = keep
		}},
		{"the lease blob going back", VLeadership, func(h *History) {
			h.Lease = append(h.Lease, LeaseSample{At: t0.Add(11 * time.Second), Held: true, Epoch: 2, Holder: holder("instance-3", 303)})
		}},
		{"the lease blob naming a holder nobody logged", VLeadership, func(h *History) {
			h.Lease = append(h.Lease, LeaseSample{At: t0.Add(12 * time.Second), Held: true, Epoch: 7, Holder: holder("instance-5", 505)})
		}},
		{"a poison partition recorded as a success", VPoison, func(h *History) {
			editRun(h, manualID, func(r *Run) { r.Manifest.Params = json.RawMessage(`{"partitions":2,"failAlways":[1]}`) })
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := goodHistory(t)
			c.break_(&h)
			res := Check(h)
			found := false
			for _, v := range res.Violations {
				found = found || v.Kind == c.kind
			}
			if !found {
				t.Errorf("no %s violation; got %v", c.kind, res.Violations)
			}
			t.Logf("found: %v", res.Violations)
		})
	}
}

// TestCheck_KilledAggregatorMayNotLog: the aggregation line of a process the driver killed may
// never have been written; that alone is no violation.
func TestCheck_KilledAggregatorMayNotLog(t *testing.T) {
	h := goodHistory(t)
	id0 := coordinator.TimerRunID(t0)
	var keep []devhost.LogLine
	for _, l := range h.Lines {
		if !(l.Msg == "run finished" && l.Str("run") == id0) {
			keep = append(keep, l)
		}
	}
	h.Lines = keep
	h.Faults = []Fault{{At: t0.Add(2 * time.Second), Kind: FaultKillOther, Instance: "instance-2", PID: 202}}
	if res := Check(h); len(res.Violations) != 0 {
		t.Errorf("violations: %v", res.Violations)
	}
}

// TestCheck_PastDueRecordAfterLastFire: a resumed instance's past-due fire after the host's
// last fire records the latest occurrence passed; that is a real occurrence, checked like the
// others, not an unexpected record.
func TestCheck_PastDueRecordAfterLastFire(t *testing.T) {
	h := goodHistory(t)
	occ := t0.Add(20 * time.Second)
	id := coordinator.TimerRunID(occ)
	h.Runs[id] = Run{Manifest: ledger.Manifest{RunID: id, Trigger: ledger.TriggerTimer, Occurrence: occ, State: ledger.StateSkipped,
		Reason: "busy", Created: occ, Deadline: occ.Add(time.Minute), Finished: occ}}
	if res := Check(h); len(res.Violations) != 0 {
		t.Errorf("violations: %v", res.Violations)
	}
	r := h.Runs[id]
	r.Manifest.Reason = ""
	h.Runs[id] = r
	if res := Check(h); len(res.Violations) != 1 || res.Violations[0].Kind != VBadRecord {
		t.Errorf("a past-due skip without a reason: violations %v, want one %s", res.Violations, VBadRecord)
	}
}

func TestFinalBound(t *testing.T) {
	d := t0.Add(time.Minute)
	// deadline + lease + 2 × (lease + 5 s) = deadline + 15 + 40 s.
	if got, want := FinalBound(d, 15*time.Second), d.Add(55*time.Second); !got.Equal(want) {
		t.Errorf("FinalBound = %s, want %s", got, want)
	}
}

// The documented bound is the hard deadline plus one check delay; without one, FinalBound.
func TestDocumentedBound(t *testing.T) {
	exp := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	if got, want := DocumentedBound(exp, exp.Add(-time.Hour), 15*time.Second), exp.Add(20*time.Second); !got.Equal(want) {
		t.Errorf("DocumentedBound = %s, want %s", got, want)
	}
	if got, want := DocumentedBound(time.Time{}, exp, 15*time.Second), FinalBound(exp, 15*time.Second); !got.Equal(want) {
		t.Errorf("without Expires: %s, want %s", got, want)
	}
}

// TestCheck_LeaseLostToAnAzuriteRestart: Azurite does not keep a lease across a restart, so a
// killed holder's lease can be taken before it would have lapsed; with the holder dead and a
// restart in between that is counted, not a violation. Without the restart, or with the holder
// alive, it is two leaders.
func TestCheck_LeaseLostToAnAzuriteRestart(t *testing.T) {
	overlap := func(h *History) {
		// instance-4 takes epoch 9 half a second after epoch 3 (instance-1, t0+10 s) was taken.
		h.Lines = append(h.Lines, line(t0.Add(10500*time.Millisecond), "instance-4", 404, "leadership acquired",
			map[string]any{"epoch": float64(9), "holder": holder("instance-4", 404)}))
		var keep []devhost.LogLine
		for _, l := range h.Lines { // epoch 3's holder never released: it was killed
			if !(l.Msg == "leadership released" && l.Int("epoch") == 3) {
				keep = append(keep, l)
			}
		}
		h.Lines = keep
	}
	kill := Fault{At: t0.Add(10100 * time.Millisecond), Kind: FaultKillLeader, Instance: "instance-1", PID: 101}
	restart := Fault{At: t0.Add(10200 * time.Millisecond), Kind: FaultAzurite, Until: t0.Add(10400 * time.Millisecond)}

	h := goodHistory(t)
	overlap(&h)
	h.Faults = []Fault{kill, restart}
	if res := Check(h); len(res.Violations) != 0 || res.Figures.LeasesLostToRestart != 1 {
		t.Errorf("killed holder, Azurite restarted: violations %v, lost leases %d; want none and 1", res.Violations, res.Figures.LeasesLostToRestart)
	}
	// A live holder that noticed the loss and stopped within a renew interval counts too.
	h = goodHistory(t)
	overlap(&h)
	h.Lines = append(h.Lines, line(t0.Add(12*time.Second), "instance-1", 101, "lease renewal failed: leadership lost",
		map[string]any{"epoch": float64(3), "holder": holder("instance-1", 101)}))
	h.Faults = []Fault{restart}
	if res := Check(h); len(res.Violations) != 0 || res.Figures.LeasesLostToRestart != 1 {
		t.Errorf("live holder stopping in time: violations %v, lost leases %d", res.Violations, res.Figures.LeasesLostToRestart)
	}
	for name, faults := range map[string][]Fault{"no restart": {kill}, "holder alive": {restart}} {
		h := goodHistory(t)
		overlap(&h)
		h.Faults = faults
		if res := Check(h); !hasKind(res.Violations, VLeadership) {
			t.Errorf("%s: violations %v, want two leaders reported", name, res.Violations)
		}
	}
}

func hasKind(vs []Violation, kind string) bool {
	for _, v := range vs {
		if v.Kind == kind {
			return true
		}
	}
	return false
}
