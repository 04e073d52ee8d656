package soak

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/tools/devhost"
)

const testLease = 15 * time.Second

var t0 = time.Date(2026, 11, 25, 1, 0, 0, 0, time.UTC)

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

func line(at time.Time, inst string, pid int, msg string, attrs map[string]any) devhost.LogLine {
	return devhost.LogLine{Instance: inst, PID: pid, Time: at, Level: "INFO", Msg: msg, Attrs: attrs}
}

func holder(inst string, pid int) string { return fmt.Sprintf("/%s/%d", inst, pid) }

// history builds a History by hand: schedules, runs and the lines that go with them.
type history struct {
	t *testing.T
	h History
}

func newHistory(t *testing.T) *history {
	t.Helper()
	b := &history{t: t, h: History{Heartbeat: time.Second, LeaseDuration: testLease, RunTimeout: time.Minute, CheckRounds: 3,
		Started: at(-1), First: map[string]time.Time{}, Runs: map[string]Run{}, End: at(60), WindowEnd: at(15)}}
	b.schedule("fast", "*/5 * * * * *", config.OverlapSkip)
	b.schedule("many", "*/10 * * * * *", config.OverlapAllow)
	b.schedule("held", "*/5 * * * * *", config.OverlapBufferOne)
	b.schedule("pausable", "*/5 * * * * *", config.OverlapSkip)
	return b
}

func (b *history) schedule(name, expr string, o config.Overlap) {
	cron, err := UTC(expr)
	if err != nil {
		b.t.Fatal(err)
	}
	b.h.Schedules = append(b.h.Schedules, Schedule{Name: name, Job: "synthetic", Cron: cron, Overlap: o, CatchUp: 8 * time.Second})
	b.h.First[name] = t0
}

// heartbeat logs one heartbeat's leadership of the scheduler lease.
func (b *history) heartbeat(sec float64, epoch int64) {
	h := holder("instance-1", 101)
	b.h.Lines = append(b.h.Lines,
		line(at(sec), "instance-1", 101, "leadership acquired", map[string]any{"epoch": float64(epoch), "holder": h}),
		line(at(sec+0.2), "instance-1", 101, "leadership released", map[string]any{"epoch": float64(epoch), "holder": h}))
	b.h.Lease = append(b.h.Lease, LeaseSample{At: at(sec + 0.05), Held: true, Epoch: epoch, Holder: h})
}

// run records a planned run of n partitions created at created and final at finished, planned
// by instance-2 under its own lease, aggregated by instance-3.
func (b *history) run(id string, trig ledger.Trigger, occ time.Time, created, finished float64, n int, failed ...int) {
	isFailed := map[int]bool{}
	for _, i := range failed {
		isFailed[i] = true
	}
	state := ledger.StateSucceeded
	if len(failed) > 0 {
		state = ledger.StatePartial
	}
	name, _ := ledger.ParseRunID(id)
	m := ledger.Manifest{RunID: id, Trigger: trig, Schedule: name.Schedule, Occurrence: occ, Epoch: 1, Job: "synthetic",
		Params: json.RawMessage(fmt.Sprintf(`{"partitions":%d}`, n)), State: state, Partitions: n, PlanDone: true,
		Lease: ledger.RunLeaseName(id), Segments: []ledger.Segment{{Epoch: 1, From: 0}},
		Created: at(created), Enqueued: at(created + 0.2), Deadline: at(created + 60), Expires: at(created + 60), Finished: at(finished),
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
		Aggregator: ledger.Holder{Instance: "instance-3", PID: 303}, Created: m.Finished}
	b.h.Runs[id] = r
	lease, h := ledger.RunLeaseName(id), holder("instance-2", 202)
	b.h.Lines = append(b.h.Lines,
		line(at(created), "instance-1", 101, "run created", map[string]any{"run": id, "state": "planning"}),
		line(at(created+0.1), "instance-2", 202, "leadership acquired", map[string]any{"epoch": float64(1), "holder": h, "lease": lease}),
		line(at(created+0.1), "instance-2", 202, "planning the run", map[string]any{"run": id, "epoch": float64(1)}),
		line(at(created+0.3), "instance-2", 202, "leadership released", map[string]any{"epoch": float64(1), "holder": h, "lease": lease}),
		line(at(finished), "instance-3", 303, "run finished", map[string]any{"run": id}))
	b.h.RunLeases[lease] = LeaseSample{At: b.h.End, Epoch: 1, Holder: h}
}

// record records an occurrence decided without a run (skipped, missed, paused).
func (b *history) record(id string, occ time.Time, created float64, state ledger.State, reason string) {
	name, _ := ledger.ParseRunID(id)
	b.h.Runs[id] = Run{Manifest: ledger.Manifest{RunID: id, Trigger: ledger.TriggerTimer, Schedule: name.Schedule, Occurrence: occ,
		State: state, Reason: reason, Created: at(created), Finished: at(created)}}
}

func occID(schedule string, sec float64) string { return ledger.ScheduleRunID(schedule, at(sec)) }

// goodHistory is a soak in which every promise holds: four schedules over 15 s, one of them
// paused for one occurrence; runs, a skip, a queued run; a manual run asked for twice with a
// key and a run now; heartbeat leaderships one after another.
func goodHistory(t *testing.T) History {
	b := newHistory(t)
	b.h.RunLeases = map[string]LeaseSample{}
	for i, sec := range []float64{5, 10, 15} {
		b.heartbeat(sec, int64(i+1))
	}
	// fast (skip): a run outlasting the next occurrence, which is skipped naming it.
	b.run(occID("fast", 5), ledger.TriggerTimer, at(5), 5.1, 11, 3)
	b.record(occID("fast", 10), at(10), 10.1, ledger.StateSkipped, "run "+occID("fast", 5)+" is still in progress (overlap policy: skip)")
	b.run(occID("fast", 15), ledger.TriggerTimer, at(15), 15.1, 17, 3, 1)
	// many (allow): one occurrence in the window.
	b.run(occID("many", 10), ledger.TriggerTimer, at(10), 10.2, 14, 2)
	// held (buffer-one): occurrence 10 queued behind 5, started once 5 ended; 15 skipped.
	b.run(occID("held", 5), ledger.TriggerTimer, at(5), 5.2, 12, 2)
	b.run(occID("held", 10), ledger.TriggerTimer, at(10), 10.3, 16, 2)
	b.h.Lines = append(b.h.Lines, line(at(10.3), "instance-1", 101, "run created", map[string]any{"run": occID("held", 10), "state": "queued"}))
	b.dropLine(func(l devhost.LogLine) bool { // the queued run was created queued, and planned after 12
		return l.Msg == "run created" && l.Str("run") == occID("held", 10) && l.Str("state") == "planning"
	})
	b.shiftRunLease(occID("held", 10), 12.5)
	b.record(occID("held", 15), at(15), 15.2, ledger.StateSkipped,
		"run "+occID("held", 10)+" is still in progress and "+occID("held", 5)+" is already waiting for it (overlap policy: buffer-one)")
	// pausable: paused from 7 to 13.
	b.h.Pauses = []Pause{{Schedule: "pausable", Note: "maintenance", From: at(7), FromDone: at(7.1), To: at(13), ToDone: at(13.1)}}
	b.run(occID("pausable", 5), ledger.TriggerTimer, at(5), 5.3, 6, 2)
	b.record(occID("pausable", 10), at(10), 10.4, ledger.StatePaused, "schedule paused: maintenance")
	b.run(occID("pausable", 15), ledger.TriggerTimer, at(15), 15.3, 16, 2)
	// A manual run asked for twice with a key, a run now of the settings' schedule, a refusal.
	manualID := ledger.ManualRunID("k1", time.Time{})
	b.run(manualID, ledger.TriggerManual, time.Time{}, 7, 9, 2)
	mr := b.h.Runs[manualID]
	mr.Manifest.IdempotencyKey = "k1"
	b.h.Runs[manualID] = mr
	nowID := ledger.ScheduleNowRunID(coordinator.LegacySchedule, "k2", time.Time{})
	b.run(nowID, ledger.TriggerManual, time.Time{}, 8, 9, 1)
	nr := b.h.Runs[nowID]
	nr.Manifest.IdempotencyKey = "k2"
	nr.Manifest.Schedule = coordinator.LegacySchedule
	b.h.Runs[nowID] = nr
	b.h.Manual = []ManualCall{
		{At: at(7), Key: "k1", Body: `{"job":"synthetic"}`, Status: 202, Run: manualID},
		{At: at(8), Key: "k1", Body: `{"job":"synthetic"}`, Status: 200, Run: manualID},
		{At: at(8), Key: "k2", Status: 202, Run: nowID},
		{At: at(9), Status: 409},
	}
	return b.h
}

func (b *history) dropLine(drop func(devhost.LogLine) bool) {
	var keep []devhost.LogLine
	for _, l := range b.h.Lines {
		if !drop(l) {
			keep = append(keep, l)
		}
	}
	b.h.Lines = keep
}

// shiftRunLease moves the acquisition, planning and release of run's lease to sec.
func (b *history) shiftRunLease(run string, sec float64) {
	for i, l := range b.h.Lines {
		if l.Str("lease") == ledger.RunLeaseName(run) || (l.Msg == "planning the run" && l.Str("run") == run) {
			b.h.Lines[i].Time = at(sec)
		}
	}
}

func TestCheck_GoodHistoryHasNoViolations(t *testing.T) {
	res := Check(goodHistory(t))
	if len(res.Violations) != 0 {
		t.Fatalf("violations in a good history: %v", res.Violations)
	}
	f := res.Figures
	fast, held, pausable := f.Schedules["fast"], f.Schedules["held"], f.Schedules["pausable"]
	if fast.Occurrences != 3 || fast.States["succeeded"] != 1 || fast.States["partial"] != 1 || fast.States["skipped"] != 1 ||
		held.Queued != 1 || held.States["skipped"] != 1 || pausable.States["paused"] != 1 || f.Schedules["many"].Occurrences != 1 ||
		f.ManualCalls != 4 || f.ManualRuns["succeeded"] != 2 || f.Planned != 9 || f.SchedulerEpochs != 3 || f.RunLeases != 9 {
		t.Errorf("figures = %+v; fast %+v held %+v pausable %+v", f, fast, held, pausable)
	}
	var sb strings.Builder
	res.Print(&sb)
	if !strings.Contains(sb.String(), "violations: 0") || !strings.Contains(sb.String(), "schedule pausable:") {
		t.Errorf("printed:\n%s", sb.String())
	}
}

// TestCheck_DetectsEachViolation breaks one promise at a time in a good history; the checker
// must name it (a checker that cannot fail proves nothing).
func TestCheck_DetectsEachViolation(t *testing.T) {
	fast5, fast10, fast15 := occID("fast", 5), occID("fast", 10), occID("fast", 15)
	held10 := occID("held", 10)
	manualID := ledger.ManualRunID("k1", time.Time{})
	editRun := func(h *History, id string, fn func(*Run)) {
		r := h.Runs[id]
		fn(&r)
		h.Runs[id] = r
	}
	editLines := func(h *History, fn func(*devhost.LogLine)) {
		for i := range h.Lines {
			fn(&h.Lines[i])
		}
	}
	record := func(h *History, id string, occ time.Time, created time.Time, state ledger.State, reason string) {
		name, _ := ledger.ParseRunID(id)
		h.Runs[id] = Run{Manifest: ledger.Manifest{RunID: id, Trigger: ledger.TriggerTimer, Schedule: name.Schedule, Occurrence: occ,
			State: state, Reason: reason, Created: created, Finished: created}}
	}
	for _, c := range []struct {
		name   string
		kind   string
		break_ func(h *History)
	}{
		{"a due occurrence has no record", VUnrecorded, func(h *History) { delete(h.Runs, fast15) }},
		{"a skip without a reason", VBadRecord, func(h *History) { editRun(h, fast10, func(r *Run) { r.Manifest.Reason = "" }) }},
		{"a record with another occurrence", VBadRecord, func(h *History) {
			editRun(h, fast5, func(r *Run) { r.Manifest.Occurrence = at(6) })
		}},
		{"an occurrence record with a manual trigger", VBadRecord, func(h *History) {
			editRun(h, fast5, func(r *Run) { r.Manifest.Trigger = ledger.TriggerManual })
		}},
		{"a record naming another schedule", VBadRecord, func(h *History) {
			editRun(h, fast5, func(r *Run) { r.Manifest.Schedule = "many" })
		}},
		{"a record decided before its occurrence", VBadRecord, func(h *History) {
			editRun(h, fast15, func(r *Run) { r.Manifest.Created = at(13) })
		}},
		{"a record of a time that is no occurrence", VUnexpected, func(h *History) {
			record(h, occID("fast", 7), at(7), at(7), ledger.StateSkipped, "run x is still in progress")
		}},
		{"a record of an undeclared schedule", VUnexpected, func(h *History) {
			record(h, occID("ghost", 5), at(5), at(5), ledger.StateMissed, "late")
		}},
		{"a record of an occurrence before the app started", VUnexpected, func(h *History) {
			record(h, occID("fast", -5), at(-5), at(1), ledger.StateMissed, "found late")
		}},
		{"an ID no format gives", VUnexpected, func(h *History) {
			h.Runs["nothing-like-a-run"] = Run{Manifest: ledger.Manifest{RunID: "nothing-like-a-run", State: ledger.StateSucceeded}}
		}},
		{"an occurrence decided late with no fault", VDelay, func(h *History) {
			editRun(h, fast15, func(r *Run) { r.Manifest.Created = at(40) })
		}},
		{"missed with no fault", VDelay, func(h *History) {
			record(h, fast15, at(15), at(45), ledger.StateMissed, "found late")
		}},
		{"missed within the catch-up window", VBadRecord, func(h *History) {
			h.Faults = []Fault{{At: at(14), Kind: FaultKillLeader, Instance: "instance-1", PID: 101}}
			record(h, fast15, at(15), at(17), ledger.StateMissed, "found late")
		}},
		{"a skip naming a run of another schedule", VPolicy, func(h *History) {
			editRun(h, fast10, func(r *Run) {
				r.Manifest.Reason = "run " + occID("many", 10) + " is still in progress (overlap policy: skip)"
			})
		}},
		{"a skip naming a run long final", VPolicy, func(h *History) {
			editRun(h, fast5, func(r *Run) { r.Manifest.Finished = at(5.5); r.Report.Created = at(5.5) })
			editLines(h, func(l *devhost.LogLine) {
				if l.Msg == "run finished" && l.Str("run") == fast5 {
					l.Time = at(5.5)
				}
			})
			editRun(h, fast10, func(r *Run) { r.Manifest.Created = at(12) })
		}},
		{"a skip for a reason no policy gives", VPolicy, func(h *History) {
			editRun(h, fast10, func(r *Run) { r.Manifest.Reason = "felt like it" })
		}},
		{"allow skipping", VPolicy, func(h *History) {
			record(h, occID("many", 0), at(0), at(0.1), ledger.StateSkipped, "run "+occID("many", 10)+" is still in progress")
		}},
		{"a skip schedule running two at once", VPolicy, func(h *History) {
			delete(h.Runs, fast10)
			b := &history{t: t, h: *h}
			b.run(fast10, ledger.TriggerTimer, at(10), 10.1, 12, 3)
			*h = b.h
		}},
		{"a queued run planned before the run it waited for ended", VPolicy, func(h *History) {
			b := &history{t: t, h: *h}
			b.shiftRunLease(held10, 10.5)
			*h = b.h
		}},
		{"a paused record outside the pause", VPause, func(h *History) {
			h.Pauses[0].From, h.Pauses[0].FromDone = at(12), at(12.1)
		}},
		{"a run decided while paused", VPause, func(h *History) {
			h.Pauses[0].To, h.Pauses[0].ToDone = at(20), at(20.1)
		}},
		{"a paused record not naming the note", VPause, func(h *History) {
			h.Pauses[0].Note = "something else"
		}},
		{"a run planned under no lease of its own", VOwnLease, func(h *History) {
			editRun(h, fast5, func(r *Run) { r.Manifest.Lease = "" })
		}},
		{"a segment under an epoch nobody acquired on the run's lease", VOwnLease, func(h *History) {
			editRun(h, fast5, func(r *Run) { r.Manifest.Segments = append(r.Manifest.Segments, ledger.Segment{Epoch: 2, From: 1}) })
		}},
		{"planning under the scheduler lease", VOwnLease, func(h *History) {
			editLines(h, func(l *devhost.LogLine) {
				if l.Str("lease") == ledger.RunLeaseName(fast5) {
					delete(l.Attrs, "lease") // the acquisition was the scheduler lease's, not the run's
				}
			})
		}},
		{"planning by a process not holding the run's lease", VOwnLease, func(h *History) {
			editLines(h, func(l *devhost.LogLine) {
				if l.Msg == "planning the run" && l.Str("run") == fast5 {
					l.Instance, l.PID = "instance-4", 404
				}
			})
		}},
		{"a run planned before its occurrence", VEarly, func(h *History) {
			editRun(h, fast15, func(r *Run) { r.Manifest.Created = at(14.6) })
			b := &history{t: t, h: *h}
			b.shiftRunLease(fast15, 14.8)
			*h = b.h
		}},
		{"a run still running at the end", VNotFinal, func(h *History) {
			editRun(h, fast5, func(r *Run) { r.Manifest.State = ledger.StateRunning; r.Report = nil })
		}},
		{"a run finished long after its bound", VNotFinal, func(h *History) {
			editRun(h, fast15, func(r *Run) {
				r.Manifest.Finished = DocumentedBound(r.Manifest, testLease).Add(time.Second + DefaultSlack + time.Second)
			})
		}},
		{"a queued run still waiting long after the run before it ended", VNotFinal, func(h *History) {
			editRun(h, held10, func(r *Run) { r.Manifest.State = ledger.StateQueued; r.Manifest.PlanDone = false; r.Report = nil })
		}},
		{"a partition without a result", VResults, func(h *History) {
			editRun(h, fast5, func(r *Run) { r.Indexes = r.Indexes[:2]; delete(r.Results, 2) })
		}},
		{"a result beyond the partitions", VResults, func(h *History) {
			editRun(h, fast5, func(r *Run) {
				r.Indexes = append(r.Indexes, 3)
				r.Results[3] = ledger.Result{Run: fast5, Index: 3, OK: true}
			})
		}},
		{"results for a skipped record", VResults, func(h *History) {
			editRun(h, fast10, func(r *Run) { r.Indexes = []int{0} })
		}},
		{"the report counts disagree with the results", VReport, func(h *History) {
			editRun(h, fast15, func(r *Run) { rep := *r.Report; rep.Failed = 0; rep.Succeeded = 3; r.Report = &rep })
		}},
		{"a finished planned run without a report", VReport, func(h *History) { editRun(h, fast5, func(r *Run) { r.Report = nil }) }},
		{"aggregated twice", VAggregation, func(h *History) {
			h.Lines = append(h.Lines, line(at(8), "instance-4", 404, "run finished", map[string]any{"run": fast5}))
		}},
		{"no aggregation logged", VAggregation, func(h *History) {
			b := &history{h: *h}
			b.dropLine(func(l devhost.LogLine) bool { return l.Msg == "run finished" && l.Str("run") == fast5 })
			*h = b.h
		}},
		{"created twice", VDuplicate, func(h *History) {
			h.Lines = append(h.Lines, line(at(6), "instance-5", 505, "run created", map[string]any{"run": fast5}))
		}},
		{"a repeated key answered with another run", VDuplicate, func(h *History) { h.Manual[1].Run = "manual-other" }},
		{"two runs recorded for one key", VDuplicate, func(h *History) {
			b := &history{t: t, h: *h}
			b.run("manual-second", ledger.TriggerManual, time.Time{}, 3, 4, 1)
			*h = b.h
			editRun(h, "manual-second", func(r *Run) { r.Manifest.IdempotencyKey = "k1" })
			h.Manual = append(h.Manual, ManualCall{Status: 202, Run: "manual-second"})
		}},
		{"an accepted start whose run does not exist", VManual, func(h *History) {
			h.Manual = append(h.Manual, ManualCall{At: t0, Status: 202, Run: "manual-20261125t010000z-abcd1234"})
		}},
		{"a manual run nobody asked for", VUnexpected, func(h *History) {
			b := &history{t: t, h: *h}
			b.run("manual-stray", ledger.TriggerManual, time.Time{}, 3, 4, 1)
			*h = b.h
		}},
		{"two leaders of the scheduler lease at once", VLeadership, func(h *History) {
			h.Lines = append(h.Lines, line(at(5.1), "instance-4", 404, "leadership acquired",
				map[string]any{"epoch": float64(9), "holder": holder("instance-4", 404)}))
		}},
		{"two leaders of a run's lease at once", VLeadership, func(h *History) {
			editLines(h, func(l *devhost.LogLine) {
				if l.Msg == "leadership released" && l.Str("lease") == ledger.RunLeaseName(fast5) {
					l.Time = at(9) // planned until 9
				}
			})
			h.Lines = append(h.Lines, line(at(6), "instance-4", 404, "leadership acquired",
				map[string]any{"epoch": float64(2), "holder": holder("instance-4", 404), "lease": ledger.RunLeaseName(fast5)}))
			h.RunLeases[ledger.RunLeaseName(fast5)] = LeaseSample{Epoch: 2, Holder: holder("instance-4", 404)}
		}},
		{"scheduler epochs going back", VLeadership, func(h *History) {
			editLines(h, func(l *devhost.LogLine) { // epoch 2 becomes 5: the next acquisition, epoch 3, is then lower
				if l.Str("lease") == "" && l.Int("epoch") == 2 {
					l.Attrs = map[string]any{"epoch": float64(5), "holder": l.Str("holder")}
				}
			})
		}},
		{"the scheduler lease blob going back", VLeadership, func(h *History) {
			h.Lease = append(h.Lease, LeaseSample{At: at(16), Held: true, Epoch: 2, Holder: holder("instance-1", 101)})
		}},
		{"the scheduler lease blob naming a holder nobody logged", VLeadership, func(h *History) {
			h.Lease = append(h.Lease, LeaseSample{At: at(16), Held: true, Epoch: 7, Holder: holder("instance-5", 505)})
		}},
		{"a run's lease blob behind its log", VLeadership, func(h *History) {
			h.RunLeases[ledger.RunLeaseName(fast5)] = LeaseSample{Epoch: 0}
		}},
		{"a run's lease blob ahead of its log", VLeadership, func(h *History) {
			h.RunLeases[ledger.RunLeaseName(fast5)] = LeaseSample{Epoch: 4, Holder: holder("instance-4", 404)}
		}},
		{"a poison partition recorded as a success", VPoison, func(h *History) {
			editRun(h, manualID, func(r *Run) { r.Manifest.Params = json.RawMessage(`{"partitions":2,"failAlways":[1]}`) })
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := goodHistory(t)
			c.break_(&h)
			res := Check(h)
			if !hasKind(res.Violations, c.kind) {
				t.Errorf("no %s violation; got %v", c.kind, res.Violations)
			}
			t.Logf("found: %v", res.Violations)
		})
	}
}

// TestCheck_FaultsExplainDelays: a record decided late, a missed record and a pause edge a
// heartbeat crossed late are no violations when a fault held the scheduler up then.
func TestCheck_FaultsExplainDelays(t *testing.T) {
	fast15 := occID("fast", 15)
	h := goodHistory(t)
	r := h.Runs[fast15]
	r.Manifest.Created = at(27)
	h.Runs[fast15] = r
	h.Faults = []Fault{{At: at(14), Kind: FaultKillLeader, Instance: "instance-1", PID: 101}}
	if res := Check(h); len(res.Violations) != 0 {
		t.Errorf("decided 12 s late after the scheduler's holder was killed: violations %v", res.Violations)
	}
	h = goodHistory(t)
	h.Runs[fast15] = Run{Manifest: ledger.Manifest{RunID: fast15, Trigger: ledger.TriggerTimer, Schedule: "fast", Occurrence: at(15),
		State: ledger.StateMissed, Reason: "found late", Created: at(26), Finished: at(26)}}
	h.Faults = []Fault{{At: at(10), Kind: FaultAzurite, Until: at(18)}}
	if res := Check(h); len(res.Violations) != 0 {
		t.Errorf("missed while storage was down: violations %v", res.Violations)
	}
	// A heartbeat that read the pause, then stalled past the resume with storage down.
	h = goodHistory(t)
	r = h.Runs[occID("pausable", 10)]
	r.Manifest.Created = at(16)
	h.Runs[occID("pausable", 10)] = r
	h.Faults = []Fault{{At: at(10), Kind: FaultAzurite, Until: at(15)}}
	if res := Check(h); len(res.Violations) != 0 {
		t.Errorf("a paused decision held past the resume by an outage: violations %v", res.Violations)
	}
}

// TestCheck_KilledAggregatorMayNotLog: the aggregation line of a process the driver killed may
// never have been written; that alone is no violation.
func TestCheck_KilledAggregatorMayNotLog(t *testing.T) {
	b := &history{t: t, h: goodHistory(t)}
	fast5 := occID("fast", 5)
	b.dropLine(func(l devhost.LogLine) bool { return l.Msg == "run finished" && l.Str("run") == fast5 })
	b.h.Faults = []Fault{{At: at(30), Kind: FaultKillOther, Instance: "instance-3", PID: 303}}
	if res := Check(b.h); len(res.Violations) != 0 {
		t.Errorf("violations: %v", res.Violations)
	}
}

// TestCheck_RecordsAfterTheWindow: an occurrence after the window's end may or may not have a
// record yet; one that has is checked like the others.
func TestCheck_RecordsAfterTheWindow(t *testing.T) {
	h := goodHistory(t)
	h.WindowEnd = at(12)
	if res := Check(h); len(res.Violations) != 0 || res.Figures.Schedules["fast"].Occurrences != 2 {
		t.Errorf("violations %v, fast figures %+v", res.Violations, res.Figures.Schedules["fast"])
	}
	delete(h.Runs, occID("fast", 15))
	if res := Check(h); len(res.Violations) != 0 {
		t.Errorf("an occurrence after the window without a record: violations %v", res.Violations)
	}
}

// The documented bound is the coordinator's FinalBound: the hard deadline plus one check delay
// and one lease (a dead aggregator's report claim); without a hard deadline, FinalBound of the
// deadline.
func TestDocumentedBound(t *testing.T) {
	exp := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	m := ledger.Manifest{Expires: exp, Deadline: exp.Add(-time.Hour)}
	if got, want := DocumentedBound(m, 15*time.Second), exp.Add(35*time.Second); !got.Equal(want) {
		t.Errorf("DocumentedBound = %s, want %s", got, want)
	}
	if got, want := DocumentedBound(ledger.Manifest{Deadline: exp}, 15*time.Second), FinalBound(exp, 15*time.Second); !got.Equal(want) {
		t.Errorf("without Expires: %s, want %s", got, want)
	}
	// deadline + lease + 2 × (lease + 5 s) = deadline + 15 + 40 s.
	if got, want := FinalBound(exp, 15*time.Second), exp.Add(55*time.Second); !got.Equal(want) {
		t.Errorf("FinalBound = %s, want %s", got, want)
	}
}

// TestCheck_LeaseLostToAnAzuriteRestart: Azurite does not keep a lease across a restart, so a
// An epoch acquired twice because an Azurite restart lost the first acquisition's record: the
// dying Azurite answered the first acquisition (logged while the driver was restarting it)
// after its last save, so after the restart the lease blob shows the epoch before, and the
// next acquisition records the same epoch again. Counted, not a violation, when the first
// holder had stopped holding before the second acquired. Acquired outside the restart, or by a
// holder still holding, it is a violation.
func TestCheck_EpochLostToAnAzuriteRestart(t *testing.T) {
	reissue := func(firstAt float64, lossLine bool, faults ...Fault) History {
		h := goodHistory(t)
		a, b := holder("instance-4", 404), holder("instance-5", 505)
		h.Lines = append(h.Lines, line(at(firstAt), "instance-4", 404, "leadership acquired", map[string]any{"epoch": float64(4), "holder": a}))
		if lossLine {
			h.Lines = append(h.Lines, line(at(17), "instance-4", 404, "lease renewal failed: leadership lost", map[string]any{"epoch": float64(4), "holder": a}))
		}
		h.Lines = append(h.Lines,
			line(at(35), "instance-5", 505, "leadership acquired", map[string]any{"epoch": float64(4), "holder": b}),
			line(at(35.2), "instance-5", 505, "leadership released", map[string]any{"epoch": float64(4), "holder": b}))
		h.Lease = append(h.Lease, LeaseSample{At: at(35.05), Held: true, Epoch: 4, Holder: b})
		h.Faults = faults
		return h
	}
	restart := Fault{At: at(15.8), Until: at(16.3), Kind: FaultAzurite}
	if res := Check(reissue(16, true, restart)); hasKind(res.Violations, VLeadership) || res.Figures.EpochsLostToRestart != 1 {
		t.Errorf("epoch 4 reissued after a restart lost its record: violations %v, epochs lost %d; want none and 1", res.Violations, res.Figures.EpochsLostToRestart)
	}
	for name, h := range map[string]History{
		"no restart":                     reissue(16, true),
		"acquired before the restart":    reissue(15.5, true, restart),
		"the first holder still holding": reissue(16, false, restart),
	} {
		if res := Check(h); !hasKind(res.Violations, VLeadership) || res.Figures.EpochsLostToRestart != 0 {
			t.Errorf("%s: violations %v, epochs lost %d; want a leadership violation and 0", name, res.Violations, res.Figures.EpochsLostToRestart)
		}
	}
}

// killed holder's lease can be taken before it would have lapsed; with the holder dead and a
// restart in between that is counted, not a violation. Without the restart, or with the holder
// alive, it is two leaders.
func TestCheck_LeaseLostToAnAzuriteRestart(t *testing.T) {
	overlap := func(h *History) {
		// instance-4 takes epoch 9 half a second after epoch 3 (instance-1, at 15 s) was taken.
		h.Lines = append(h.Lines, line(at(15.5), "instance-4", 404, "leadership acquired",
			map[string]any{"epoch": float64(9), "holder": holder("instance-4", 404)}))
		b := &history{h: *h}
		b.dropLine(func(l devhost.LogLine) bool { // epoch 3's holder never released: it was killed
			return l.Msg == "leadership released" && l.Str("lease") == "" && l.Int("epoch") == 3
		})
		*h = b.h
	}
	kill := Fault{At: at(15.1), Kind: FaultKillLeader, Instance: "instance-1", PID: 101}
	restart := Fault{At: at(15.2), Kind: FaultAzurite, Until: at(15.4)}
	// holderSays is the overlapping history in which epoch 3's holder logged msg at sec.
	holderSays := func(sec float64, msg string, faults ...Fault) History {
		h := goodHistory(t)
		overlap(&h)
		h.Lines = append(h.Lines, line(at(sec), "instance-1", 101, msg,
			map[string]any{"epoch": float64(3), "holder": holder("instance-1", 101)}))
		h.Faults = faults
		return h
	}

	h := goodHistory(t)
	overlap(&h)
	h.Faults = []Fault{kill, restart}
	if res := Check(h); hasKind(res.Violations, VLeadership) || res.Figures.LeasesLostToRestart != 1 {
		t.Errorf("killed holder, Azurite restarted: violations %v, lost leases %d; want no leadership violation and 1", res.Violations, res.Figures.LeasesLostToRestart)
	}
	// A live holder that noticed the loss and stopped within a renew interval counts too.
	h = holderSays(17, "lease renewal failed: leadership lost", restart)
	if res := Check(h); hasKind(res.Violations, VLeadership) || res.Figures.LeasesLostToRestart != 1 {
		t.Errorf("live holder stopping in time: violations %v, lost leases %d", res.Violations, res.Figures.LeasesLostToRestart)
	}
	// A holder killed just after the next acquisition (its renewals refused while Azurite was
	// down, so it had not noticed yet) is gone within the renew interval too ...
	late := func(sec float64) History {
		h := goodHistory(t)
		overlap(&h)
		h.Faults = []Fault{{At: at(sec), Kind: FaultKillLeader, Instance: "instance-1", PID: 101}, restart}
		return h
	}
	if res := Check(late(15.53)); hasKind(res.Violations, VLeadership) || res.Figures.LeasesLostToRestart != 1 {
		t.Errorf("holder killed 30 ms after the next acquisition: violations %v, lost leases %d", res.Violations, res.Figures.LeasesLostToRestart)
	}
	// ... but one killed well after it led on alongside the next holder: two leaders.
	if res := Check(late(35)); !hasKind(res.Violations, VLeadership) {
		t.Errorf("holder killed 20 s after the next acquisition: violations %v, want two leaders", res.Violations)
	}
	// A live holder whose release Azurite did not answer (it was down): it stopped there.
	h = holderSays(15.3, "lease release failed: it will lapse", restart)
	if res := Check(h); hasKind(res.Violations, VLeadership) || res.Figures.LeasesLostToRestart != 1 {
		t.Errorf("release failed during the outage: violations %v, lost leases %d", res.Violations, res.Figures.LeasesLostToRestart)
	}
	// A live holder SIGSTOPped right after the restart, before its next renewal could show the
	// loss, that noticed it on waking up.
	pause := Fault{At: at(15.6), Kind: FaultPause, Instance: "instance-1", PID: 101, Until: at(24.5)}
	h = holderSays(25, "lease renewal failed: leadership lost", restart, pause)
	if res := Check(h); hasKind(res.Violations, VLeadership) || res.Figures.LeasesLostToRestart != 1 {
		t.Errorf("paused after the restart: violations %v, lost leases %d", res.Violations, res.Figures.LeasesLostToRestart)
	}
	// ... but one that went on for a while after its SIGCONT is two leaders.
	h = holderSays(35, "lease renewal failed: leadership lost", restart, pause)
	if res := Check(h); !hasKind(res.Violations, VLeadership) {
		t.Errorf("paused, then leading on for 10 s: violations %v, want two leaders", res.Violations)
	}
	// The holder's acquisition logged just after Azurite went down (a line trails its call):
	// the lease was taken before the outage and lost with it.
	h = goodHistory(t)
	overlap(&h)
	h.Faults = []Fault{kill, {At: at(14.9), Kind: FaultAzurite, Until: at(15.4)}}
	if res := Check(h); hasKind(res.Violations, VLeadership) || res.Figures.LeasesLostToRestart != 1 {
		t.Errorf("acquisition logged during the outage: violations %v, lost leases %d", res.Violations, res.Figures.LeasesLostToRestart)
	}
	earlier := Fault{At: at(13.5), Kind: FaultAzurite, Until: at(14.5)} // over before epoch 3 was taken
	for name, faults := range map[string][]Fault{"no restart": {kill}, "holder alive": {restart}, "restart before the acquisition": {kill, earlier}} {
		h := goodHistory(t)
		overlap(&h)
		h.Faults = faults
		if res := Check(h); !hasKind(res.Violations, VLeadership) {
			t.Errorf("%s: violations %v, want two leaders reported", name, res.Violations)
		}
	}
}

// A holder killed right after its Release reached storage never logs "leadership released",
// but the next acquisition read the release mark it wrote: its tenure ended there, and a
// contender acquiring at once is a handover, not two leaders. Without that record, or with one
// naming another holder or another epoch, it is two leaders.
func TestCheck_ReleaseFoundByTheNextAcquisition(t *testing.T) {
	first := holder("instance-1", 101)
	withNext := func(epoch int64, attrs map[string]any) History {
		b := &history{t: t, h: goodHistory(t)}
		b.dropLine(func(l devhost.LogLine) bool {
			return l.Msg == "leadership released" && l.Str("lease") == "" && l.Int("epoch") == 3
		})
		attrs["epoch"], attrs["holder"] = float64(epoch), holder("instance-4", 404)
		b.h.Lines = append(b.h.Lines, line(at(15.5), "instance-4", 404, "leadership acquired", attrs))
		b.h.Faults = append(b.h.Faults, Fault{At: at(15.1), Kind: FaultKillLeader, Instance: "instance-1", PID: 101})
		return b.h
	}
	released := at(15.05).Format(time.RFC3339Nano)
	h := withNext(4, map[string]any{"previousHolder": first, "previousReleasedAt": released})
	if res := Check(h); hasKind(res.Violations, VLeadership) {
		t.Errorf("release found by the next acquisition: violations %v, want none", res.Violations)
	}
	for name, h := range map[string]History{
		"no release recorded":          withNext(4, map[string]any{"previousHolder": first}),
		"another holder's release":     withNext(4, map[string]any{"previousHolder": holder("instance-2", 202), "previousReleasedAt": released}),
		"the release of another epoch": withNext(9, map[string]any{"previousHolder": first, "previousReleasedAt": released}),
	} {
		if res := Check(h); !hasKind(res.Violations, VLeadership) {
			t.Errorf("%s: violations %v, want two leaders", name, res.Violations)
		}
	}
}

// A holder SIGSTOPped between taking the lease and logging it logs the acquisition late; its
// "deadline passed" line names the last renewal, which bounds its tenure.
func TestTenures_LastRenewalBoundsALateLoggedAcquisition(t *testing.T) {
	h := holder("instance-2", 202)
	lines := []devhost.LogLine{
		line(at(16), "instance-2", 202, "leadership acquired", map[string]any{"epoch": float64(2), "holder": h}),
		line(at(16.001), "instance-2", 202, "leadership lost: local deadline passed without a renewal",
			map[string]any{"epoch": float64(2), "holder": h, "lastRenewal": at(1).Format(time.RFC3339Nano)}),
	}
	ts, _ := Tenures(lines)
	if len(ts) != 1 || !ts[0].LastConfirm.Equal(at(1)) || !ts[0].ValidUntil(testLease).Equal(at(1).Add(testLease)) {
		t.Fatalf("tenures %+v: want the last confirmation at the named renewal (%s)", ts, at(1))
	}
}

func TestTenures_PerLease(t *testing.T) {
	h := holder("instance-1", 101)
	lines := []devhost.LogLine{
		line(at(1), "instance-1", 101, "leadership acquired", map[string]any{"epoch": float64(1), "holder": h}),
		line(at(1), "instance-1", 101, "leadership acquired", map[string]any{"epoch": float64(1), "holder": h, "lease": "runs/a"}),
		line(at(2), "instance-1", 101, "lease renewed", map[string]any{"epoch": float64(1), "holder": h, "lease": "runs/a"}),
		line(at(3), "instance-1", 101, "leadership released", map[string]any{"epoch": float64(1), "holder": h}),
	}
	ts, dup := Tenures(lines)
	if len(ts) != 2 || len(dup) != 0 {
		t.Fatalf("tenures %+v, dup %v: want one per lease", ts, dup)
	}
	g := ByLease(ts)
	if s, r := g[""][0], g["runs/a"][0]; !s.Released.Equal(at(3)) || !s.LastConfirm.Equal(at(1)) || !r.LastConfirm.Equal(at(2)) || !r.Released.IsZero() {
		t.Errorf("scheduler %+v, run %+v", s, r)
	}
	if _, dup := Tenures(append(lines, lines[1])); len(dup) != 1 {
		t.Errorf("an epoch of one lease acquired twice: dup %v", dup)
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

// A process the driver killed may take the scheduler lease and die before it logs the
// acquisition: the sampled blob then names an epoch nobody logged, held by that dead process.
// That is not a violation; the same sample naming a process nobody killed is.
func TestCheck_SchedulerEpochOfAKilledProcess(t *testing.T) {
	h := goodHistory(t)
	h.Lease = append(h.Lease, LeaseSample{At: at(16), Held: true, Epoch: 7, Holder: holder("instance-5", 505)})
	h.Faults = append(h.Faults, Fault{At: at(16.01), Kind: FaultKillOther, Instance: "instance-5", PID: 505})
	if res := Check(h); hasKind(res.Violations, VLeadership) {
		t.Errorf("epoch of a killed process: violations %v, want no leadership violation", res.Violations)
	}
}

// A lock whose holder record's answer was lost gives the lease back and logs the acquisition
// abandoned: the sampled blob (the scheduler's, or a run's at the end) may then name that epoch
// and holder although nobody logged acquiring it. That is not a violation; the same sample
// without the line is (TestCheck_DetectsEachViolation), and so is one naming another holder.
func TestCheck_AbandonedAcquisition(t *testing.T) {
	fast5 := occID("fast", 5)
	abandon := func(h *History, lease string, epoch int, who string, pid int) {
		h.Lines = append(h.Lines, line(at(15.9), who, pid, "lease acquisition abandoned: the holder record was not confirmed; the lease is given back",
			map[string]any{"lease": lease, "epoch": float64(epoch), "holder": holder(who, pid), "err": "context deadline exceeded"}))
	}
	h := goodHistory(t)
	h.Lease = append(h.Lease, LeaseSample{At: at(16), Held: true, Epoch: 7, Holder: holder("instance-5", 505)})
	abandon(&h, "lease-c2edf619/baton-leader", 7, "instance-5", 505)
	h.RunLeases[ledger.RunLeaseName(fast5)] = LeaseSample{Held: true, Epoch: 4, Holder: holder("instance-4", 404)}
	abandon(&h, "lease-c2edf619/"+ledger.RunLeaseName(fast5), 4, "instance-4", 404)
	if res := Check(h); hasKind(res.Violations, VLeadership) {
		t.Errorf("abandoned acquisitions: violations %v, want no leadership violation", res.Violations)
	}
	h = goodHistory(t)
	h.Lease = append(h.Lease, LeaseSample{At: at(16), Held: true, Epoch: 7, Holder: holder("instance-5", 505)})
	abandon(&h, "lease-c2edf619/baton-leader", 7, "instance-4", 404)
	if res := Check(h); !hasKind(res.Violations, VLeadership) {
		t.Errorf("epoch 7 abandoned by instance-4 but held by instance-5: no leadership violation")
	}
}

// A run created queued whose create took effect with its answer lost has no "run created"
// line; the heartbeat that starts it says it was queued, and its start is its first planner's.
// Without any line saying so, it counts as started when it was created: before the run it
// waited for ended.
func TestCheck_QueuedRunWhoseCreateAnswerWasLost(t *testing.T) {
	held10 := occID("held", 10)
	lost := func(h *History) {
		b := &history{t: t, h: *h}
		b.dropLine(func(l devhost.LogLine) bool { return l.Msg == "run created" && l.Str("run") == held10 })
		*h = b.h
	}
	h := goodHistory(t)
	lost(&h)
	h.Lines = append(h.Lines, line(at(12.4), "instance-2", 202, "queued run started: the run it waited for has ended",
		map[string]any{"run": held10, "epoch": float64(0), "schedule": "held"}))
	if res := Check(h); hasKind(res.Violations, VPolicy) || res.Figures.Schedules["held"].Queued != 1 {
		t.Errorf("queued run started by a heartbeat: violations %v, queued %d; want none and 1", res.Violations, res.Figures.Schedules["held"].Queued)
	}
	h = goodHistory(t)
	lost(&h)
	if res := Check(h); !hasKind(res.Violations, VPolicy) {
		t.Errorf("no line says the run was queued: violations %v, want the policy's", res.Violations)
	}
}

// A heartbeat slowed by a loaded machine (its storage calls, not a fault) may decide an
// occurrence several seconds after its period; that is no delay. Only past DecisionMargin is
// it one (TestCheck_DetectsEachViolation).
func TestCheck_SlowHeartbeatIsNotADelay(t *testing.T) {
	h := goodHistory(t)
	fast15 := occID("fast", 15)
	r := h.Runs[fast15]
	r.Manifest.Created = at(25) // 10 s after the occurrence
	h.Runs[fast15] = r
	if res := Check(h); hasKind(res.Violations, VDelay) {
		t.Errorf("a decision 10 s late without a fault: violations %v, want no delay", res.Violations)
	}
	// Missed after a catch-up window of 8 s, by a heartbeat 10 s late: late, not stopped.
	h.Runs[fast15] = Run{Manifest: ledger.Manifest{RunID: fast15, Trigger: ledger.TriggerTimer, Schedule: "fast", Occurrence: at(15),
		State: ledger.StateMissed, Reason: "found late", Created: at(25), Finished: at(25)}}
	if res := Check(h); hasKind(res.Violations, VDelay) {
		t.Errorf("missed 10 s late without a fault: violations %v, want no delay", res.Violations)
	}
}

// A heartbeat that storage failed — a Tick invocation that ran out of time waiting for storage
// (504), or got a transient storage failure — is a fault the driver did not inject: storage
// shared with other tests, or a loaded machine, stalls on its own. An occurrence decided late
// across such a stall is explained by it and counted as a storage-stall, unless an injected
// fault's span holds the stall (the fault's doing: not counted); a heartbeat that failed for
// another reason explains nothing.
func TestCheck_StorageStallExplainsALateDecision(t *testing.T) {
	fast15 := occID("fast", 15)
	late := func(failure devhost.LogLine) History {
		h := goodHistory(t)
		r := h.Runs[fast15]
		r.Manifest.Created = at(40) // 25 s after the occurrence: past the heartbeat and DecisionMargin
		h.Runs[fast15] = r
		h.Lines = append(h.Lines, failure)
		return h
	}
	failed := func(status int, err string) devhost.LogLine {
		l := line(at(16), "instance-2", 202, "invocation failed", map[string]any{"function": "Tick", "status": float64(status),
			"ms": float64(900), "err": err})
		l.Level = "ERROR"
		return l
	}
	timedOut := failed(504, "acquire lease leases/baton-leader: read record: context deadline exceeded")
	for _, tc := range []struct {
		name      string
		failure   devhost.LogLine
		injected  []Fault
		explained bool
		stalls    int // counted: the stalls no injected fault explains
	}{
		{"timed out", timedOut, nil, true, 1},
		{"transient storage failure", failed(500, "acquire lease leases/baton-leader: read record: gave up after 2 attempts within the budget: transient storage failure: context deadline exceeded"), nil, true, 1},
		{"storage unavailable", failed(500, "heartbeat: read schedule fast: storage unavailable: 503 ServerBusy"), nil, true, 1},
		{"another failure", failed(500, "heartbeat: schedule fast: bad cron"), nil, false, 0},
		{"during an injected restart", timedOut, []Fault{{At: at(14), Until: at(17), Kind: FaultAzurite}}, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := late(tc.failure)
			h.Faults = tc.injected
			res := Check(h)
			if got := hasKind(res.Violations, VDelay); got == tc.explained {
				t.Errorf("decided 25 s late across a heartbeat that failed (%s): delay reported %v, want %v; violations %v",
					tc.failure.Str("err"), got, !tc.explained, res.Violations)
			}
			if res.Figures.Faults[FaultStall] != tc.stalls {
				t.Errorf("storage stalls counted %d, want %d", res.Figures.Faults[FaultStall], tc.stalls)
			}
		})
	}
}

// TestCheck_FaultBacklogExplainsTheNextPass: after an outage the first heartbeat pass decides
// the backlog late, and can take tens of seconds on a loaded machine; an occurrence that came
// due while it ran is decided late by the next pass, and the outage explains it. An occurrence
// that came due during a pass that was not behind is still a delay.
func TestCheck_FaultBacklogExplainsTheNextPass(t *testing.T) {
	build := func(behind bool) History {
		b := &history{t: t, h: goodHistory(t)}
		b.h.Faults = []Fault{{At: at(2), Kind: FaultAzurite, Until: at(3)}} // explains up to 3 + lease + heartbeat = 19
		h := holder("instance-1", 101)
		if behind {
			// Epoch 3's pass, from 15, works through the backlog until 35 and decides fast@15
			// 18 s late (the outage explains that one directly).
			b.dropLine(func(l devhost.LogLine) bool {
				return l.Msg == "leadership released" && l.Int("epoch") == 3 && l.Str("lease") == ""
			})
			b.h.Lines = append(b.h.Lines, line(at(35), "instance-1", 101, "leadership released", map[string]any{"epoch": float64(3), "holder": h}))
			r := b.h.Runs[occID("fast", 15)]
			r.Manifest.Created = at(33)
			b.h.Runs[occID("fast", 15)] = r
		}
		// many@20 came due during epoch 3's pass (or after it, when that pass was short) and
		// is decided by epoch 4's pass, 26 s late.
		b.h.Lines = append(b.h.Lines,
			line(at(36), "instance-1", 101, "leadership acquired", map[string]any{"epoch": float64(4), "holder": h}),
			line(at(47), "instance-1", 101, "leadership released", map[string]any{"epoch": float64(4), "holder": h}))
		b.h.Lease = append(b.h.Lease, LeaseSample{At: at(36.05), Held: true, Epoch: 4, Holder: h})
		b.run(occID("many", 20), ledger.TriggerTimer, at(20), 46, 50, 2)
		return b.h
	}
	delays := func(res Result) []Violation {
		var out []Violation
		for _, v := range res.Violations {
			if v.Kind == VDelay {
				out = append(out, v)
			}
		}
		return out
	}
	if got := delays(Check(build(true))); len(got) != 0 {
		t.Errorf("decided late behind the outage's backlog: delay violations %v, want none", got)
	}
	got := delays(Check(build(false)))
	if len(got) != 1 || got[0].Subject != occID("many", 20) {
		t.Errorf("decided 26 s late, due after the outage's effect and with the passes caught up: delay violations %v, want one for %s", got, occID("many", 20))
	}
}

// A partition listed twice — in its span's block and on its own — is a violation that says so.
func TestCheck_PartitionRecordedTwice(t *testing.T) {
	fast5 := occID("fast", 5)
	h := goodHistory(t)
	r := h.Runs[fast5]
	r.Indexes = append(r.Indexes[:2:2], append([]int{1}, r.Indexes[2:]...)...)
	h.Runs[fast5] = r
	res := Check(h)
	found := false
	for _, v := range res.Violations {
		found = found || v.Kind == VResults && strings.Contains(v.Why, "partition 1 has more than one recorded outcome")
	}
	if !found {
		t.Errorf("no violation naming partition 1 recorded twice; got %v", res.Violations)
	}
}

// stoppedHistory is goodHistory with its manual run cancelled at 7.5 s: partition 0 recorded
// (started at 7.2 s), partition 1 never run, the run finished cancelled at 9 s.
func stoppedHistory(t *testing.T) (History, string) {
	h := goodHistory(t)
	id := ledger.ManualRunID("k1", time.Time{})
	r := h.Runs[id]
	r.Manifest.Stop = &ledger.Stop{State: ledger.StateCancelled, By: "a function key holder", At: at(7.5)}
	r.Manifest.State, r.Manifest.Reason, r.Manifest.Succeeded = ledger.StateCancelled, "cancelled by a function key holder", 1
	r.Indexes = []int{0}
	r.Results = map[int]ledger.Result{0: {Run: id, Index: 0, OK: true, Started: at(7.2)}}
	r.Report.State, r.Report.Succeeded, r.Report.Cancelled = ledger.StateCancelled, 1, 1
	h.Runs[id] = r
	h.Cancels = []Cancel{{At: at(7.5), Run: id, Status: 202}}
	return h, id
}

// A cancelled run that keeps the stop's rules has no violation; each rule broken is named.
func TestCheck_StoppedRun(t *testing.T) {
	h, _ := stoppedHistory(t)
	if res := Check(h); len(res.Violations) != 0 || res.Figures.Stopped != 1 || res.Figures.CancelByCode[202] != 1 {
		t.Fatalf("a good stopped run: violations %v, figures stopped %d cancels %v", res.Violations, res.Figures.Stopped, res.Figures.CancelByCode)
	}
	for _, c := range []struct {
		name   string
		kind   string
		break_ func(h *History, id string)
	}{
		{"a partition started past the bound", VStop, func(h *History, id string) {
			r := h.Runs[id]
			r.Indexes = []int{0, 1}
			r.Results[1] = ledger.Result{Run: id, Index: 1, OK: true, Started: at(7.5).Add(testLease + LogTolerance + time.Second)}
			r.Report.Succeeded, r.Report.Cancelled = 2, 0
			r.Manifest.Succeeded = 2
			h.Runs[id] = r
		}},
		{"a partition recorded twice", VStop, func(h *History, id string) {
			r := h.Runs[id]
			r.Indexes = []int{0, 0}
			h.Runs[id] = r
		}},
		{"ended in its own state with partitions left", VStop, func(h *History, id string) {
			r := h.Runs[id]
			r.Manifest.State, r.Report.State = ledger.StateSucceeded, ledger.StateSucceeded
			h.Runs[id] = r
		}},
		{"a report that does not count the cancelled", VReport, func(h *History, id string) {
			r := h.Runs[id]
			r.Report.Cancelled = 0
			h.Runs[id] = r
		}},
		{"planning ended past the grace", VStop, func(h *History, id string) {
			h.Lines = append(h.Lines, line(at(7.5).Add(stopGrace(testLease)+LogTolerance+time.Second), "instance-2", 202, "run enqueued",
				map[string]any{"run": id}))
		}},
		{"a 202 cancel of a run without a stop", VStop, func(h *History, id string) {
			h.Cancels = append(h.Cancels, Cancel{At: at(8), Run: occID("fast", 5), Status: 202})
		}},
		{"finished past the stop's bound", VNotFinal, func(h *History, id string) {
			r := h.Runs[id]
			r.Manifest.Finished = stoppedBound(r.Manifest, testLease).Add(h.Heartbeat + DefaultSlack + time.Second)
			h.Runs[id] = r
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, id := stoppedHistory(t)
			c.break_(&h, id)
			if res := Check(h); !hasKind(res.Violations, c.kind) {
				t.Errorf("want a %s violation; got %v", c.kind, res.Violations)
			}
		})
	}
}

// redrivenHistory is goodHistory with fast15 (partial: partition 1 failed) redriven at 20 s:
// round 1 ran partition 1 again and it succeeded; the run ended succeeded at 22 s.
func redrivenHistory(t *testing.T) (History, string) {
	h := goodHistory(t)
	id := occID("fast", 15)
	r := h.Runs[id]
	r.Manifest.Redrives = []ledger.Redrive{{Round: 1, Key: "k-r", By: "soak", At: at(20), Indexes: []int{1}, From: ledger.StatePartial}}
	r.Manifest.Round, r.Manifest.State, r.Manifest.Reason = 1, ledger.StateSucceeded, ""
	r.Manifest.Succeeded, r.Manifest.Failed, r.Manifest.Finished = 3, 0, at(22)
	key := ledger.RoundRun(id, 1)
	r.Rounds = []Round{{Round: 1, Indexes: []int{1}, Results: map[int]ledger.Result{1: {Run: key, Index: 1, OK: true}},
		Report: &ledger.Report{Run: key, State: ledger.StateSucceeded, Partitions: 3, Succeeded: 3,
			Aggregator: ledger.Holder{Instance: "instance-3", PID: 303}}}}
	h.Runs[id] = r
	h.Lines = append(h.Lines, line(at(22), "instance-3", 303, "run finished", map[string]any{"run": key}))
	h.Redrives = []RedriveCall{{At: at(20), Run: id, Key: "k-r", Status: 202, Round: 1}}
	return h, id
}

// A redriven run that keeps the rules of redrive has no violation; each rule broken is named.
func TestCheck_RedrivenRun(t *testing.T) {
	h, _ := redrivenHistory(t)
	if res := Check(h); len(res.Violations) != 0 || res.Figures.Redriven != 1 || res.Figures.RedriveByCode[202] != 1 {
		t.Fatalf("a good redriven run: violations %v, figures redriven %d redrives %v", res.Violations, res.Figures.Redriven, res.Figures.RedriveByCode)
	}
	for _, c := range []struct {
		name   string
		kind   string
		break_ func(h *History, id string)
	}{
		{"a round ran a partition it does not name", VRedrive, func(h *History, id string) {
			r := h.Runs[id]
			r.Rounds[0].Indexes = append(r.Rounds[0].Indexes, 0)
			r.Rounds[0].Results[0] = ledger.Result{Index: 0, OK: true}
			h.Runs[id] = r
		}},
		{"a partition recorded twice in the round", VRedrive, func(h *History, id string) {
			r := h.Runs[id]
			r.Rounds[0].Indexes = []int{1, 1}
			h.Runs[id] = r
		}},
		{"a final round missing a result", VRedrive, func(h *History, id string) {
			r := h.Runs[id]
			r.Rounds[0].Indexes, r.Rounds[0].Results = nil, map[int]ledger.Result{}
			h.Runs[id] = r
		}},
		{"a round's report not counting the latest outcomes", VReport, func(h *History, id string) {
			r := h.Runs[id]
			r.Rounds[0].Report.Succeeded, r.Rounds[0].Report.Failed = 2, 1
			h.Runs[id] = r
		}},
		{"a round aggregated twice", VAggregation, func(h *History, id string) {
			h.Lines = append(h.Lines, line(at(23), "instance-2", 202, "run finished", map[string]any{"run": ledger.RoundRun(id, 1)}))
		}},
		{"a 2xx redrive naming a round the run lacks", VRedrive, func(h *History, id string) {
			h.Redrives = append(h.Redrives, RedriveCall{At: at(24), Run: id, Key: "k-other", Status: 202, Round: 2})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, id := redrivenHistory(t)
			c.break_(&h, id)
			if res := Check(h); !hasKind(res.Violations, c.kind) {
				t.Errorf("want a %s violation; got %v", c.kind, res.Violations)
			}
		})
	}
}

// A run redriven after the run queued behind it started was final before that start: the
// policy looks at when it was first final (its first report's claim), not at its latest
// round's finish; a run whose first report was claimed after the next one started still
// breaks the policy.
func TestCheck_ARunRedrivenAfterTheNextStartedKeptThePolicy(t *testing.T) {
	held5 := occID("held", 5)
	redriven := func(claimed float64) History {
		h := goodHistory(t)
		r := h.Runs[held5]
		r.Manifest.Round, r.Manifest.Finished = 1, at(20)
		r.Manifest.Redrives = []ledger.Redrive{{Round: 1, At: at(19), From: ledger.StateSucceeded}}
		r.Report.Created = at(claimed)
		h.Runs[held5] = r
		return h
	}
	if res := Check(redriven(12)); hasKind(res.Violations, VPolicy) {
		t.Errorf("redriven after the next run started: %v, want no policy violation", res.Violations)
	}
	if res := Check(redriven(13)); !hasKind(res.Violations, VPolicy) {
		t.Errorf("first final after the next run started: %v, want a policy violation", res.Violations)
	}
}
