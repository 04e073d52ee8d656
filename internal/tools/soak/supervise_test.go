package soak

import (
	"testing"
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/tools/devhost"
)

// The bounds of supervision (supervise.go), each with histories that keep it and histories that
// break it. The runs are ad-hoc runs laid out by hand in goodHistory, with a heartbeat pass every
// second from 16 s to 199 s; the check delay is 20 s (lease 15 s + CheckMargin), the next
// heartbeat's bound a heartbeat and SuperviseMargin (21 s) after that pass began.

// supervisedHistory is goodHistory with heartbeats every second from 16 s on and the end at 200 s.
func supervisedHistory(t *testing.T) *history {
	b := &history{t: t, h: goodHistory(t)}
	b.h.End = at(200)
	for sec := 16; sec < 200; sec++ {
		b.heartbeat(float64(sec), int64(sec-12))
	}
	return b
}

// adhoc adds an ad-hoc run of two partitions asked for with key at created, planning ended at
// enqueued (negative: never, the run still planning at the end) and final at finished; its
// planners are added with tenure.
func (b *history) adhoc(key string, created, enqueued, finished float64) string {
	id := ledger.ManualRunID(key, time.Time{})
	b.run(id, ledger.TriggerManual, time.Time{}, created, finished, 2)
	b.dropLine(func(l devhost.LogLine) bool {
		return l.Str("lease") == ledger.RunLeaseName(id) || l.Str("run") == id && l.Msg == "planning the run"
	})
	delete(b.h.RunLeases, ledger.RunLeaseName(id))
	r := b.h.Runs[id]
	r.Manifest.IdempotencyKey = key
	r.Manifest.Enqueued = at(enqueued)
	r.Manifest.Deadline = at(enqueued + 60)
	r.Manifest.Expires = at(enqueued + 60 + 3*30 + 20)
	if enqueued < 0 {
		r = Run{Manifest: r.Manifest, Results: map[int]ledger.Result{}}
		r.Manifest.State, r.Manifest.PlanDone, r.Manifest.Partitions = ledger.StatePlanning, false, 0
		r.Manifest.Epoch, r.Manifest.Segments = 0, []ledger.Segment{{Epoch: 0, From: 0}}
		r.Manifest.Enqueued, r.Manifest.Finished, r.Manifest.Succeeded = time.Time{}, time.Time{}, 0
		r.Manifest.Deadline, r.Manifest.Expires = at(created+60), at(created+60)
		b.dropLine(func(l devhost.LogLine) bool { return l.Str("run") == id && l.Msg == "run finished" })
	}
	b.h.Runs[id] = r
	b.h.Manual = append(b.h.Manual, ManualCall{At: at(created), Key: key, Body: `{"job":"synthetic"}`, Status: 202, Run: id})
	return id
}

// tenure logs a leadership of run id's lease by inst/pid from acquired to released (negative:
// never released), renewed every 5 s until renewedUntil.
func (b *history) tenure(id string, epoch int64, inst string, pid int, acquired, released, renewedUntil float64) {
	lease, h := ledger.RunLeaseName(id), holder(inst, pid)
	msg := "planning the run"
	if epoch > 1 {
		msg = "check: resuming a run its leader left mid-enqueue"
	}
	b.h.Lines = append(b.h.Lines,
		line(at(acquired), inst, pid, "leadership acquired", map[string]any{"epoch": float64(epoch), "holder": h, "lease": lease}),
		line(at(acquired), inst, pid, msg, map[string]any{"run": id, "epoch": float64(epoch)}))
	for s := acquired + 5; s <= renewedUntil; s += 5 {
		b.h.Lines = append(b.h.Lines, line(at(s), inst, pid, "lease renewed", map[string]any{"epoch": float64(epoch), "holder": h, "lease": lease}))
	}
	if released >= 0 {
		b.h.Lines = append(b.h.Lines, line(at(released), inst, pid, "leadership released", map[string]any{"epoch": float64(epoch), "holder": h, "lease": lease}))
	}
	if cur := b.h.RunLeases[lease]; epoch > cur.Epoch {
		b.h.RunLeases[lease] = LeaseSample{At: b.h.End, Epoch: epoch, Holder: h}
	}
}

// violations returns res's violations of kind.
func violations(res Result, kind string) []Violation {
	var out []Violation
	for _, v := range res.Violations {
		if v.Kind == kind {
			out = append(out, v)
		}
	}
	return out
}

// expect checks that h has exactly want violations of kind, and no other violation but those
// of also.
func expect(t *testing.T, h History, kind string, want int, also ...string) Result {
	t.Helper()
	res := Check(h)
	if got := violations(res, kind); len(got) != want {
		t.Errorf("%d %s violations, want %d: %v", len(got), kind, want, got)
	}
	allowed := map[string]bool{kind: true}
	for _, k := range also {
		allowed[k] = true
	}
	for _, v := range res.Violations {
		if !allowed[v.Kind] {
			t.Errorf("unexpected violation: %v", v)
		}
	}
	return res
}

// (a) A run no planner took within a check delay of its start is planned by the next heartbeat.
func TestCheck_SupervisionPlansAnUnstartedRun(t *testing.T) {
	build := func(planned float64, edit func(b *history)) History {
		b := supervisedHistory(t)
		id := b.adhoc("sup", 20, planned+0.1, planned+1)
		b.tenure(id, 1, "instance-2", 202, planned, planned+0.2, 0)
		if edit != nil {
			edit(b)
		}
		return b.h
	}
	// Started by its start check; or the check was lost, and the heartbeat at 40 s (20 s after
	// the start) planned it 1.5 s later.
	for _, planned := range []float64{20.1, 41.5} {
		if res := expect(t, build(planned, nil), VUnplanned, 0); res.Figures.StartsChecked < 10 {
			t.Errorf("planned at %v: %d first planners checked, want every run's", planned, res.Figures.StartsChecked)
		}
	}
	// Past the next heartbeat's bound (40 + 21 s).
	res := expect(t, build(70, nil), VUnplanned, 1)
	t.Logf("found: %v", res.Violations)
	// No planner at all, the run still planning at the end.
	b := supervisedHistory(t)
	b.adhoc("sup", 20, -1, -1)
	expect(t, b.h, VUnplanned, 1, VNotFinal)
	// Storage down from 38 s to 50 s: the first pass it did not cut short began at 51 s, so the
	// bound is 72 s. Without heartbeats after the bound, none applies.
	outage := func(b *history) {
		b.h.Faults = append(b.h.Faults, Fault{At: at(38), Until: at(50), Kind: FaultAzurite})
	}
	expect(t, build(70, outage), VUnplanned, 0)
	expect(t, build(75, outage), VUnplanned, 1)
	noHeartbeats := func(b *history) {
		b.dropLine(func(l devhost.LogLine) bool {
			return l.Str("lease") == "" && l.Time.After(at(30)) && (l.Msg == "leadership acquired" || l.Msg == "leadership released")
		})
		var samples []LeaseSample
		for _, s := range b.h.Lease {
			if !s.At.After(at(30)) {
				samples = append(samples, s)
			}
		}
		b.h.Lease = samples
	}
	expect(t, build(70, noHeartbeats), VUnplanned, 0)
}

// (a) for a run that waited queued: the heartbeat after its turn starts it.
func TestCheck_SupervisionStartsAQueuedRun(t *testing.T) {
	held10 := occID("held", 10) // queued behind held@5, final at 12 s; planned at 12.5 s
	build := func(promoted float64) History {
		b := supervisedHistory(t)
		b.h.Lines = append(b.h.Lines, line(at(promoted), "instance-1", 101, "queued run started: the run it waited for has ended",
			map[string]any{"run": held10, "epoch": float64(0), "schedule": "held"}))
		return b.h
	}
	expect(t, build(12.4), VUnplanned, 0)
	// Started 40 s after its turn, with heartbeats every second from 16 s.
	expect(t, build(52), VUnplanned, 1)
}

// (b) A planner that died, or whose slice's follow-up check was lost, is replaced within its
// lease and CheckMargin and the next heartbeat.
func TestCheck_SupervisionReplacesADeadPlanner(t *testing.T) {
	// A run created at 20 s whose first planner (instance-2) took it at 20.1 s and was killed at
	// 22 s; the next (instance-3) took it over at next and finished planning.
	killed := func(next float64) History {
		b := supervisedHistory(t)
		id := b.adhoc("sup", 20, next+0.3, next+1)
		b.tenure(id, 1, "instance-2", 202, 20.1, -1, 0)
		b.h.Faults = append(b.h.Faults, Fault{At: at(22), Kind: FaultKillLeader, Instance: "instance-2", PID: 202})
		if next > 0 {
			b.tenure(id, 2, "instance-3", 303, next, next+0.5, 0)
		}
		return b.h
	}
	// By its lease probe, when the lease lapsed; by the heartbeat 20 s after the kill.
	for _, next := range []float64{35.2, 43} {
		if res := expect(t, killed(next), VNoTakeover, 0); res.Figures.TakeoversChecked != 1 {
			t.Errorf("replaced at %v: %d replacements checked, want 1", next, res.Figures.TakeoversChecked)
		}
	}
	res := expect(t, killed(70), VNoTakeover, 1)
	t.Logf("found: %v", res.Violations)
	// Never replaced: still planning at the end.
	b := supervisedHistory(t)
	id := b.adhoc("sup", 20, -1, -1)
	b.tenure(id, 1, "instance-2", 202, 20.1, -1, 0)
	b.h.Faults = append(b.h.Faults, Fault{At: at(22), Kind: FaultKillLeader, Instance: "instance-2", PID: 202})
	expect(t, b.h, VNoTakeover, 1, VNotFinal)

	// A slice that ended at 21 s, planning left, its follow-up check lost: the heartbeat takes
	// it over once the manifest has not moved for a check delay.
	slice := func(next float64) History {
		b := supervisedHistory(t)
		id := b.adhoc("sup", 20, next+0.3, next+1)
		b.tenure(id, 1, "instance-2", 202, 20.1, 21, 0)
		b.tenure(id, 2, "instance-1", 101, next, next+0.5, 0)
		return b.h
	}
	expect(t, slice(42), VNoTakeover, 0)
	expect(t, slice(70), VNoTakeover, 1)

	// A planner killed after planning ended needs no successor.
	b = supervisedHistory(t)
	id = b.adhoc("sup", 20, 21, 23)
	b.tenure(id, 1, "instance-2", 202, 20.1, -1, 0)
	b.h.Faults = append(b.h.Faults, Fault{At: at(22), Kind: FaultCheckCrash, Instance: "instance-2", PID: 202})
	expect(t, b.h, VNoTakeover, 0)
}

// (c) A planned run still missing partitions when a round comes due is re-enqueued by the next
// heartbeat, round after round.
func TestCheck_SupervisionReenqueuesMissingPartitions(t *testing.T) {
	// Planned at 20.2 s: round 1 is due at 80.2 s (the run timeout later), its bound 102 s
	// (the pass at 81 s + 21 s); round 2 a retry interval (30 s) after round 1.
	build := func(lastResult float64, rounds map[int]float64) History {
		b := supervisedHistory(t)
		id := b.adhoc("sup", 20, 20.2, lastResult+1)
		b.tenure(id, 1, "instance-2", 202, 20.1, 20.3, 0)
		r := b.h.Runs[id]
		r.Results[1] = ledger.Result{Run: id, Index: 1, OK: true, Finished: at(lastResult)}
		r.Manifest.CheckRound = len(rounds)
		b.h.Runs[id] = r
		for k, sec := range rounds {
			b.h.Lines = append(b.h.Lines, line(at(sec), "instance-1", 101, "check: re-enqueued missing partitions",
				map[string]any{"run": id, "epoch": float64(1), "round": float64(k), "missing": float64(1)}))
		}
		return b.h
	}
	// Every result in before round 1's bound: nothing to re-enqueue.
	expect(t, build(90, nil), VNoRound, 0)
	// Partition 1 in only at 110 s: round 1 at 81 s (by the check, or the heartbeat) is in time.
	if res := expect(t, build(110, map[int]float64{1: 81}), VNoRound, 0); res.Figures.RoundsChecked != 1 {
		t.Errorf("%d rounds checked, want 1", res.Figures.RoundsChecked)
	}
	// Back in at 81.5 s with round 1, as a re-enqueued partition comes back.
	if res := expect(t, build(81.5, map[int]float64{1: 81}), VNoRound, 0); res.Figures.RoundsChecked != 1 {
		t.Errorf("%d rounds checked, want 1", res.Figures.RoundsChecked)
	}
	expect(t, build(110, nil), VNoRound, 1)
	// The soak ended at 95 s, before round 1's bound: in time so far, and counted.
	h := build(94, map[int]float64{1: 81})
	h.End = at(95)
	if res := expect(t, h, VNoRound, 0); res.Figures.RoundsChecked != 1 {
		t.Errorf("ended before the bound: %d rounds checked, want 1", res.Figures.RoundsChecked)
	}
	h = build(94, nil)
	h.End = at(95)
	expect(t, h, VNoRound, 0)
	expect(t, build(110, map[int]float64{1: 105}), VNoRound, 1)
	// Partition 1 in only at 150 s: round 2, due at 111 s, too (bound 133 s).
	expect(t, build(150, map[int]float64{1: 81, 2: 112}), VNoRound, 0)
	res := expect(t, build(150, map[int]float64{1: 81}), VNoRound, 1)
	t.Logf("found: %v", res.Violations)
}

// (d) Every run is final by the coordinator's FinalBound plus one heartbeat (and the checker's
// slack); a moment later it is not.
func TestCheck_FinalByTheBoundAndAHeartbeat(t *testing.T) {
	fast15 := occID("fast", 15)
	finished := func(after time.Duration) History {
		h := goodHistory(t)
		r := h.Runs[fast15]
		r.Manifest.Finished = DocumentedBound(r.Manifest, testLease).Add(h.Heartbeat + DefaultSlack + after)
		r.Report.Created = r.Manifest.Finished
		h.Runs[fast15] = r
		h.End = r.Manifest.Finished.Add(time.Second)
		return h
	}
	expect(t, finished(-500*time.Millisecond), VNotFinal, 0)
	res := expect(t, finished(500*time.Millisecond), VNotFinal, 1)
	t.Logf("found: %v", res.Violations)
}

// (c) under a limit: a run of a limited job whose deadline finds it progressing moves the
// deadline a run timeout on (logged), and round 1 comes due then; a move without progress,
// one claiming results the ledger lacks, a late one, or one for a job without a limit is a
// violation.
func TestCheck_SupervisionLetsALimitedRunWait(t *testing.T) {
	// Planned at 20.2 s, its two partitions in at first0 and 150 s: due at 80.2 s (bound
	// 102 s).
	build := func(limited bool, first0 float64, moves [][3]float64, rounds map[int]float64) History {
		b := supervisedHistory(t)
		b.h.Schedules[0].Limited = limited // its job, synthetic, the run's
		id := b.adhoc("sup", 20, 20.2, 151)
		b.tenure(id, 1, "instance-2", 202, 20.1, 20.3, 0)
		r := b.h.Runs[id]
		for i, sec := range []float64{first0, 150} {
			res := r.Results[i]
			res.Finished = at(sec)
			r.Results[i] = res
		}
		r.Manifest.CheckRound = len(rounds)
		for _, mv := range moves { // at, missing, new deadline
			r.Manifest.Waited = int(mv[1])
			r.Manifest.Deadline, r.Manifest.Expires = at(mv[2]), at(mv[2]+2*30+20)
			b.h.Lines = append(b.h.Lines, line(at(mv[0]), "instance-1", 101, coordinator.DeadlineMovedMsg,
				map[string]any{"run": id, "epoch": float64(1), "missing": mv[1], "deadline": at(mv[2]).Format(time.RFC3339Nano)}))
		}
		b.h.Runs[id] = r
		for k, sec := range rounds {
			b.h.Lines = append(b.h.Lines, line(at(sec), "instance-1", 101, "check: re-enqueued missing partitions",
				map[string]any{"run": id, "epoch": float64(1), "round": float64(k), "missing": float64(1)}))
		}
		return b.h
	}
	// One of two in by 81 s (at 50 s, within the retry interval of 30 s): moved to 141 s;
	// none new by 142 s: round 1 then, in time.
	ok := [][3]float64{{81, 1, 141}}
	if res := expect(t, build(true, 50, ok, map[int]float64{1: 142}), VLimitWait, 0); res.Figures.RoundsChecked != 1 {
		t.Errorf("%d rounds checked, want 1", res.Figures.RoundsChecked)
	}
	// Without the move's line the run is judged on its first deadline: round 1 is late.
	expect(t, build(true, 50, nil, map[int]float64{1: 142}), VNoRound, 1, VNotFinal)
	// A job without a limit does not move its deadline.
	expect(t, build(false, 50, ok, map[int]float64{1: 142}), VLimitWait, 1)
	// No progress since the move before.
	expect(t, build(true, 50, [][3]float64{{81, 1, 141}, {142, 1, 202}}, map[int]float64{1: 203}), VLimitWait, 1)
	// Claiming one missing at 81 s when both had no result then.
	expect(t, build(true, 90, ok, map[int]float64{1: 142}), VLimitWait, 1)
	// Moved late: due at 80.2 s, its bound 102 s.
	expect(t, build(true, 50, [][3]float64{{110, 1, 170}}, map[int]float64{1: 171}), VLimitWait, 1)
	// Moved though its last result came in more than a retry interval (30 s) before.
	expect(t, build(true, 30, ok, map[int]float64{1: 142}), VLimitWait, 1)
}
