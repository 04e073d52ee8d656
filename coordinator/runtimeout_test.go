package coordinator

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// twoTimeouts starts a run of "short", a job with a run timeout of 2 minutes, and one of
// "count", on the app's hour.
func twoTimeouts(t *testing.T) (e *schedEnv, c *Coordinator, short, long Outcome) {
	t.Helper()
	e = newSchedEnv(t, "2026-11-21T10:00:01Z")
	e.jobs.Register("short", &countJob{})
	e.jobs.SetRunTimeout("short", 2*time.Minute)
	c = e.instance("a")
	var err error
	if short, err = c.StartManual(testCtx(t), ManualRequest{Job: "short", Params: json.RawMessage(`{"n":3}`)}); err != nil {
		t.Fatal(err)
	}
	if long, err = c.StartManual(testCtx(t), ManualRequest{Job: "count", Params: json.RawMessage(`{"n":3}`)}); err != nil {
		t.Fatal(err)
	}
	return e, c, short, long
}

// A job with a run timeout of its own records it in each run it gets and takes its deadlines
// from it; every other job keeps the app's.
func TestRunTimeout_AJobsOwnGivesItsRunsTheirDeadlines(t *testing.T) {
	e, c, short, long := twoTimeouts(t)
	start := e.clock.Now()
	for _, w := range []struct {
		run string
		rt  time.Duration
	}{{short.Run, 2 * time.Minute}, {long.Run, time.Hour}} {
		m := e.manifest(w.run)
		if m.RunTimeout != w.rt || !m.Deadline.Equal(start.Add(w.rt)) || !m.Expires.Equal(start.Add(w.rt)) {
			t.Errorf("run %s of job %s: runTimeout %s, deadline %s, expires %s; want %s and both at start+%s",
				w.run, m.Job, m.RunTimeout, m.Deadline, m.Expires, w.rt, w.rt)
		}
	}
	// Planned, the short run's deadline and the spacing of its check rounds follow its own.
	e.clock.set(start.Add(time.Second))
	e.deliverChecks(c)
	for _, w := range []struct {
		run string
		rt  time.Duration
	}{{short.Run, 2 * time.Minute}, {long.Run, time.Hour}} {
		m := e.manifest(w.run)
		if !m.PlanDone {
			t.Fatalf("run %s not planned: %s", w.run, m.State)
		}
		retry := max(w.rt/2, c.checkDelay())
		wantExpires := m.Enqueued.Add(w.rt + 2*retry + c.checkDelay())
		if !m.Deadline.Equal(m.Enqueued.Add(w.rt)) || !m.Expires.Equal(wantExpires) || c.retryInterval(m) != retry {
			t.Errorf("planned run %s: deadline %s, expires %s, retry interval %s; want %s, %s, %s",
				w.run, m.Deadline, m.Expires, c.retryInterval(m), m.Enqueued.Add(w.rt), wantExpires, retry)
		}
	}
}

// Supervision times a run out by its own bound: a stalled run of the job with a 2-minute run
// timeout is timed out once that has passed, while a run of a job on the app's hour is planned.
func TestRunTimeout_SupervisionTimesARunOutByItsOwnBound(t *testing.T) {
	e, c, short, long := twoTimeouts(t)
	e.skipSent() // both start checks are lost: only the heartbeat moves the runs
	e.heartbeat(c, e.clock.Now().Add(2*time.Minute+time.Second).Format(time.RFC3339Nano))
	m := e.manifest(short.Run)
	if m.State != ledger.StateTimedOut || !strings.Contains(m.Reason, "2m0s") {
		t.Errorf("run of the 2-minute job after 2m1s: %s (%q), want timed out after its own 2m0s", m.State, m.Reason)
	}
	if m := e.manifest(long.Run); m.State.Final() || !m.PlanDone || !m.Deadline.Equal(m.Enqueued.Add(time.Hour)) {
		t.Errorf("run of the job on the app's timeout: %s, planned %v, deadline %s; want planned, an hour after %s",
			m.State, m.PlanDone, m.Deadline, m.Enqueued)
	}
	// A run recorded before runs kept their timeout has the app's.
	if got := c.runTimeout(ledger.Manifest{}); got != time.Hour {
		t.Errorf("run timeout of a run without one recorded: %s, want the app's 1h", got)
	}
}
