package coordinator

import (
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
)

// end settles run in state, as its finish or its supervision would.
func (e *schedEnv) end(run string, state ledger.State) {
	e.t.Helper()
	if _, err := e.fake.UpdateManifest(testCtx(e.t), run, ledger.NoFence, func(m *ledger.Manifest) error {
		m.State, m.Finished = state, e.clock.Now()
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
}

// autoPauseSchedule fires every 10 s and pauses itself after 3 failed or timed-out runs.
func autoPauseSchedule() Schedule {
	s := countSchedule("s", 1, config.OverlapSkip)
	s.AutoPause = 3
	return s
}

// streakRuns lists the runs of a schedule's streak.
func streakRuns(st ledger.ScheduleState) []string {
	var out []string
	for _, r := range st.Streak {
		out = append(out, r.Run)
	}
	return out
}

// Three runs in a row that end failed or timed out pause the schedule from the next heartbeat,
// with a note naming them; the heartbeat that reads an end it counted before counts nothing,
// and the occurrences after the pause are recorded paused with the note.
func TestAutoPause_PausesAfterNFailedRunsInARow(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	c := e.instance("a", autoPauseSchedule())
	e.heartbeat(c, "2026-11-21T10:00:01Z")
	e.heartbeat(c, "2026-11-21T10:00:10Z")
	r1, r2, r3 := occ("s", "2026-11-21T10:00:10Z"), occ("s", "2026-11-21T10:00:20Z"), occ("s", "2026-11-21T10:00:30Z")
	e.end(r1, ledger.StateFailed)
	e.heartbeat(c, "2026-11-21T10:00:15Z")
	e.heartbeat(c, "2026-11-21T10:00:17Z") // reads r1's end again
	if st := e.state("s"); len(st.Streak) != 1 || st.Counted != r1 || st.Paused {
		t.Fatalf("after r1 failed and two heartbeats: streak %v, counted %q, paused %v; want [r1] counted once", streakRuns(st), st.Counted, st.Paused)
	}
	e.heartbeat(c, "2026-11-21T10:00:20Z")
	e.end(r2, ledger.StateTimedOut)
	e.heartbeat(c, "2026-11-21T10:00:30Z")
	e.end(r3, ledger.StateFailed)
	out := e.heartbeat(c, "2026-11-21T10:00:40Z")
	st := e.state("s")
	if !st.Paused || st.PausedBy != ledger.AutoPauseBy || !st.PausedAt.Equal(at2("2026-11-21T10:00:40Z")) {
		t.Fatalf("after 3 failed runs: paused %v by %q at %s; want paused by %q at 10:00:40", st.Paused, st.PausedBy, st.PausedAt, ledger.AutoPauseBy)
	}
	want := "paused automatically after 3 consecutive runs failed or timed out: " + r1 + " (failed), " + r2 + " (timed-out), " + r3 + " (failed)"
	if st.Note != want {
		t.Errorf("note %q, want %q", st.Note, want)
	}
	if len(out.Decisions) != 1 || out.Decisions[0].State != ledger.StatePaused || !strings.Contains(out.Decisions[0].Reason, want) {
		t.Errorf("the 10:00:40 occurrence: %+v, want it recorded paused with the note", out.Decisions)
	}
	e.heartbeat(c, "2026-11-21T10:00:50Z") // r3, still the latest, is read again
	if st := e.state("s"); len(st.Streak) != 3 || st.Counted != r3 {
		t.Errorf("after another heartbeat: streak %v, counted %q; want the same 3 runs", streakRuns(st), st.Counted)
	}
}

// Any other end breaks the streak: succeeded, partial or cancelled. The pause names only the
// runs of the streak that reached the threshold.
func TestAutoPause_AnyOtherEndResetsTheStreak(t *testing.T) {
	for _, reset := range []ledger.State{ledger.StateSucceeded, ledger.StatePartial, ledger.StateCancelled} {
		t.Run(string(reset), func(t *testing.T) {
			e := newSchedEnv(t, "2026-11-21T10:00:01Z")
			c := e.instance("a", autoPauseSchedule())
			e.heartbeat(c, "2026-11-21T10:00:01Z")
			ends := []ledger.State{ledger.StateFailed, ledger.StateFailed, reset, ledger.StateFailed, ledger.StateTimedOut}
			var runs []string
			for i, state := range ends {
				when := at2("2026-11-21T10:00:10Z").Add(time.Duration(i) * 10 * time.Second)
				e.heartbeat(c, when.Format(time.RFC3339))
				runs = append(runs, ledger.ScheduleRunID("s", when))
				e.end(runs[i], state)
			}
			e.heartbeat(c, "2026-11-21T10:01:00Z")
			st := e.state("s")
			if st.Paused || len(st.Streak) != 2 || st.Streak[0].Run != runs[3] || st.Streak[1].State != ledger.StateTimedOut {
				t.Fatalf("failed, failed, %s, failed, timed-out: paused %v, streak %+v; want not paused, the last 2 runs", reset, st.Paused, st.Streak)
			}
			if m := e.manifest(occ("s", "2026-11-21T10:01:00Z")); m.State != ledger.StatePlanning {
				t.Errorf("the 10:01:00 occurrence is %s, want started", m.State)
			}
			e.end(occ("s", "2026-11-21T10:01:00Z"), ledger.StateFailed)
			e.heartbeat(c, "2026-11-21T10:01:10Z")
			if st := e.state("s"); !st.Paused || strings.Contains(st.Note, runs[1]) || !strings.Contains(st.Note, runs[3]) {
				t.Errorf("after the third failure in a row: paused %v, note %q; want paused naming %s, not %s", st.Paused, st.Note, runs[3], runs[1])
			}
		})
	}
}

// Resuming a schedule paused automatically clears its streak; the run that ended it is not
// counted again, so the schedule runs on until three more fail in a row.
func TestAutoPause_ResumeClearsTheStreak(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	c := e.instance("a", autoPauseSchedule())
	e.heartbeat(c, "2026-11-21T10:00:01Z")
	for _, when := range []string{"2026-11-21T10:00:10Z", "2026-11-21T10:00:20Z", "2026-11-21T10:00:30Z"} {
		e.heartbeat(c, when)
		e.end(occ("s", when), ledger.StateFailed)
	}
	e.heartbeat(c, "2026-11-21T10:00:40Z")
	if st := e.state("s"); !st.Paused || st.PausedBy != ledger.AutoPauseBy {
		t.Fatalf("not paused automatically: %+v", st)
	}
	st, err := c.Resume(testCtx(t), "s", "ops")
	if err != nil {
		t.Fatal(err)
	}
	if st.Paused || st.Note != "" || st.PausedBy != "" || len(st.Streak) != 0 || st.Counted != occ("s", "2026-11-21T10:00:30Z") {
		t.Fatalf("after resume: %+v; want not paused, no streak, the last counted run kept", st)
	}
	out := e.heartbeat(c, "2026-11-21T10:00:50Z")
	if len(out.Decisions) != 1 || out.Decisions[0].Status != StatusStarted {
		t.Errorf("the first occurrence after the resume: %+v, want started", out.Decisions)
	}
	if st := e.state("s"); st.Paused || len(st.Streak) != 0 {
		t.Errorf("after the resume's first heartbeat: paused %v, streak %v; want the old end not counted again", st.Paused, streakRuns(st))
	}
}

// A schedule without auto-pause never pauses itself, and its heartbeats write no streak.
func TestAutoPause_OffByDefault(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	c := e.instance("a", countSchedule("s", 1, config.OverlapSkip))
	e.heartbeat(c, "2026-11-21T10:00:01Z")
	for i := range 5 {
		when := at2("2026-11-21T10:00:10Z").Add(time.Duration(i) * 10 * time.Second)
		e.heartbeat(c, when.Format(time.RFC3339))
		e.end(ledger.ScheduleRunID("s", when), ledger.StateFailed)
	}
	e.heartbeat(c, "2026-11-21T10:01:00Z")
	if st := e.state("s"); st.Paused || len(st.Streak) != 0 || st.Counted != "" {
		t.Errorf("5 failed runs without auto-pause: %+v; want neither a pause nor a streak", st)
	}
}

// An operator's pause stands: a streak that reaches the threshold while the schedule is paused
// does not replace the operator's note.
func TestAutoPause_KeepsAnOperatorsPause(t *testing.T) {
	st := ledger.ScheduleState{Paused: true, Note: "maintenance", PausedBy: "ops"}
	for i, run := range []string{"s-a", "s-b", "s-c"} {
		if !countEnd(&st, ledger.Manifest{RunID: run, State: ledger.StateFailed}, 3, time.Now()) {
			t.Fatalf("end %d not counted", i)
		}
	}
	if countEnd(&st, ledger.Manifest{RunID: "s-c", State: ledger.StateFailed}, 3, time.Now()) {
		t.Error("the same run counted twice")
	}
	if len(st.Streak) != 3 || st.Note != "maintenance" || st.PausedBy != "ops" {
		t.Errorf("state %+v: want a streak of 3 under the operator's pause", st)
	}
}

// A run now that replaces an ended latest run counts that run's end first, so a failure the
// heartbeat had not read yet is not lost from the streak.
func TestAutoPause_RunNowCountsTheRunItReplaces(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	c := e.instance("a", autoPauseSchedule())
	e.heartbeat(c, "2026-11-21T10:00:01Z")
	e.heartbeat(c, "2026-11-21T10:00:10Z")
	first := occ("s", "2026-11-21T10:00:10Z")
	e.end(first, ledger.StateFailed)
	out, err := c.RunNow(testCtx(t), "s", "")
	if err != nil {
		t.Fatal(err)
	}
	if st := e.state("s"); st.Latest != out.Run || len(st.Streak) != 1 || st.Streak[0].Run != first || st.Counted != first {
		t.Errorf("after a run now: latest %q, streak %v, counted %q; want the run now latest and %s counted", st.Latest, streakRuns(st), st.Counted, first)
	}
}
