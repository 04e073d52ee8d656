package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/ledgertest"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/work"
)

// The scheduler's tests run in memory — the ledger fake (optionally with faults), the lease
// fakes and a recording sender — with a settable clock, so each assertion is about what the
// heartbeat recorded and in which order, never about how fast anything ran.

// A heartbeat gives each due occurrence one record and hands the run to a planner: the run is
// created at epoch 0 with its own lease, its start check goes out at once, and the check
// plans it under the run's lease. Heartbeats are idempotent: another one, on any instance,
// decides nothing twice.
func TestHeartbeat_StartsEachOccurrenceOnceAndAPlannerPlansIt(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	a, b := e.instance("a", countSchedule("every10", 6, config.OverlapSkip)), e.instance("b", countSchedule("every10", 6, config.OverlapSkip))

	// The first heartbeat of a new schedule starts its cursor: nothing before it was its to run.
	if out := e.heartbeat(a, "2026-11-21T10:00:01Z"); len(out.Decisions) != 0 || out.Status != StatusStarted {
		t.Fatalf("first heartbeat: %+v, want no decision", out)
	}
	if st := e.state("every10"); !st.Cursor.Equal(at2("2026-11-21T10:00:01Z")) {
		t.Fatalf("cursor %s, want the first heartbeat's time", st.Cursor)
	}
	out := e.heartbeat(b, "2026-11-21T10:00:10.2Z")
	run := occ("every10", "2026-11-21T10:00:10Z")
	if len(out.Decisions) != 1 || out.Decisions[0].Run != run || out.Decisions[0].Status != StatusStarted {
		t.Fatalf("heartbeat at 10:00:10: %+v, want %s started", out.Decisions, run)
	}
	m := e.manifest(run)
	if m.State != ledger.StatePlanning || m.Epoch != 0 || m.Lease != ledger.RunLeaseName(run) || m.Schedule != "every10" ||
		!m.Occurrence.Equal(at2("2026-11-21T10:00:10Z")) || m.Trigger != ledger.TriggerTimer {
		t.Fatalf("record %+v", m)
	}
	if got := e.startChecks(run); len(got) != 1 || got[0].NotBefore.After(e.clock.Now()) {
		t.Fatalf("start checks %+v, want one, due now", got)
	}
	// A replayed heartbeat (any instance, same time) decides nothing again.
	for _, c := range []*Coordinator{a, b} {
		if out := e.heartbeat(c, "2026-11-21T10:00:10.5Z"); len(out.Decisions) != 0 {
			t.Fatalf("replayed heartbeat decided %+v", out.Decisions)
		}
	}
	if n := e.deliverChecks(a); n != 1 {
		t.Fatalf("delivered %d checks, want the start check", n)
	}
	m = e.manifest(run)
	if !m.PlanDone || m.Partitions != 6 || m.Epoch != 1 || m.State != ledger.StateRunning {
		t.Fatalf("after the start check: %+v, want planned by the run's first leader", m)
	}
	if idx, seen := e.sender.partitions(t); len(idx) != 6 || seen[0] != 1 {
		t.Fatalf("partitions sent %v %v, want each of 6 once", idx, seen)
	}
	// The scheduler lease was free all along: planning took the run's own.
	if e.locks.Get(ledger.RunLeaseName(run)).Releases.Load() != 1 || e.lock.Releases.Load() != 4 {
		t.Errorf("run lease released %d times, scheduler lease %d; want 1 and one per heartbeat (4)",
			e.locks.Get(ledger.RunLeaseName(run)).Releases.Load(), e.lock.Releases.Load())
	}
}

// Each overlap policy records what it says while the latest run is in progress: skip records
// the occurrence skipped, naming the run; buffer-one queues one and skips the rest until the
// run ends, then starts the queued one; allow starts every one.
func TestHeartbeat_OverlapPolicies(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	c := e.instance("a", countSchedule("skip", 1, config.OverlapSkip), countSchedule("buffer", 1, config.OverlapBufferOne), countSchedule("allow", 1, config.OverlapAllow))
	e.heartbeat(c, "2026-11-21T10:00:01Z")
	for _, t := range []string{"10:00:10", "10:00:20", "10:00:30", "10:00:40"} {
		e.heartbeat(c, "2026-11-21T"+t+"Z")
		e.deliverChecks(c) // planned; the finisher never finishes, so each run stays running
	}
	want := map[string][]ledger.State{
		"skip":   {ledger.StateRunning, ledger.StateSkipped, ledger.StateSkipped, ledger.StateSkipped},
		"buffer": {ledger.StateRunning, ledger.StateQueued, ledger.StateSkipped, ledger.StateSkipped},
		"allow":  {ledger.StateRunning, ledger.StateRunning, ledger.StateRunning, ledger.StateRunning},
	}
	for name, states := range want {
		for i, st := range states {
			run := occ(name, fmt.Sprintf("2026-11-21T10:00:%d0Z", i+1))
			if m := e.manifest(run); m.State != st {
				t.Errorf("%s: %s (%s), want %s", name, run, m.State, st)
			}
		}
	}
	first := occ("skip", "2026-11-21T10:00:10Z")
	if m := e.manifest(occ("skip", "2026-11-21T10:00:20Z")); !strings.Contains(m.Reason, first) || !strings.Contains(m.Reason, "skip") {
		t.Errorf("skip's reason %q names neither the run in progress nor the policy", m.Reason)
	}
	queued := occ("buffer", "2026-11-21T10:00:20Z")
	if m := e.manifest(occ("buffer", "2026-11-21T10:00:30Z")); !strings.Contains(m.Reason, queued) {
		t.Errorf("buffer-one's skip %q does not name the queued run %s", m.Reason, queued)
	}
	if len(e.startChecks(queued)) != 0 {
		t.Fatal("a queued run was handed to a planner before its turn")
	}
	// The buffered schedule's run ends: the next heartbeat starts the queued run first, so the
	// occurrence due at the same heartbeat waits behind it.
	e.finish(occ("buffer", "2026-11-21T10:00:10Z"))
	e.heartbeat(c, "2026-11-21T10:00:50Z")
	if m := e.manifest(queued); m.State != ledger.StatePlanning || len(e.startChecks(queued)) != 1 {
		t.Fatalf("queued run after its turn came: %s with %d start checks, want planning with one", m.State, len(e.startChecks(queued)))
	}
	if m := e.manifest(occ("buffer", "2026-11-21T10:00:50Z")); m.State != ledger.StateQueued {
		t.Errorf("the occurrence due with the promotion is %s, want queued behind the promoted run", m.State)
	}
	if st := e.state("buffer"); st.Latest != queued || st.Buffered != occ("buffer", "2026-11-21T10:00:50Z") {
		t.Errorf("state latest %s buffered %s", st.Latest, st.Buffered)
	}
	// A check that meets a queued run leaves it to the scheduler.
	if err := c.Check(testCtx(t), work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindCheck, Run: occ("buffer", "2026-11-21T10:00:50Z"), Round: 1},
		work.Delivery{Count: 1}); err != nil {
		t.Fatal(err)
	}
	if m := e.manifest(occ("buffer", "2026-11-21T10:00:50Z")); m.State != ledger.StateQueued || m.Epoch != 0 {
		t.Errorf("a stray check planned a queued run: %+v", m)
	}
}

// An occurrence found later than the catch-up window after its time is recorded missed (the
// app was down); the ones still inside it are decided by the overlap policy, oldest first.
func TestHeartbeat_CatchUpWindow(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	s := countSchedule("s", 1, config.OverlapSkip)
	s.CatchUp = 25 * time.Second
	c := e.instance("a", s)
	e.heartbeat(c, "2026-11-21T10:00:01Z")
	out := e.heartbeat(c, "2026-11-21T10:01:05Z") // heartbeats were lost for a minute
	var got []string
	for _, d := range out.Decisions {
		got = append(got, fmt.Sprintf("%s %s", d.Occurrence.Format("15:04:05"), d.State))
	}
	want := []string{"10:00:10 missed", "10:00:20 missed", "10:00:30 missed", "10:00:40 planning", "10:00:50 skipped", "10:01:00 skipped"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Fatalf("decisions %v, want %v", got, want)
	}
	if m := e.manifest(occ("s", "2026-11-21T10:00:10Z")); !strings.Contains(m.Reason, "catch-up window of 25s") {
		t.Errorf("missed reason %q does not name the window", m.Reason)
	}
}

// A paused schedule records its occurrences paused with the note, in effect at the next
// heartbeat; resumed, it starts runs again. A pause by setting is named in the reason, and a
// run now still runs a paused schedule.
func TestHeartbeat_PauseAndResume(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	c := e.instance("a", countSchedule("s", 1, config.OverlapAllow))
	ctx := testCtx(t)
	e.heartbeat(c, "2026-11-21T10:00:01Z")
	if _, err := c.Pause(ctx, "s", "waiting for the data team", "ops@example.com"); err != nil {
		t.Fatal(err)
	}
	e.heartbeat(c, "2026-11-21T10:00:10Z")
	if m := e.manifest(occ("s", "2026-11-21T10:00:10Z")); m.State != ledger.StatePaused || m.Reason != "schedule paused: waiting for the data team" {
		t.Fatalf("while paused: %s %q", m.State, m.Reason)
	}
	if st := e.state("s"); !st.Paused || st.PausedBy != "ops@example.com" || !st.Cursor.Equal(at2("2026-11-21T10:00:10Z")) {
		t.Errorf("state %+v: the pause and the cursor must both stand", st)
	}
	out, err := c.RunNow(ctx, "s", "")
	if err != nil || out.Status != StatusStarted {
		t.Fatalf("run now of a paused schedule: %+v, %v; want started", out, err)
	}
	if _, err := c.Resume(ctx, "s", "ops@example.com"); err != nil {
		t.Fatal(err)
	}
	e.heartbeat(c, "2026-11-21T10:00:20Z")
	if m := e.manifest(occ("s", "2026-11-21T10:00:20Z")); m.State != ledger.StatePlanning {
		t.Fatalf("after resume: %s, want started", m.State)
	}
	if _, err := c.Pause(ctx, "nope", "", ""); !errors.Is(err, ErrUnknownSchedule) {
		t.Errorf("pausing an unknown schedule: %v", err)
	}
	if _, err := c.Pause(ctx, "s", strings.Repeat("x", MaxPauseNote+1), ""); !errors.Is(err, ErrBadRequest) {
		t.Errorf("an overlong note: %v", err)
	}

	bySetting := countSchedule("s", 1, config.OverlapAllow)
	bySetting.Paused, bySetting.PausedBy = true, "the app setting BATON_SCHEDULES"
	c2 := e.instance("b", bySetting)
	e.heartbeat(c2, "2026-11-21T10:00:30Z")
	if m := e.manifest(occ("s", "2026-11-21T10:00:30Z")); m.State != ledger.StatePaused || !strings.Contains(m.Reason, "BATON_SCHEDULES") {
		t.Fatalf("paused by setting: %s %q", m.State, m.Reason)
	}
}

// Jitter delays a run's start check by a pseudo-random amount below it, the same on every
// instance; the run's deadlines count from that start.
func TestHeartbeat_JitterDelaysTheStart(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	s := countSchedule("s", 1, config.OverlapAllow)
	s.Jitter = 30 * time.Second
	c := e.instance("a", s)
	e.heartbeat(c, "2026-11-21T10:00:01Z")
	var delays []time.Duration
	for _, at := range []string{"10:00:10", "10:00:20", "10:00:30", "10:00:40"} {
		e.heartbeat(c, "2026-11-21T"+at+"Z")
		run := occ("s", "2026-11-21T"+at+"Z")
		sc := e.startChecks(run)
		if len(sc) != 1 {
			t.Fatalf("%s: %d start checks", run, len(sc))
		}
		d := sc[0].NotBefore.Sub(e.clock.Now())
		if d < 0 || d >= s.Jitter || d != (&s).jitter(run) {
			t.Errorf("%s starts %s after its heartbeat, want the run's own delay below %s", run, d, s.Jitter)
		}
		if m := e.manifest(run); !m.Expires.Equal(sc[0].NotBefore.Add(time.Hour)) {
			t.Errorf("%s expires %s, want its start + the run timeout", run, m.Expires)
		}
		e.deliverChecks(c)
		if m := e.manifest(run); d > 0 && m.Epoch != 0 {
			t.Errorf("%s was planned before its delayed start", run)
		}
		delays = append(delays, d)
	}
	if delays[0] == delays[1] && delays[1] == delays[2] && delays[2] == delays[3] {
		t.Errorf("every run got the same delay %s", delays[0])
	}
}

// A misconfigured job records each occurrence failed with the reason, and never plans.
func TestHeartbeat_MisconfiguredJobRecordsFailed(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	s := countSchedule("s", 1, config.OverlapSkip)
	s.JobError = errors.New(`BATON_JOB_PARAMS="{" is not valid for BATON_JOB=count`)
	c := e.instance("a", s)
	e.heartbeat(c, "2026-11-21T10:00:01Z")
	e.heartbeat(c, "2026-11-21T10:00:10Z")
	m := e.manifest(occ("s", "2026-11-21T10:00:10Z"))
	if m.State != ledger.StateFailed || m.Reason != s.JobError.Error() || len(e.startChecks(m.RunID)) != 0 {
		t.Fatalf("%s %q", m.State, m.Reason)
	}
	if _, err := c.RunNow(testCtx(t), "s", ""); !errors.Is(err, ErrBadRequest) {
		t.Errorf("run now of a misconfigured schedule: %v, want ErrBadRequest", err)
	}
	// Params the job refuses are found at start-up, named with the schedule.
	bad := countSchedule("t", 1, config.OverlapSkip)
	bad.Params = json.RawMessage(`[1]`)
	c2 := e.instance("b", bad)
	if got := c2.Schedules()[0].JobError; got == nil || !strings.Contains(got.Error(), "schedule t") {
		t.Errorf("JobError = %v, want the params refused naming the schedule", got)
	}
}

// A heartbeat whose state write fails (or whose response is lost) leaves records behind; the
// next heartbeat adopts them — the run stands, its start check is sent again with the same
// message ID, the cursor moves on — and nothing is decided twice.
func TestHeartbeat_FailedStateWriteIsAdopted(t *testing.T) {
	for name, fault := range map[string]ledgertest.Fault{"failed": ledgertest.Fail, "response lost": ledgertest.LoseResponse} {
		t.Run(name, func(t *testing.T) {
			e := newSchedEnv(t, "2026-11-21T10:00:01Z")
			faulty := &ledgertest.Faulty{Store: e.fake}
			e.store = faulty
			c := e.instance("a", countSchedule("s", 1, config.OverlapSkip))
			e.heartbeat(c, "2026-11-21T10:00:01Z")
			faulty.Decide = ledgertest.FaultOnce(fault, "UpdateSchedule", "s")
			e.clock.set(at2("2026-11-21T10:00:10Z"))
			if _, err := c.Heartbeat(testCtx(t)); err == nil {
				t.Fatal("heartbeat with a failed state write reported success")
			}
			run := occ("s", "2026-11-21T10:00:10Z")
			out := e.heartbeat(c, "2026-11-21T10:00:11Z")
			starts := 1
			if fault == ledgertest.Fail {
				// The state was not written: the run is adopted and its start check sent again.
				if len(out.Decisions) != 1 || out.Decisions[0].Status != StatusExisting {
					t.Fatalf("second heartbeat %+v, want the run adopted", out.Decisions)
				}
				starts = 2
			} else if len(out.Decisions) != 0 {
				// The state was written, only its answer lost: nothing is left to decide.
				t.Fatalf("second heartbeat %+v, want nothing to decide", out.Decisions)
			}
			if st := e.state("s"); st.Latest != run || !st.Cursor.Equal(at2("2026-11-21T10:00:10Z")) {
				t.Fatalf("state %+v", st)
			}
			sc := e.startChecks(run)
			if len(sc) != starts || sc[0].ID != sc[len(sc)-1].ID {
				t.Fatalf("start checks %+v, want %d of the same message", sc, starts)
			}
			e.deliverChecks(c)
			if _, seen := e.sender.partitions(t); seen[0] != 1 {
				t.Errorf("partition 0 sent %d times, want once (the second start check finds the run planned)", seen[0])
			}
			// The next occurrence is decided against the adopted run.
			e.heartbeat(c, "2026-11-21T10:00:20Z")
			if m := e.manifest(occ("s", "2026-11-21T10:00:20Z")); m.State != ledger.StateSkipped || !strings.Contains(m.Reason, run) {
				t.Errorf("next occurrence %s %q, want skipped behind the adopted run", m.State, m.Reason)
			}
		})
	}
}

// A heartbeat that finds the scheduler lease held returns at once, decided nothing, and
// records nothing of its own: the next heartbeat decides the occurrence.
func TestHeartbeat_HeldReturnsAtOnce(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	c := e.instance("a", countSchedule("s", 1, config.OverlapSkip))
	e.heartbeat(c, "2026-11-21T10:00:01Z")
	other := ledger.Holder{App: "other", Instance: "x", PID: 2}
	theirs, err := e.lock.Acquire(testCtx(t), other)
	if err != nil {
		t.Fatal(err)
	}
	out := e.heartbeat(c, "2026-11-21T10:00:10Z")
	if out.Status != StatusHeld || out.Holder != other || len(out.Decisions) != 0 {
		t.Fatalf("heartbeat under another's lease: %+v", out)
	}
	if _, err := e.fake.ReadManifest(testCtx(t), occ("s", "2026-11-21T10:00:10Z")); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a held heartbeat recorded something: %v", err)
	}
	if err := e.lock.Release(testCtx(t), theirs); err != nil {
		t.Fatal(err)
	}
	e.heartbeat(c, "2026-11-21T10:00:20Z")
	for _, o := range []string{"10:00:10", "10:00:20"} {
		if m := e.manifest(occ("s", "2026-11-21T"+o+"Z")); m.State.Final() && m.State != ledger.StateSkipped {
			t.Errorf("%s: %s", o, m.State)
		}
	}
}

// A long planning of one schedule's run never delays another schedule: planning holds only
// its run's lease, in a check invocation, so the heartbeat that comes while it plans decides
// the other schedule's occurrence and hands it to a planner of its own, and that run is
// planned, all before the long planning ends.
func TestHeartbeat_LongPlanningNeverDelaysAnotherSchedule(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:59Z")
	slow := newBlockingJob()
	e.jobs.Register("slow", slow)
	long := Schedule{Name: "long", Job: "slow", Cron: every(time.Minute), CatchUp: time.Minute}
	quick := countSchedule("quick", 3, config.OverlapAllow)
	c := e.instance("a", long, quick)
	e.heartbeat(c, "2026-11-21T10:00:59Z")
	e.heartbeat(c, "2026-11-21T10:01:00Z") // long's occurrence and quick's
	longRun, quickRun := occ("long", "2026-11-21T10:01:00Z"), occ("quick", "2026-11-21T10:01:00Z")

	// Long's start check plans on instance b, blocked inside the job's Plan.
	b := e.instance("b", long, quick)
	planned := make(chan error, 1)
	go func() {
		env := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindCheck, Run: longRun, Round: 1}
		planned <- b.Check(context.Background(), env, work.Delivery{Count: 1})
	}()
	<-slow.entered
	// While long's planner holds long's lease: quick's run is planned, the next heartbeat
	// decides quick's next occurrence, and that run is planned too.
	deliverOnly(t, e, c, quickRun)
	out := e.heartbeat(c, "2026-11-21T10:01:10Z")
	next := occ("quick", "2026-11-21T10:01:10Z")
	if len(out.Decisions) != 1 || out.Decisions[0].Run != next || out.Decisions[0].Status != StatusStarted {
		t.Fatalf("heartbeat during long's planning decided %+v, want quick's occurrence started", out.Decisions)
	}
	deliverOnly(t, e, c, next)
	select {
	case err := <-planned:
		t.Fatalf("long's planning ended (%v) before the test let it", err)
	default:
	}
	for _, run := range []string{quickRun, next} {
		if m := e.manifest(run); !m.PlanDone {
			t.Fatalf("quick's run %s not planned while long planned: %s", run, m.State)
		}
	}
	if m := e.manifest(longRun); m.PlanDone || m.Epoch != 1 {
		t.Fatalf("long's run %+v, want still planning under its first leader", m)
	}
	close(slow.release)
	if err := <-planned; err != nil {
		t.Fatal(err)
	}
	if m := e.manifest(longRun); !m.PlanDone {
		t.Errorf("long's run not planned after release: %s", m.State)
	}
}

// deliverOnly delivers the start check of run through c.
func deliverOnly(t *testing.T, e *schedEnv, c *Coordinator, run string) {
	t.Helper()
	sc := e.startChecks(run)
	if len(sc) == 0 {
		t.Fatalf("no start check for %s", run)
	}
	env, err := work.DecodeEnvelope(sc[0].Body)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Check(testCtx(t), env, work.Delivery{Count: 1}); err != nil {
		t.Fatal(err)
	}
}

// Run now goes through the scheduler lease and the schedule's overlap policy; a repeated
// Idempotency-Key answers its run; an unknown schedule is refused.
func TestRunNow_OverlapAndIdempotency(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	c := e.instance("a", countSchedule("skip", 1, config.OverlapSkip), countSchedule("buffer", 1, config.OverlapBufferOne), countSchedule("allow", 1, config.OverlapAllow))
	ctx := testCtx(t)
	first := map[string]string{}
	for _, name := range []string{"skip", "buffer", "allow"} {
		out, err := c.RunNow(ctx, name, "key-"+name)
		if err != nil || out.Status != StatusStarted || !strings.HasPrefix(out.Run, name+"-now-") {
			t.Fatalf("%s: first run now %+v, %v", name, out, err)
		}
		first[name] = out.Run
		if again, err := c.RunNow(ctx, name, "key-"+name); err != nil || again.Status != StatusExisting || again.Run != out.Run {
			t.Errorf("%s: repeated key %+v, %v; want the same run", name, again, err)
		}
	}
	out, err := c.RunNow(ctx, "skip", "")
	if !errors.Is(err, ErrRunInProgress) || out.ActiveRun != first["skip"] {
		t.Errorf("skip while busy: %+v, %v; want ErrRunInProgress naming %s", out, err, first["skip"])
	}
	if out, err := c.RunNow(ctx, "buffer", ""); err != nil || out.Status != StatusQueued {
		t.Errorf("buffer-one while busy: %+v, %v; want queued", out, err)
	} else if st := e.state("buffer"); st.Buffered != out.Run {
		t.Errorf("buffered %q, want %s", st.Buffered, out.Run)
	}
	if _, err := c.RunNow(ctx, "buffer", ""); !errors.Is(err, ErrRunInProgress) {
		t.Errorf("buffer-one with one queued: %v, want ErrRunInProgress", err)
	}
	if out, err := c.RunNow(ctx, "allow", ""); err != nil || out.Status != StatusStarted {
		t.Errorf("allow while busy: %+v, %v", out, err)
	}
	if _, err := c.RunNow(ctx, "nope", ""); !errors.Is(err, ErrUnknownSchedule) {
		t.Errorf("unknown schedule: %v", err)
	}
	if name, ok := ledger.ParseRunID(first["skip"]); !ok || name.Schedule != "skip" || !name.Now {
		t.Errorf("run now's ID %s does not name its schedule", first["skip"])
	}
}

// An ad-hoc run of a job belongs to no schedule: no overlap policy, no lease to wait for.
func TestStartManual_AdHocRun(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	c := e.instance("a", countSchedule("s", 2, config.OverlapSkip))
	ctx := testCtx(t)
	if _, err := c.RunNow(ctx, "s", ""); err != nil {
		t.Fatal(err)
	}
	out, err := c.StartManual(ctx, ManualRequest{Job: "count", Params: json.RawMessage(`{"n":2}`), IdempotencyKey: "k"})
	if err != nil || out.Status != StatusStarted || !strings.HasPrefix(out.Run, "manual-") {
		t.Fatalf("ad-hoc run beside the schedule's: %+v, %v", out, err)
	}
	if m := e.manifest(out.Run); m.Schedule != "" || m.Trigger != ledger.TriggerManual || m.IdempotencyKey != "k" {
		t.Errorf("record %+v", m)
	}
	if _, err := c.StartManual(ctx, ManualRequest{}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("no job: %v", err)
	}
	if _, err := c.StartManual(ctx, ManualRequest{Job: "count", Params: json.RawMessage(`[]`)}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("bad params: %v", err)
	}
	e.deliverChecks(c)
	if m := e.manifest(out.Run); !m.PlanDone || m.Partitions != 2 {
		t.Errorf("ad-hoc run not planned: %+v", m)
	}
}

// A ledger written by the single-schedule versions keeps working: the settings' schedule
// ("tick") takes over its cursor and its latest run, so its overlap policy sees the run in
// progress, and its runs keep their IDs.
func TestHeartbeat_TakesOverTheSingleScheduleLedger(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	ctx := testCtx(t)
	old := "tick-20261121t095950z"
	legacy := ledger.Manifest{Version: 1, RunID: old, Trigger: ledger.TriggerTimer, Occurrence: at2("2026-11-21T09:59:50Z"),
		Epoch: 7, Segments: []ledger.Segment{{Epoch: 7}}, Job: "count", State: ledger.StateRunning, PlanDone: true, Partitions: 1,
		BatchSize: 4, Created: at2("2026-11-21T09:59:50Z"), Expires: at2("2026-11-21T12:00:00Z")}
	if err := e.fake.CreateManifest(ctx, &legacy); err != nil {
		t.Fatal(err)
	}
	if err := e.fake.SetLegacySchedule(ctx, ledger.LegacySchedule{Cursor: at2("2026-11-21T09:59:50Z"), Latest: old}); err != nil {
		t.Fatal(err)
	}
	c := e.instance("a", countSchedule(LegacySchedule, 1, config.OverlapSkip))
	out := e.heartbeat(c, "2026-11-21T10:00:01Z")
	if len(out.Decisions) != 1 || out.Decisions[0].Run != "tick-20261121t100000z" || out.Decisions[0].State != ledger.StateSkipped {
		t.Fatalf("first heartbeat after the upgrade: %+v, want 10:00:00 skipped behind %s", out.Decisions, old)
	}
	if m := e.manifest("tick-20261121t100000z"); !strings.Contains(m.Reason, old) {
		t.Errorf("reason %q", m.Reason)
	}
	e.finish(old)
	e.heartbeat(c, "2026-11-21T10:00:10Z")
	if m := e.manifest("tick-20261121t100010z"); m.State != ledger.StatePlanning || m.Schedule != LegacySchedule {
		t.Errorf("after the legacy run ended: %+v", m)
	}
	// Other schedules never read the legacy ledger.
	e2 := newSchedEnv(t, "2026-11-21T10:00:01Z")
	if err := e2.fake.SetLegacySchedule(ctx, ledger.LegacySchedule{Cursor: at2("2026-11-21T09:00:00Z")}); err != nil {
		t.Fatal(err)
	}
	c2 := e2.instance("a", countSchedule("nightly", 1, config.OverlapSkip))
	if out := e2.heartbeat(c2, "2026-11-21T10:00:01Z"); len(out.Decisions) != 0 {
		t.Errorf("a new schedule decided %+v from the legacy cursor", out.Decisions)
	}
}

// A run whose every check after planning is lost (the chain is gone) is still driven to its end
// by the heartbeats alone: its missing partitions re-enqueued at its deadline, then recorded
// timed out, all by its documented bound plus a heartbeat; no check is ever delivered.
func TestSupervision_DrivesARunWhoseChainIsLostToItsEnd(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	c := e.instance("a", countSchedule("s", 1, config.OverlapSkip))
	e.heartbeat(c, "2026-11-21T10:00:01Z")
	e.heartbeat(c, "2026-11-21T10:00:10Z")
	run := occ("s", "2026-11-21T10:00:10Z")
	e.deliverChecks(c) // planned; the check chain's next check is at the deadline
	e.skipSent()       // the chain is lost: none of its checks is ever delivered
	m := e.manifest(run)
	bound := c.FinalBound(m)
	for at := m.Deadline.Add(-time.Second); ; at = at.Add(time.Minute) {
		if at.After(bound.Add(time.Minute)) {
			t.Fatalf("run %s still not final a heartbeat past its bound %s", run, bound)
		}
		e.heartbeat(c, at.Format(time.RFC3339Nano))
		if at.Before(m.Deadline) {
			if _, err := e.fake.ReadResult(testCtx(t), run, 0); err == nil {
				t.Fatal("the run's partition was recorded before its deadline")
			}
			continue
		}
		if r, err := e.fake.ReadResult(testCtx(t), run, 0); err == nil {
			if !r.TimedOut {
				t.Errorf("the overdue run's partition: %+v, want recorded timed out", r)
			}
			break
		}
	}
	// The heartbeats re-enqueued the missing partition on the run's rounds before giving up.
	if got := e.manifest(run).CheckRound; got != 2 {
		t.Errorf("re-enqueue rounds spent: %d, want the 2 of the configuration", got)
	}
}

// The heartbeat reads a run in progress only when it should have moved by then (its start, a
// planner's silence, its deadline), and a run that ended leaves the index: a heartbeat every
// 10 s does not read the run's manifest 10 s apart for an hour.
func TestSupervision_ReadsARunOnlyWhenItShouldHaveMoved(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T23:59:50Z")
	run := occ("daily", "2026-11-22T00:00:00Z")
	var reads atomic.Int64
	e.store = &ledgertest.Faulty{Store: e.fake, Decide: func(op, name string) ledgertest.Fault {
		if op == "ReadManifest" && name == run {
			reads.Add(1)
		}
		return ledgertest.Pass
	}}
	c := e.instance("a", Schedule{Name: "daily", Job: "count", Params: json.RawMessage(`{"n":1}`), Cron: every(24 * time.Hour),
		Overlap: config.OverlapSkip, CatchUp: time.Minute})
	e.heartbeat(c, "2026-11-21T23:59:50Z")
	e.heartbeat(c, "2026-11-22T00:00:00Z") // starts the run
	e.deliverChecks(c)                     // plans it; this test's finisher never finishes it
	m := e.manifest(run)
	if m.State.Final() || !m.PlanDone {
		t.Fatalf("run %s: %s, planned %v; want planned and running", run, m.State, m.PlanDone)
	}
	before, beats := reads.Load(), 0
	for at := at2("2026-11-22T00:00:10Z"); at.Before(m.Deadline); at = at.Add(10 * time.Second) {
		e.heartbeat(c, at.Format(time.RFC3339Nano))
		beats++
	}
	// At most once for its start's bound (by then planned) and once more to learn its deadline.
	if n := reads.Load() - before; n > 2 || beats < 300 {
		t.Errorf("%d heartbeats before the run's deadline read its manifest %d times, want at most twice", beats, n)
	}
	if _, err := e.fake.UpdateManifest(testCtx(t), run, ledger.NoFence, func(m *ledger.Manifest) error {
		return m.Transition(ledger.StateSucceeded)
	}); err != nil {
		t.Fatal(err)
	}
	before = reads.Load()
	for i := range 3 {
		e.heartbeat(c, m.Deadline.Add(time.Duration(i+1)*10*time.Second).Format(time.RFC3339Nano))
	}
	if n := reads.Load() - before; n != 0 {
		t.Errorf("3 heartbeats after the run ended read it %d times, want none (it left the index)", n)
	}
}

// Bad schedules are refused at start-up, each naming the schedule and the field.
func TestNew_RefusesBadSchedules(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	ld, err := election.NewLeader(election.LeaderConfig{Lock: e.lock, Identity: ledger.Holder{App: "a", Instance: "b"}, LeaseDuration: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	good := countSchedule("good", 1, config.OverlapSkip)
	_, err = New(Config{Leader: ld, Store: e.store, Sender: e.sender, Jobs: e.jobs, HeartbeatPeriod: 10 * time.Second, Schedules: []Schedule{
		good, good,
		{Name: "Bad", Job: "count", Cron: every(time.Second)},
		{Name: "nocron", Job: "count"},
		{Name: "overlap", Job: "count", Cron: every(time.Second), Overlap: "replace"},
		{Name: "catchup", Job: "count", Cron: every(time.Second), CatchUp: 5 * time.Second},
		{Name: "jitter", Job: "count", Cron: every(time.Second), Jitter: 2 * time.Hour},
	}})
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{`"good" is declared twice`, `"Bad"`, `"nocron": Cron is required`, `"overlap": Overlap "replace"`,
		`"catchup": CatchUp 5s must be longer than the heartbeat's period 10s`, `"jitter": Jitter 2h0m0s`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %s:\n%v", want, err)
		}
	}
}

// A heartbeat that beats a little before an occurrence decides it, but its run starts no
// earlier than the occurrence (plus its jitter).
func TestHeartbeat_EarlyBeatStartsNoEarlierThanTheOccurrence(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	c := e.instance("i1", countSchedule("s", 2, config.OverlapSkip))
	e.heartbeat(c, "2026-11-21T10:00:01Z")
	out := e.heartbeat(c, "2026-11-21T10:00:09Z") // 1 s before the occurrence at 10:00:10
	run := occ("s", "2026-11-21T10:00:10Z")
	if len(out.Decisions) != 1 || out.Decisions[0].Run != run {
		t.Fatalf("decisions %+v, want the occurrence at 10:00:10 decided early", out.Decisions)
	}
	sc := e.startChecks(run)
	if len(sc) != 1 || !sc[0].NotBefore.Equal(at2("2026-11-21T10:00:10Z")) {
		t.Fatalf("start checks %+v, want one due at the occurrence", sc)
	}
	if m := e.manifest(run); !m.Expires.Equal(at2("2026-11-21T11:00:10Z")) {
		t.Errorf("expires %s, want the run timeout counted from the occurrence", m.Expires)
	}
	if n := e.deliverChecks(c); n != 0 {
		t.Errorf("%d checks delivered before the occurrence", n)
	}
}

// Concurrent runs now with one Idempotency-Key make one run, and every request answers it:
// the ones that get the scheduler lease after the first find the key's run, not the overlap
// policy's refusal.
func TestRunNow_ConcurrentSameKeyAnswersOneRun(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	// Every request reads the key's run (not found) before any of them creates it.
	barrier := &readBarrier{Store: e.fake, n: 10, run: ledger.ScheduleNowRunID("s", "same-key", time.Time{}), all: make(chan struct{})}
	e.store = barrier
	c := e.instance("a", countSchedule("s", 1, config.OverlapSkip))
	ctx := testCtx(t)
	var wg sync.WaitGroup
	outs := make([]Outcome, 10)
	errs := make([]error, 10)
	for i := range 10 {
		wg.Go(func() { outs[i], errs[i] = c.RunNow(ctx, "s", "same-key") })
	}
	wg.Wait()
	for i := range 10 {
		if errs[i] != nil || outs[i].Run != outs[0].Run || (outs[i].Status != StatusStarted && outs[i].Status != StatusExisting) {
			t.Errorf("request %d: %+v, %v; want run %s started or existing", i, outs[i], errs[i], outs[0].Run)
		}
	}
}

// A pause may come before the schedule's first heartbeat, on a ledger that does not exist yet.
func TestPause_BeforeTheFirstHeartbeat(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	e.fake.Unensure()
	c := e.instance("a", countSchedule("s", 1, config.OverlapSkip))
	if _, err := c.Pause(testCtx(t), "s", "not yet", "ops"); err != nil {
		t.Fatalf("pause before the first heartbeat: %v", err)
	}
	if st := e.state("s"); !st.Paused || !st.Cursor.IsZero() {
		t.Fatalf("state %+v", st)
	}
	e.heartbeat(c, "2026-11-21T10:00:01Z")
	e.heartbeat(c, "2026-11-21T10:00:10Z")
	if m := e.manifest(occ("s", "2026-11-21T10:00:10Z")); m.State != ledger.StatePaused {
		t.Errorf("first occurrence after an early pause: %s", m.State)
	}
}

// readBarrier holds the first n reads of run's manifest until all n have arrived.
type readBarrier struct {
	ledger.Store
	n    int
	run  string
	mu   sync.Mutex
	seen int
	all  chan struct{}
}

func (b *readBarrier) ReadManifest(ctx context.Context, run string) (ledger.Manifest, error) {
	if run == b.run {
		b.mu.Lock()
		b.seen++
		first := b.seen <= b.n
		if b.seen == b.n {
			close(b.all)
		}
		b.mu.Unlock()
		if first {
			select {
			case <-b.all:
			case <-ctx.Done():
				return ledger.Manifest{}, ctx.Err()
			}
		}
	}
	return b.Store.ReadManifest(ctx, run)
}

// A schedule's very first heartbeat that dies after creating a run but before sending its
// start check (here: the send fails) leaves the run after the schedule's stored cursor, so the
// next heartbeat finds it and sends the check: the run is not orphaned.
func TestHeartbeat_FirstHeartbeatDyingAfterTheRecordOrphansNothing(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:09Z")
	// The heartbeat's process dies right after the run's record is created: its start check is
	// never sent and nothing after the record reaches storage.
	var dead atomic.Bool
	faulty := &ledgertest.Faulty{Store: e.fake, Decide: func(op, name string) ledgertest.Fault {
		if dead.Load() {
			return ledgertest.Fail
		}
		if op == "CreateManifest" {
			dead.Store(true)
		}
		return ledgertest.Pass
	}}
	e.store = faulty
	// Send 1 is the run's start check.
	flaky := &flakySender{memSender: e.sender, fail: map[int]bool{1: true}}
	c := e.instanceWith("a", func(cfg *Config) { cfg.Sender = flaky }, countSchedule("s", 1, config.OverlapSkip))
	e.clock.set(at2("2026-11-21T10:00:09.9Z")) // a little early for 10:00:10: decided now
	if _, err := c.Heartbeat(testCtx(t)); err == nil {
		t.Fatal("the first heartbeat's failed start check went unreported")
	}
	run := occ("s", "2026-11-21T10:00:10Z")
	if m := e.manifest(run); m.State != ledger.StatePlanning || len(e.startChecks(run)) != 0 {
		t.Fatalf("after the failed heartbeat: %s with %d start checks", m.State, len(e.startChecks(run)))
	}
	if st := e.state("s"); !st.Cursor.Equal(at2("2026-11-21T10:00:09Z")) { // when the instance started
		t.Fatalf("the first heartbeat did not store its starting cursor first: %+v", st)
	}
	dead.Store(false)
	faulty.Decide = nil
	out := e.heartbeat(c, "2026-11-21T10:00:30Z")
	if len(out.Decisions) == 0 || out.Decisions[0].Run != run || out.Decisions[0].Status != StatusExisting {
		t.Fatalf("next heartbeat %+v, want %s adopted", out.Decisions, run)
	}
	if len(e.startChecks(run)) != 1 {
		t.Fatalf("start checks of %s: %d, want the one the next heartbeat sent", run, len(e.startChecks(run)))
	}
	e.deliverChecks(c)
	if m := e.manifest(run); !m.PlanDone {
		t.Errorf("the run is %s, want planned", m.State)
	}
}

// dropStartChecks is a control queue that refuses every start check (epoch 0, round 1), as
// when the process dies between a run's record and its start check.
type dropStartChecks struct{ inner Sender }

var errStartCheckLost = errors.New("start check lost")

func (s dropStartChecks) Send(ctx context.Context, msgs []transport.Message) error {
	for _, m := range msgs {
		if env, err := work.DecodeEnvelope(m.Body); err == nil && env.Kind == work.KindCheck && env.Epoch == 0 && env.Round == 1 {
			return errStartCheckLost
		}
	}
	return s.inner.Send(ctx, msgs)
}

// A manual run or a run now whose start check never went out (its caller got an error and
// need not ask again) is planned by the heartbeat itself one check interval after its start,
// without any message delivered, and not before; a run whose start went well is left alone.
func TestSupervision_PlansARunWhoseStartCheckNeverWentOut(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	lossy := e.instanceWith("a", func(cfg *Config) { cfg.Control = dropStartChecks{inner: e.sender} }, countSchedule("s", 2, config.OverlapAllow))
	c := e.instance("b", countSchedule("s", 2, config.OverlapAllow))
	ctx := testCtx(t)

	if _, err := lossy.StartManual(ctx, ManualRequest{Job: "count", Params: json.RawMessage(`{"n":3}`)}); !errors.Is(err, errStartCheckLost) {
		t.Fatalf("StartManual with the start check lost: %v", err)
	}
	if _, err := lossy.RunNow(ctx, "s", ""); !errors.Is(err, errStartCheckLost) {
		t.Fatalf("RunNow with the start check lost: %v", err)
	}
	orphans := planningRuns(t, e)
	if len(orphans) != 2 {
		t.Fatalf("runs recorded before their start checks were lost: %v, want 2", orphans)
	}
	if st := e.state("s"); st.Latest == "" || !slices.Contains(orphans, st.Latest) {
		t.Errorf("schedule s names latest run %q, want the run now (one of %v)", st.Latest, orphans)
	}
	started := e.clock.Now()
	good, err := c.StartManual(ctx, ManualRequest{Job: "count", Params: json.RawMessage(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	e.deliverChecks(c) // the good run's start check plans it
	e.skipSent()
	goodSent := sentFor(e, good.Run)

	due := started.Add(15*time.Second + checkMargin)
	if out := e.heartbeat(c, due.Add(-time.Second).Format(time.RFC3339Nano)); out.Supervised != 0 {
		t.Fatalf("a heartbeat before the runs' bound drove %d runs, want none", out.Supervised)
	}
	for _, id := range orphans {
		if m := e.manifest(id); m.Epoch != 0 {
			t.Fatalf("run %s taken before its bound: epoch %d", id, m.Epoch)
		}
	}
	if out := e.heartbeat(c, due.Format(time.RFC3339Nano)); out.Supervised != 2 {
		t.Fatalf("the heartbeat at the runs' bound drove %d runs, want the 2 orphans", out.Supervised)
	}
	for _, id := range orphans {
		if m := e.manifest(id); !m.PlanDone || m.Epoch == 0 || m.Leader.Instance != "b" {
			t.Errorf("run %s after the heartbeat: planned %v at epoch %d by %s, want planned by b", id, m.PlanDone, m.Epoch, m.Leader.Instance)
		}
	}
	if n := sentFor(e, good.Run); n != goodSent {
		t.Errorf("the heartbeat sent %d messages for a run that moves on its own, want none", n-goodSent)
	}
}

// deadSender refuses every send, as a process that died after taking a run's lease and
// before it sent anything: the first lease probe, a partition, the chain's next check.
type deadSender struct{}

var errProcessDied = errors.New("the process died")

func (deadSender) Send(context.Context, []transport.Message) error { return errProcessDied }

// A run whose planner died before it sent anything (not even the check that continues its
// chain) is taken over by the heartbeat once the planner's lease has lapsed: a manual run is no
// schedule's, yet nothing waits on a message for it.
func TestSupervision_TakesOverARunWhosePlannerDied(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	lossy := e.instanceWith("a", func(cfg *Config) { cfg.Control = dropStartChecks{inner: e.sender} })
	dying := e.instanceWith("p", func(cfg *Config) { cfg.Sender, cfg.Control = deadSender{}, deadSender{} })
	c := e.instance("b")
	ctx := testCtx(t)

	if _, err := lossy.StartManual(ctx, ManualRequest{Job: "count", Params: json.RawMessage(`{"n":3}`)}); !errors.Is(err, errStartCheckLost) {
		t.Fatalf("StartManual with the start check lost: %v", err)
	}
	orphans := planningRuns(t, e)
	if len(orphans) != 1 {
		t.Fatalf("runs recorded before their start checks were lost: %v, want 1", orphans)
	}
	run := orphans[0]
	start := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindCheck, Run: run, Round: 1}
	if err := dying.Check(ctx, start, work.Delivery{Count: 1}); !errors.Is(err, errProcessDied) {
		t.Fatalf("the start check whose planner died: %v", err)
	}
	first := e.manifest(run)
	if first.Epoch == 0 || first.PlanDone {
		t.Fatalf("after the dead planner: epoch %d, planned %v; want the run taken and not planned", first.Epoch, first.PlanDone)
	}
	bound := first.Updated.Add(15*time.Second + checkMargin)
	e.heartbeat(c, bound.Add(-time.Second).Format(time.RFC3339Nano))
	if m := e.manifest(run); m.Epoch != first.Epoch {
		t.Fatalf("taken over before the dead planner's bound: epoch %d", m.Epoch)
	}
	if out := e.heartbeat(c, bound.Format(time.RFC3339Nano)); out.Supervised != 1 {
		t.Fatalf("the heartbeat at the bound drove %d runs, want 1", out.Supervised)
	}
	m := e.manifest(run)
	if !m.PlanDone || m.Epoch <= first.Epoch || m.Leader.Instance != "b" {
		t.Fatalf("after the heartbeat: planned %v, epoch %d (the dead planner's %d), leader %s; want planned by b",
			m.PlanDone, m.Epoch, first.Epoch, m.Leader.Instance)
	}
}

// lostStartChecks is a control queue that accepts every start check (epoch 0, round 1) and
// never delivers it, as when a listener's dequeue takes effect but its answer is lost: the
// message stays hidden for the host's message lease (10 minutes on a Storage queue).
type lostStartChecks struct{ inner Sender }

func (s lostStartChecks) Send(ctx context.Context, msgs []transport.Message) error {
	kept := msgs[:0:0]
	for _, m := range msgs {
		if env, err := work.DecodeEnvelope(m.Body); err == nil && env.Kind == work.KindCheck && env.Epoch == 0 && env.Round == 1 {
			continue
		}
		kept = append(kept, m)
	}
	if len(kept) == 0 {
		return nil
	}
	return s.inner.Send(ctx, kept)
}

// A scheduled run whose start check was sent and then lost (no heartbeat decides its
// occurrence again: it is behind the cursor, and with overlap allow a later run soon becomes the
// schedule's latest) is planned by the heartbeat one check interval after its start, and not
// before: the run keeps its jitter. A buffered run started when its turn comes is covered the
// same way.
func TestSupervision_PlansAScheduledRunWhoseStartCheckWasLost(t *testing.T) {
	cases := []struct {
		overlap config.Overlap
		run     string // the run whose start check is lost
		begin   func(e *schedEnv, c *Coordinator)
	}{
		{config.OverlapAllow, occ("s", "2026-11-21T10:00:10Z"), func(e *schedEnv, c *Coordinator) {
			e.heartbeat(c, "2026-11-21T10:00:10Z")
			e.heartbeat(c, "2026-11-21T10:00:20Z") // a later run becomes the latest
		}},
		{config.OverlapBufferOne, occ("s", "2026-11-21T10:00:20Z"), func(e *schedEnv, c *Coordinator) {
			e.heartbeat(c, "2026-11-21T10:00:10Z")
			e.heartbeat(c, "2026-11-21T10:00:20Z") // queued behind the first run
			e.finish(occ("s", "2026-11-21T10:00:10Z"))
			e.heartbeat(c, "2026-11-21T10:00:25Z") // promoted: its start check is lost
		}},
	}
	for _, tc := range cases {
		t.Run(string(tc.overlap), func(t *testing.T) {
			e := newSchedEnv(t, "2026-11-21T10:00:01Z")
			s := countSchedule("s", 2, tc.overlap)
			s.Jitter = 30 * time.Second
			lossy := e.instanceWith("a", func(cfg *Config) { cfg.Control = lostStartChecks{inner: e.sender} }, s)
			e.heartbeat(lossy, "2026-11-21T10:00:01Z")
			tc.begin(e, lossy)
			m := e.manifest(tc.run)
			if !unstarted(m) || len(e.startChecks(tc.run)) != 0 {
				t.Fatalf("run %s: %s at epoch %d with %d start checks, want planning, unstarted, its start check lost", tc.run, m.State, m.Epoch, len(e.startChecks(tc.run)))
			}
			start := m.Deadline.Add(-time.Hour) // the run's start, its jitter included: its deadline counts from it
			due := start.Add(15*time.Second + checkMargin)
			e.skipSent() // no message is delivered from here on
			e.heartbeat(lossy, due.Add(-time.Second).Format(time.RFC3339Nano))
			if m := e.manifest(tc.run); m.Epoch != 0 {
				t.Fatalf("run %s planned before one check interval after its start (%s)", tc.run, start)
			}
			e.heartbeat(lossy, due.Format(time.RFC3339Nano))
			if m := e.manifest(tc.run); !m.PlanDone || m.Epoch == 0 {
				t.Errorf("run %s after the heartbeat at its bound: planned %v at epoch %d, want planned", tc.run, m.PlanDone, m.Epoch)
			}
		})
	}
}

// planningRuns lists the runs recorded as planning at epoch 0 (no planner has taken them).
func planningRuns(t *testing.T, e *schedEnv) []string {
	t.Helper()
	var ids, out []string
	if err := e.fake.ListRuns(testCtx(t), func(run string) bool { ids = append(ids, run); return true }); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if m := e.manifest(id); m.State == ledger.StatePlanning && m.Epoch == 0 {
			out = append(out, id)
		}
	}
	return out
}

// sentFor counts the messages sent so far about run.
func sentFor(e *schedEnv, run string) int {
	e.sender.mu.Lock()
	defer e.sender.mu.Unlock()
	n := 0
	for _, msg := range e.sender.msgs {
		if env, err := work.DecodeEnvelope(msg.Body); err == nil && env.Run == run {
			n++
		}
	}
	return n
}
