package coordinator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/ledgertest"
)

const day = 24 * time.Hour

// record writes a run that ended at ended in state, with a result and a report, as a finished
// run leaves them (a state that is not final: created then, and still in the index).
func record(t *testing.T, e *schedEnv, id string, state ledger.State, ended time.Time) {
	t.Helper()
	ctx := testCtx(t)
	m := &ledger.Manifest{RunID: id, Trigger: ledger.TriggerManual, Job: "count", State: state, Partitions: 1, PlanDone: true,
		BatchSize: 4, Created: ended.Add(-time.Minute)}
	if name, ok := ledger.ParseRunID(id); ok && name.Schedule != "" {
		m.Schedule, m.Occurrence = name.Schedule, name.Occurrence
		if !name.Occurrence.IsZero() {
			m.Trigger = ledger.TriggerTimer
		}
	}
	if state.Final() {
		m.Finished = ended
	}
	if err := e.fake.CreateManifest(ctx, m); err != nil {
		t.Fatal(err)
	}
	if err := e.fake.PutResult(ctx, ledger.Result{Run: id, Index: 0, OK: true}); err != nil {
		t.Fatal(err)
	}
	if state.Final() {
		if _, err := e.fake.ClaimReport(ctx, ledger.Report{Run: id, Job: "count", State: state}); err != nil {
			t.Fatal(err)
		}
	}
}

// runsOf lists the ledger's runs.
func runsOf(t *testing.T, e *schedEnv) []string {
	t.Helper()
	var got []string
	if err := e.fake.ListRuns(testCtx(t), func(id string) bool { got = append(got, id); return true }); err != nil {
		t.Fatal(err)
	}
	return got
}

// gone reports whether nothing of run is left: manifest, result, report.
func gone(t *testing.T, e *schedEnv, run string) bool {
	t.Helper()
	ctx := testCtx(t)
	_, merr := e.fake.ReadManifest(ctx, run)
	_, rerr := e.fake.ReadResult(ctx, run, 0)
	_, _, perr := e.fake.ReadReport(ctx, run)
	return errors.Is(merr, ledger.ErrNotFound) && errors.Is(rerr, ledger.ErrNotFound) && errors.Is(perr, ledger.ErrNotFound)
}

// retentionInstance is an instance with the default retention (and no schedule), over a ledger
// whose index needs no backfill.
func retentionInstance(t *testing.T, e *schedEnv, mod func(*Config)) *Coordinator {
	t.Helper()
	if err := e.fake.WriteBackfill(testCtx(t), ledger.Backfill{Done: true}); err != nil {
		t.Fatal(err)
	}
	return e.instanceWith("a", func(cfg *Config) {
		cfg.Retention = config.DefaultRetention()
		if mod != nil {
			mod(cfg)
		}
	})
}

// Final runs are deleted, with their records, once their state's retention has passed since
// they ended: a succeeded run after 30 days, a failed, partial or cancelled one only after 90,
// a skipped one after 7. A run that is not final is never deleted, however old.
func TestRetention_ByStateAndAge(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	now := e.clock.Now()
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	record(t, e, "manual-a", ledger.StateSucceeded, ago(31*day))
	record(t, e, "manual-b", ledger.StateSucceeded, ago(25*day))
	record(t, e, "manual-c", ledger.StateFailed, ago(31*day))
	record(t, e, "manual-d", ledger.StatePartial, ago(31*day))
	record(t, e, "manual-e", ledger.StateCancelled, ago(80*day))
	record(t, e, "manual-f", ledger.StateSkipped, ago(8*day))
	record(t, e, "manual-g", ledger.StatePaused, ago(6*day+12*time.Hour))
	record(t, e, "manual-h", ledger.StateRunning, ago(200*day))
	// Out of the index, so supervision leaves it as it is: the sweep alone decides.
	if err := e.fake.RemoveActive(testCtx(t), "manual-h"); err != nil {
		t.Fatal(err)
	}
	c := retentionInstance(t, e, nil)

	out := e.heartbeat(c, now.Format(time.RFC3339Nano))
	if out.Retention.Examined != 8 || out.Retention.Deleted != 2 || !out.Retention.PassEnded {
		t.Errorf("first heartbeat's sweep: %+v, want 8 examined, 2 deleted, the pass ended", out.Retention)
	}
	if got, want := runsOf(t, e), []string{"manual-b", "manual-c", "manual-d", "manual-e", "manual-g", "manual-h"}; !slices.Equal(got, want) {
		t.Errorf("runs after the first sweep: %v, want %v", got, want)
	}
	for _, run := range []string{"manual-a", "manual-f"} {
		if !gone(t, e, run) {
			t.Errorf("%s: records left after its deletion", run)
		}
	}

	// Within a day no new pass starts; after it, one does.
	if out := e.heartbeat(c, now.Add(day-time.Minute).Format(time.RFC3339Nano)); out.Retention != (RetentionOutcome{}) {
		t.Errorf("heartbeat within a day of the pass: %+v, want no sweep", out.Retention)
	}
	out = e.heartbeat(c, now.Add(day).Format(time.RFC3339Nano))
	if out.Retention.Deleted != 1 {
		t.Errorf("the next day's sweep: %+v, want one run deleted", out.Retention)
	}
	if got, want := runsOf(t, e), []string{"manual-b", "manual-c", "manual-d", "manual-e", "manual-h"}; !slices.Equal(got, want) {
		t.Errorf("runs a day later: %v, want %v (manual-g, paused 7 days ago, deleted)", got, want)
	}
	// 60 days on: the succeeded run (86 days), the failed and partial ones (92 days) and the
	// cancelled one (141 days) are all past theirs; the run not final stays.
	out = e.heartbeat(c, now.Add(60*day).Format(time.RFC3339Nano))
	if out.Retention.Deleted != 4 {
		t.Errorf("the sweep 60 days later: %+v, want 4 deleted", out.Retention)
	}
	if got, want := runsOf(t, e), []string{"manual-h"}; !slices.Equal(got, want) {
		t.Errorf("runs 60 days later: %v, want %v: a run not final is never deleted", got, want)
	}
}

// The 90 days of a failed run are measured from its end: at 89 days it stays.
func TestRetention_FailedKeptUntil90Days(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	now := e.clock.Now()
	record(t, e, "manual-failed", ledger.StateFailed, now.Add(-89*day))
	record(t, e, "manual-timedout", ledger.StateTimedOut, now.Add(-90*day-time.Second))
	c := retentionInstance(t, e, nil)
	e.heartbeat(c, now.Format(time.RFC3339Nano))
	if got := runsOf(t, e); !slices.Equal(got, []string{"manual-failed"}) {
		t.Fatalf("runs: %v, want manual-failed alone (the timed-out one is past 90 days)", got)
	}
	e.heartbeat(c, now.Add(day).Format(time.RFC3339Nano))
	if got := runsOf(t, e); len(got) != 0 {
		t.Errorf("runs a day later: %v, want none", got)
	}
}

// A schedule's latest run stays however old, while its older occurrences go; before deleting
// them the sweep moves the schedule's Retained horizon to the latest occurrence it deletes, and
// RetainedFrom to the oldest.
func TestRetention_KeepsTheSchedulesLatest(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	now := e.clock.Now()
	o1, o2, o3 := now.Add(-50*day).Truncate(time.Hour), now.Add(-45*day).Truncate(time.Hour), now.Add(-40*day).Truncate(time.Hour)
	for _, o := range []time.Time{o1, o2, o3} {
		record(t, e, ledger.ScheduleRunID("nightly", o), ledger.StateSucceeded, o.Add(time.Minute))
	}
	latest := ledger.ScheduleRunID("nightly", o3)
	if _, err := e.fake.UpdateSchedule(testCtx(t), "nightly", func(st *ledger.ScheduleState) error {
		st.Cursor, st.Latest = o3, latest
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	c := retentionInstance(t, e, nil)
	e.heartbeat(c, now.Format(time.RFC3339Nano))
	if got := runsOf(t, e); !slices.Equal(got, []string{latest}) {
		t.Errorf("runs: %v, want the schedule's latest alone", got)
	}
	st := e.state("nightly")
	if !st.Retained.Equal(o2) || !st.RetainedFrom.Equal(o1) || st.Latest != latest || !st.Cursor.Equal(o3) {
		t.Errorf("schedule state %+v: want Retained %s (the last occurrence deleted) from %s (the first), Latest and Cursor unchanged", st, o2, o1)
	}
}

// A heartbeat examines at most RetentionPage runs, so deletes at most that many, and the pass
// goes on from where it stopped at the next heartbeat (no relisting from the start). The calls
// per heartbeat: one sweep read, one listing page, one manifest read per run examined, one
// DeleteRun per run deleted, one sweep write; none between passes.
func TestRetention_BoundPerHeartbeat(t *testing.T) {
	const runs, page = 10, 3
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	now := e.clock.Now()
	for i := range runs {
		record(t, e, fmt.Sprintf("manual-%02d", i), ledger.StateSucceeded, now.Add(-40*day))
	}
	cl := newCountingLedger(e.fake)
	c := retentionInstance(t, e, func(cfg *Config) { cfg.Store, cfg.RetentionPage = cl, page })
	at := now
	for hb := 1; ; hb++ {
		cl.take()
		out := e.heartbeat(c, at.Format(time.RFC3339Nano))
		got := cl.take()
		if out.Retention.Deleted > page || out.Retention.Examined > page {
			t.Fatalf("heartbeat %d: %+v, want at most %d examined and deleted", hb, out.Retention, page)
		}
		want := map[string]int{"ReadSweep": 1, "ListRunPage": 1, "ListRunPage entries": out.Retention.Examined,
			"ReadManifest": out.Retention.Examined, "DeleteRun": out.Retention.Deleted, "WriteSweep": 1, "ListActive": 1}
		if hb == 1 { // an instance's first heartbeat, whatever retention does
			want["EnsureContainer"], want["ReadBackfill"] = 1, 1
		}
		if !maps.Equal(got, want) {
			t.Errorf("heartbeat %d calls %s, want %s", hb, costString(got), costString(want))
		}
		if left := len(runsOf(t, e)); left != max(runs-hb*page, 0) {
			t.Errorf("heartbeat %d: %d runs left, want %d", hb, left, max(runs-hb*page, 0))
		}
		if out.Retention.PassEnded {
			if hb != (runs+page-1)/page {
				t.Errorf("the pass ended at heartbeat %d, want %d", hb, (runs+page-1)/page)
			}
			break
		}
		if hb > runs {
			t.Fatal("the pass does not end")
		}
		at = at.Add(time.Minute)
	}
	cl.take()
	e.heartbeat(c, at.Add(time.Minute).Format(time.RFC3339Nano))
	if got := cl.take(); !maps.Equal(got, map[string]int{"ListActive": 1}) {
		t.Errorf("a heartbeat between passes: %s, want no retention call", costString(got))
	}
}

// crashingLedger cuts the first DeleteRun of run short after two records, as a crash would, and
// fails it.
type crashingLedger struct {
	*ledgertest.Fake
	run     string
	crashed bool
}

func (l *crashingLedger) DeleteRun(ctx context.Context, run string) error {
	if run == l.run && !l.crashed {
		l.crashed = true
		if err := l.Fake.DeleteRunUntil(ctx, run, 2); err != nil {
			return err
		}
		return errors.New("injected: the instance died mid-delete")
	}
	return l.Fake.DeleteRun(ctx, run)
}

// A deletion cut short leaves the run's manifest, so the run is still listed, and the next
// heartbeat lists the same page again and finishes it.
func TestRetention_CrashMidDeleteFinishedNextTime(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	now := e.clock.Now()
	record(t, e, "manual-a", ledger.StateSucceeded, now.Add(-40*day))
	record(t, e, "manual-b", ledger.StateSucceeded, now.Add(-40*day))
	store := &crashingLedger{Fake: e.fake, run: "manual-a"}
	c := retentionInstance(t, e, func(cfg *Config) { cfg.Store = store })
	out := e.heartbeat(c, now.Format(time.RFC3339Nano))
	if !store.crashed || out.Retention.Deleted != 1 || out.Retention.PassEnded {
		t.Fatalf("first sweep %+v (crashed %v): want manual-b deleted, manual-a cut short, the pass not ended", out.Retention, store.crashed)
	}
	if _, err := e.fake.ReadManifest(testCtx(t), "manual-a"); err != nil {
		t.Fatalf("the half-deleted run's manifest: %v, want it kept until the end", err)
	}
	if _, _, err := e.fake.ReadReport(testCtx(t), "manual-a"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the half-deleted run's report: %v, want it deleted before the crash", err)
	}
	out = e.heartbeat(c, now.Add(time.Minute).Format(time.RFC3339Nano))
	if out.Retention.Deleted != 1 || !out.Retention.PassEnded || !gone(t, e, "manual-a") || len(runsOf(t, e)) != 0 {
		t.Errorf("next sweep %+v, runs %v: want manual-a finished and the pass ended", out.Retention, runsOf(t, e))
	}
}

// Retention off (nil, or every state 0) costs a heartbeat nothing and deletes nothing.
func TestRetention_Off(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	now := e.clock.Now()
	record(t, e, "manual-a", ledger.StateSucceeded, now.Add(-400*day))
	cl := newCountingLedger(e.fake)
	c := retentionInstance(t, e, func(cfg *Config) { cfg.Store, cfg.Retention = cl, config.Retention{ledger.StateSucceeded: 0} })
	e.heartbeat(c, now.Format(time.RFC3339Nano)) // the instance's first: container and backfill
	cl.take()
	out := e.heartbeat(c, now.Add(time.Minute).Format(time.RFC3339Nano))
	if got := cl.take(); out.Retention != (RetentionOutcome{}) || !maps.Equal(got, map[string]int{"ListActive": 1}) {
		t.Errorf("retention off: %+v, calls %s; want no sweep", out.Retention, costString(got))
	}
	if got := runsOf(t, e); len(got) != 1 {
		t.Errorf("runs: %v", got)
	}
}
