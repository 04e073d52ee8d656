package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/work"
)

// acquireCounter counts the attempts at a lock, won or not.
type acquireCounter struct {
	election.Lock
	n atomic.Int32
}

func (a *acquireCounter) Acquire(ctx context.Context, id ledger.Holder) (election.Lease, error) {
	a.n.Add(1)
	return a.Lock.Acquire(ctx, id)
}

// withCaps sets the caps on manual runs and counts the attempts at the scheduler lease.
func (e *schedEnv) withCaps(app, perJob int, acquires *acquireCounter) func(*Config) {
	return func(cfg *Config) {
		cfg.MaxManualRuns, cfg.MaxManualRunsPerJob = app, perJob
		if acquires != nil {
			acquires.Lock = e.lock
			ld, err := election.NewLeader(election.LeaderConfig{Lock: acquires, Locks: e.locks.Lock, Identity: cfg.Identity,
				LeaseDuration: 15 * time.Second, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				e.t.Fatal(err)
			}
			cfg.Leader = ld
		}
	}
}

// runIDs lists the ledger's runs.
func (e *schedEnv) runIDs() []string {
	e.t.Helper()
	var ids []string
	if err := e.fake.ListRuns(context.Background(), func(run string) bool { ids = append(ids, run); return true }); err != nil {
		e.t.Fatal(err)
	}
	return ids
}

func manualReq(job string, n int, key string) ManualRequest {
	return ManualRequest{Job: job, Params: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)), IdempotencyKey: key}
}

// The caps count the manual runs that are not final, ad-hoc runs and runs now alike: the job's
// cap refuses a third run of count, the app's a fifth run of any job (a run now included),
// each naming its setting, and a refusal records nothing. A repeated key answers its run at the
// cap; a run that ends frees its place.
func TestManualCaps_PerJobAndPerApp(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	e.jobs.Register("other", &countJob{})
	third := Schedule{Name: "third", Job: "other", Params: json.RawMessage(`{"n":1}`), Cron: every(time.Hour),
		Overlap: config.OverlapAllow, CatchUp: time.Minute}
	c := e.instanceWith("a", e.withCaps(4, 2, nil), third)
	ctx := testCtx(t)

	var count []string
	for i := range 2 {
		out, err := c.StartManual(ctx, manualReq("count", 1, fmt.Sprint("count-", i)))
		if err != nil || out.Status != StatusStarted {
			t.Fatalf("count %d: %+v, %v", i, out, err)
		}
		count = append(count, out.Run)
	}
	_, err := c.StartManual(ctx, manualReq("count", 1, "count-2"))
	if !errors.Is(err, ErrTooManyRuns) || !strings.Contains(err.Error(), config.SettingMaxManualJob+"=2") || !strings.Contains(err.Error(), `job "count"`) {
		t.Fatalf("a third run of count: %v, want ErrTooManyRuns naming %s", err, config.SettingMaxManualJob)
	}
	if _, err := c.StartManual(ctx, manualReq("count", 1, "")); !errors.Is(err, ErrTooManyRuns) {
		t.Fatalf("a third run of count without a key: %v, want ErrTooManyRuns", err)
	}
	// The job's cap is the job's: other still has room, up to the app's cap.
	if out, err := c.StartManual(ctx, manualReq("other", 1, "")); err != nil || out.Status != StatusStarted {
		t.Fatalf("other: %+v, %v", out, err)
	}
	if out, err := c.RunNow(ctx, "third", ""); err != nil || out.Status != StatusStarted {
		t.Fatalf("a run now of third (job other): %+v, %v", out, err)
	}
	_, err = c.RunNow(ctx, "third", "")
	if !errors.Is(err, ErrTooManyRuns) || !strings.Contains(err.Error(), config.SettingMaxManualJob) {
		t.Fatalf("a third run of other, as a run now: %v, want the job's cap", err)
	}
	e.jobs.Register("fresh", &countJob{})
	_, err = c.StartManual(ctx, manualReq("fresh", 1, ""))
	if !errors.Is(err, ErrTooManyRuns) || !strings.Contains(err.Error(), config.SettingMaxManual+"=4") || !strings.Contains(err.Error(), "the app has 4") {
		t.Fatalf("a fifth manual run: %v, want the app's cap naming %s", err, config.SettingMaxManual)
	}
	if n := len(e.runIDs()); n != 4 {
		t.Errorf("%d runs recorded, want the 4 accepted (a refusal records nothing)", n)
	}
	// At the cap, a repeated key still answers its run.
	if out, err := c.StartManual(ctx, manualReq("count", 1, "count-0")); err != nil || out.Status != StatusExisting || out.Run != count[0] {
		t.Errorf("a repeat at the cap: %+v, %v; want %s existing", out, err, count[0])
	}
	// A run that ends frees its place (its index entry goes with it).
	e.finish(count[0])
	if out, err := c.StartManual(ctx, manualReq("count", 1, "count-2")); err != nil || out.Status != StatusStarted {
		t.Errorf("after a run of count ended: %+v, %v; want started", out, err)
	}
}

// An index entry that outlived its run (final, or never created and older than a check delay)
// does not count and is removed; one whose record may still be being created counts.
func TestManualCaps_StaleEntriesDoNotCount(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	c := e.instanceWith("a", e.withCaps(2, 2, nil))
	ctx := testCtx(t)
	out, err := c.StartManual(ctx, manualReq("count", 1, "ended"))
	if err != nil {
		t.Fatal(err)
	}
	e.finish(out.Run)
	now := e.clock.Now()
	ended := ledger.ActiveRun{Run: out.Run, Trigger: ledger.TriggerManual, Job: "count", Created: now}
	lost := ledger.ActiveRun{Run: ledger.ManualRunID("lost", now), Trigger: ledger.TriggerManual, Job: "count", Created: now.Add(-time.Hour)}
	creating := ledger.ActiveRun{Run: ledger.ManualRunID("creating", now), Trigger: ledger.TriggerManual, Job: "count", Created: now}
	for _, a := range []ledger.ActiveRun{ended, lost, creating} {
		if err := e.fake.AddActive(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	// Four entries, one real: the first new run fits (entries ended and lost are not counted,
	// creating is), the second is refused.
	if out, err := c.StartManual(ctx, manualReq("count", 1, "")); err != nil || out.Status != StatusStarted {
		t.Fatalf("beside stale entries: %+v, %v; want started", out, err)
	}
	if _, err := c.StartManual(ctx, manualReq("count", 1, "")); !errors.Is(err, ErrTooManyRuns) {
		t.Fatalf("with the creating entry and one run: %v, want ErrTooManyRuns", err)
	}
	var left []string
	if err := e.fake.ListActive(ctx, func(a ledger.ActiveRun) bool { left = append(left, a.Run); return true }); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(left, ended.Run) || slices.Contains(left, lost.Run) || !slices.Contains(left, creating.Run) {
		t.Errorf("index after counting: %v; want %s and %s removed, %s kept", left, ended.Run, lost.Run, creating.Run)
	}
}

// A flood of manual runs up to and beyond the caps neither refuses nor delays a schedule's
// occurrence: runs beyond the caps are refused before the scheduler lease is tried, the
// heartbeat at the occurrence records it and sends its start check, and the start checks
// queued ahead of it are the caps' worth, one per manual run accepted. Its planning then
// starts with the first delivery of the checks.
func TestManualCaps_FloodLeavesTheOccurrenceOnTime(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	e.jobs.Register("other", &countJob{})
	acquires := &acquireCounter{}
	nightly := countSchedule("nightly", 3, config.OverlapSkip)
	backfill := Schedule{Name: "backfill", Job: "other", Params: json.RawMessage(`{"n":50}`), Cron: every(24 * time.Hour),
		Overlap: config.OverlapAllow, CatchUp: time.Minute}
	c := e.instanceWith("a", e.withCaps(3, 2, acquires), nightly, backfill)
	ctx := testCtx(t)
	e.heartbeat(c, "2026-11-21T10:00:02Z") // the schedules' cursors start

	accepted, refused := 0, 0
	for i := range 40 {
		var err error
		var out Outcome
		if i%2 == 0 {
			out, err = c.StartManual(ctx, manualReq("count", 50, ""))
		} else {
			out, err = c.RunNow(ctx, "backfill", "")
		}
		switch {
		case err == nil && out.Status == StatusStarted:
			accepted++
		case errors.Is(err, ErrTooManyRuns):
			refused++
		default:
			t.Fatalf("manual run %d: %+v, %v", i, out, err)
		}
	}
	if accepted != 3 || refused != 37 {
		t.Fatalf("%d accepted, %d refused; want the app's cap of 3 accepted and the rest refused", accepted, refused)
	}
	// Only the runs now accepted took the scheduler lease (with the heartbeat's): the refused
	// ones never kept a heartbeat out.
	acquiresBefore := acquires.n.Load()
	if acquiresBefore > 1+2 {
		t.Errorf("%d attempts at the scheduler lease, want at most 3 (a heartbeat and the runs now accepted)", acquiresBefore)
	}

	out := e.heartbeat(c, "2026-11-21T10:00:10Z")
	run := occ("nightly", "2026-11-21T10:00:10Z")
	i := slices.IndexFunc(out.Decisions, func(d Decision) bool { return d.Run == run })
	if out.Status != StatusStarted || i < 0 || out.Decisions[i].Status != StatusStarted || out.Decisions[i].State != ledger.StatePlanning {
		t.Fatalf("the heartbeat at the occurrence: %+v; want %s started", out, run)
	}
	if m := e.manifest(run); m.Trigger != ledger.TriggerTimer || m.State != ledger.StatePlanning {
		t.Fatalf("the occurrence's record: %+v", m)
	}
	// Its start check is sent, due at the occurrence; ahead of it are one start check per
	// manual run accepted, no more.
	msgs := e.sender.messages()
	at := -1
	ahead := 0
	for j, m := range msgs {
		env, err := work.DecodeEnvelope(m.Body)
		if err != nil || env.Kind != work.KindCheck {
			continue
		}
		if env.Run == run {
			at = j
			if m.NotBefore.After(at2("2026-11-21T10:00:10Z")) {
				t.Errorf("the occurrence's start check is due %s, after its occurrence", m.NotBefore)
			}
			break
		}
		ahead++
	}
	if at < 0 || ahead != accepted {
		t.Fatalf("the occurrence's start check at %d with %d checks ahead; want it sent behind the %d manual runs' only", at, ahead, accepted)
	}
	e.deliverChecks(c)
	if m := e.manifest(run); !m.PlanDone || m.Partitions != 3 {
		t.Errorf("the occurrence after the checks were delivered: %+v; want it planned", m)
	}
}

// A manual run's Idempotency-Key names one request, across endpoints: the same job and params
// (as JSON values) answer its run; another job, other params, a run now with the key of an
// ad-hoc run, or a run now of another schedule are refused with ErrKeyReused, naming the run
// and what differs, and record nothing.
func TestIdempotencyKey_BoundToItsRequest(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	e.jobs.Register("other", &countJob{})
	c := e.instance("a", countSchedule("s", 1, config.OverlapAllow), countSchedule("t", 1, config.OverlapAllow))
	ctx := testCtx(t)

	first, err := c.StartManual(ctx, ManualRequest{Job: "count", Params: json.RawMessage(`{"n":2, "x":[1,2]}`), IdempotencyKey: "K"})
	if err != nil || first.Status != StatusStarted {
		t.Fatalf("first: %+v, %v", first, err)
	}
	same, err := c.StartManual(ctx, ManualRequest{Job: "count", Params: json.RawMessage(`{"x":[1,2],"n":2}`), IdempotencyKey: "K"})
	if err != nil || same.Status != StatusExisting || same.Run != first.Run {
		t.Errorf("the same request, its params spelt otherwise: %+v, %v; want %s existing", same, err, first.Run)
	}
	for _, c2 := range []struct {
		name string
		call func() (Outcome, error)
		want string
	}{
		{"other params", func() (Outcome, error) {
			return c.StartManual(ctx, ManualRequest{Job: "count", Params: json.RawMessage(`{"n":3}`), IdempotencyKey: "K"})
		}, "other params"},
		{"other job", func() (Outcome, error) {
			return c.StartManual(ctx, ManualRequest{Job: "other", Params: json.RawMessage(`{"n":2,"x":[1,2]}`), IdempotencyKey: "K"})
		}, `names job "other"`},
		{"a run now", func() (Outcome, error) { return c.RunNow(ctx, "s", "K") }, `this request is a run now of schedule "s"`},
	} {
		out, err := c2.call()
		if !errors.Is(err, ErrKeyReused) || out.Run != first.Run || !strings.Contains(err.Error(), first.Run) ||
			!strings.Contains(err.Error(), c2.want) || !strings.Contains(err.Error(), `an ad-hoc run of job "count"`) {
			t.Errorf("%s with the key of an ad-hoc run: %+v, %v; want ErrKeyReused naming %s and %q", c2.name, out, err, first.Run, c2.want)
		}
	}

	now, err := c.RunNow(ctx, "s", "L")
	if err != nil || now.Status != StatusStarted {
		t.Fatalf("a run now with L: %+v, %v", now, err)
	}
	if again, err := c.RunNow(ctx, "s", "L"); err != nil || again.Status != StatusExisting || again.Run != now.Run {
		t.Errorf("the same run now: %+v, %v; want %s existing", again, err, now.Run)
	}
	for _, c2 := range []struct {
		name string
		call func() (Outcome, error)
		want string
	}{
		{"an ad-hoc run", func() (Outcome, error) { return c.StartManual(ctx, manualReq("count", 1, "L")) }, `this request is an ad-hoc run of job "count"`},
		{"a run now of another schedule", func() (Outcome, error) { return c.RunNow(ctx, "t", "L") }, `this request is a run now of schedule "t"`},
	} {
		out, err := c2.call()
		if !errors.Is(err, ErrKeyReused) || out.Run != now.Run || !strings.Contains(err.Error(), `a run now of schedule "s"`) ||
			!strings.Contains(err.Error(), c2.want) {
			t.Errorf("%s with the key of a run now: %+v, %v; want ErrKeyReused naming %s and %q", c2.name, out, err, now.Run, c2.want)
		}
	}
	if ids := e.runIDs(); len(ids) != 2 {
		t.Errorf("runs %v, want the two the keys made", ids)
	}
}

// Two requests with one key that both found no run race to create it: the loser finds the
// winner's record at creation and compares it too.
func TestIdempotencyKey_ComparedWhenTheCreateLoses(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	c := e.instance("a")
	ctx := testCtx(t)
	first, err := c.StartManual(ctx, manualReq("count", 2, "K"))
	if err != nil {
		t.Fatal(err)
	}
	spec := runSpec{id: first.Run, trigger: ledger.TriggerManual, key: "K", job: "count", params: json.RawMessage(`{"n":3}`)}
	if out, err := c.open(ctx, spec, ledger.StatePlanning); !errors.Is(err, ErrKeyReused) || out.Run != first.Run {
		t.Errorf("a create that lost to another request's: %+v, %v; want ErrKeyReused", out, err)
	}
	spec.params = json.RawMessage(`{ "n" : 2 }`)
	if out, err := c.open(ctx, spec, ledger.StatePlanning); err != nil || out.Status != StatusExisting {
		t.Errorf("a create that lost to the same request: %+v, %v; want existing", out, err)
	}
}

// A run now recorded before manifests named their schedule is still the run now its ID names:
// the key's repeat answers it.
func TestIdempotencyKey_RecordWithoutSchedule(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	c := e.instance("a", countSchedule("s", 1, config.OverlapAllow))
	ctx := testCtx(t)
	id := ledger.ScheduleNowRunID("s", "old", time.Time{})
	m := ledger.Manifest{Version: ledger.ManifestVersion, RunID: id, Trigger: ledger.TriggerManual, IdempotencyKey: "old",
		Job: "count", Params: json.RawMessage(`{"n":1}`), State: ledger.StateSucceeded, Created: e.clock.Now()}
	if err := e.fake.CreateManifest(ctx, &m); err != nil {
		t.Fatal(err)
	}
	if out, err := c.RunNow(ctx, "s", "old"); err != nil || out.Status != StatusExisting || out.Run != id {
		t.Errorf("a repeat of an older run now: %+v, %v; want %s existing", out, err, id)
	}
}
