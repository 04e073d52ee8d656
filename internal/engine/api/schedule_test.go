package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
)

// schedEnv is an API over a fake ledger and scheduler with three schedules, the clock at now:
// nightly (03:00 in Europe/Berlin, skip), hourly (UTC, buffer-one, 30 s jitter) and reports
// (09:30 on weekdays in America/New_York, allow, paused by the BATON_SCHEDULES setting).
type schedEnv struct {
	a      *API
	l      *fakeLedger
	s      *fakeScheduler
	leader *fakeLeader
	now    time.Time
}

func newSchedEnv(t *testing.T, now time.Time) *schedEnv {
	t.Helper()
	l := newFakeLedger()
	nightly := testSchedule(t, "nightly", "0 0 3 * * *", "Europe/Berlin")
	nightly.Params = json.RawMessage(`{"partitions":4}`)
	hourly := testSchedule(t, "hourly", "0 0 * * * *", "")
	hourly.Overlap, hourly.Jitter = config.OverlapBufferOne, 30*time.Second
	reports := testSchedule(t, "reports", "0 30 9 * * 1-5", "America/New_York")
	reports.Overlap, reports.CatchUp = config.OverlapAllow, 30*time.Minute
	reports.Paused, reports.PausedBy = true, "the app setting BATON_SCHEDULES"
	s := &fakeScheduler{l: l, now: now, schedules: []coordinator.Schedule{nightly, hourly, reports}}
	ld := &fakeLeader{st: election.LeaderState{Held: true, Holder: ledger.Holder{App: "app", Instance: "inst-a", PID: 7}, Epoch: 12}}
	a, err := New(Config{Ledger: l, Leader: ld, Scheduler: s, KeyWait: 200 * time.Millisecond, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return &schedEnv{a: a, l: l, s: s, leader: ld, now: now}
}

func (e *schedEnv) do(method, path string, query map[string]string, headers map[string][]string, body string) (Reply, map[string]any) {
	req := Request{Method: method, Path: path, Query: query, Headers: headers}
	if body != "" {
		req.Body = []byte(body)
	}
	r := e.a.Schedules(context.Background(), req)
	b, _ := json.Marshal(r.JSON)
	var v map[string]any
	_ = json.Unmarshal(b, &v)
	return r, v
}

// record is a schedule's record of occurrence occ in state.
func record(schedule string, occ time.Time, state ledger.State, reason string) ledger.Manifest {
	m := manifest(ledger.ScheduleRunID(schedule, occ), state, occ.Add(time.Second), 2)
	m.Occurrence, m.Reason, m.Schedule = occ, reason, schedule
	if state.Final() {
		m.Finished = occ.Add(5 * time.Second)
	}
	return m
}

// GET /api/schedules lists every schedule in declaration order: the expression in words, the
// zone, the next three occurrences in UTC and on the zone's wall clock (across a daylight
// saving change), the policies, the last run and the queued one, and both kinds of pause;
// ?occurrences=N adds each schedule's strip.
func TestSchedules_List(t *testing.T) {
	now := time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC) // Berlin switches to CEST on the 29th
	e := newSchedEnv(t, now)
	lastNightly := time.Date(2026, 3, 28, 2, 0, 0, 0, time.UTC) // 03:00 CET
	e.l.put(record("nightly", lastNightly, ledger.StateSucceeded, ""))
	e.l.schedules["nightly"] = ledger.ScheduleState{Schedule: "nightly", Cursor: lastNightly, Latest: ledger.ScheduleRunID("nightly", lastNightly),
		Paused: true, Note: "storage migration", PausedBy: "alice@contoso.com", PausedAt: now.Add(-time.Hour)}
	running := ledger.ScheduleNowRunID("hourly", "k", now)
	m := manifest(running, ledger.StateRunning, now.Add(-90*time.Minute), 3)
	m.Trigger = ledger.TriggerManual
	e.l.put(m)
	e.l.schedules["hourly"] = ledger.ScheduleState{Schedule: "hourly", Cursor: now, Latest: running, Buffered: ledger.ScheduleRunID("hourly", now)}

	r, v := e.do(http.MethodGet, "", nil, nil, "")
	if r.Status != http.StatusOK {
		t.Fatalf("%d %v", r.Status, v)
	}
	ss := v["schedules"].([]any)
	if len(ss) != 3 || v["now"] != "2026-03-28T12:00:00Z" {
		t.Fatalf("schedules = %v", v)
	}
	var names []string
	for _, x := range ss {
		names = append(names, x.(map[string]any)["name"].(string))
		if _, ok := x.(map[string]any)["occurrences"]; ok {
			t.Errorf("%v has occurrences without ?occurrences", x)
		}
	}
	if !slices.Equal(names, []string{"nightly", "hourly", "reports"}) {
		t.Errorf("names = %v, want the declaration order", names)
	}

	b, _ := json.Marshal(ss[0].(map[string]any)["next"])
	if want := `[{"local":"2026-03-29T03:00:00+02:00","utc":"2026-03-29T01:00:00Z","zone":"CEST"},` +
		`{"local":"2026-03-30T03:00:00+02:00","utc":"2026-03-30T01:00:00Z","zone":"CEST"},` +
		`{"local":"2026-03-31T03:00:00+02:00","utc":"2026-03-31T01:00:00Z","zone":"CEST"}]`; string(b) != want {
		t.Errorf("nightly next = %s\nwant           %s", b, want)
	}
	n := ss[0].(map[string]any)
	if n["expression"] != "0 0 3 * * *" || n["description"] != "at 03:00:00 every day" || n["timeZone"] != "Europe/Berlin" ||
		n["job"] != "synthetic" || fmt.Sprint(n["params"]) != "map[partitions:4]" || n["overlap"] != "skip" ||
		n["catchUp"] != "10m0s" || n["catchUpSeconds"] != float64(600) || n["jitterSeconds"] != float64(0) {
		t.Errorf("nightly = %v", n)
	}
	if n["paused"] != true || n["note"] != "storage migration" || n["pausedBy"] != "alice@contoso.com" ||
		n["pausedAt"] != "2026-03-28T11:00:00Z" || n["pausedBySetting"] != nil {
		t.Errorf("nightly's pause = %v", n)
	}
	if lr := n["lastRun"].(map[string]any); lr["run"] != ledger.ScheduleRunID("nightly", lastNightly) || lr["state"] != "succeeded" {
		t.Errorf("nightly lastRun = %v", lr)
	}
	h := ss[1].(map[string]any)
	if h["overlap"] != "buffer-one" || h["jitter"] != "30s" || h["jitterSeconds"] != float64(30) || h["paused"] != false ||
		h["queuedRun"] != ledger.ScheduleRunID("hourly", now) || h["lastRun"].(map[string]any)["state"] != "running" ||
		h["next"].([]any)[0].(map[string]any)["zone"] != "UTC" {
		t.Errorf("hourly = %v", h)
	}
	rp := ss[2].(map[string]any)
	if rp["paused"] != true || rp["pausedBySetting"] != "the app setting BATON_SCHEDULES" || rp["note"] != nil ||
		rp["lastRun"] != nil || rp["cursor"] != nil || rp["overlap"] != "allow" || rp["catchUpSeconds"] != float64(1800) {
		t.Errorf("reports = %v", rp)
	}
	if first := rp["next"].([]any)[0].(map[string]any); first["local"] != "2026-03-30T09:30:00-04:00" || first["zone"] != "EDT" {
		t.Errorf("reports next = %v, want Monday 09:30 EDT", first)
	}

	_, v = e.do(http.MethodGet, "", map[string]string{"occurrences": "5"}, nil, "")
	for _, x := range v["schedules"].([]any) {
		if occ := x.(map[string]any)["occurrences"].([]any); len(occ) != 5 {
			t.Errorf("%s: %d occurrences, want 5", x.(map[string]any)["name"], len(occ))
		}
	}
	for _, q := range []string{"-1", "31", "x"} {
		if r, v := e.do(http.MethodGet, "", map[string]string{"occurrences": q}, nil, ""); r.Status != http.StatusBadRequest || errCode(v) != CodeInvalidOccurrences {
			t.Errorf("occurrences=%s: %d %v, want 400 %s", q, r.Status, v, CodeInvalidOccurrences)
		}
	}
}

// flags renders a strip newest first: the record's state's initial (upper case), or P for
// pending, B before the schedule started, U undecided, - for none of them.
func flags(v map[string]any) string {
	out := ""
	for _, x := range v["occurrences"].([]any) {
		o := x.(map[string]any)
		switch {
		case o["record"] != nil:
			out += strings.ToUpper(o["record"].(map[string]any)["state"].(string)[:1])
		case o["pending"] == true:
			out += "P"
		case o["beforeLedger"] == true:
			out += "B"
		case o["undecided"] == true:
			out += "U"
		default:
			out += "-"
		}
	}
	return out
}

// GET /api/schedules/{name} adds the strip: each occurrence's record (skipped, missed, paused,
// queued, ...), and for one without: pending within one heartbeat plus the grace, undecided
// after the cursor and older, before the schedule started at or before the cursor and older
// than every record (or with no cursor yet), else a gap.
// Final records and known absences are read once per process; unfinished runs every time.
func TestSchedules_Get_OccurrenceStrip(t *testing.T) {
	now := time.Date(2026, 11, 25, 9, 1, 30, 0, time.UTC) // 90 s after the 09:00 occurrence
	e := newSchedEnv(t, now)
	hour := func(h int) time.Time { return time.Date(2026, 11, 25, 9-h, 0, 0, 0, time.UTC) }

	// Before the schedule's first heartbeat: no state; the just-due occurrence is pending, the
	// rest before the schedule started.
	r, v := e.do(http.MethodGet, "hourly", map[string]string{"occurrences": "4"}, nil, "")
	if r.Status != http.StatusOK || flags(v) != "PBBB" {
		t.Fatalf("no state: %d %s %v, want PBBB", r.Status, flags(v), v)
	}
	if o := v["occurrences"].([]any)[0].(map[string]any); o["occurrence"] != "2026-11-25T09:00:00Z" || o["run"] != "hourly-20261125t090000z" ||
		o["local"] != "2026-11-25T09:00:00Z" {
		t.Errorf("newest occurrence = %v", o)
	}

	// The cursor at 05:00 (the schedule started at 03:30); 04:00 and 05:00 decided, 06:00 to
	// 08:00 not (the scheduler stopped).
	e.l.schedules["hourly"] = ledger.ScheduleState{Schedule: "hourly", Cursor: hour(4), Latest: ledger.ScheduleRunID("hourly", hour(4))}
	e.l.put(record("hourly", hour(4), ledger.StateQueued, ""))
	e.l.put(record("hourly", hour(5), ledger.StateRunning, ""))
	_, v = e.do(http.MethodGet, "hourly", map[string]string{"occurrences": "8"}, nil, "")
	if got := flags(v); got != "PUUUQRBB" {
		t.Errorf("strip = %s, want PUUUQRBB (newest first)", got)
	}
	for _, c := range []struct {
		state ledger.State
		at    int
	}{{ledger.StateSkipped, 1}, {ledger.StateMissed, 2}, {ledger.StatePaused, 3}} {
		e.l.put(record("hourly", hour(c.at), c.state, "reason "+string(c.state)))
	}
	e.l.schedules["hourly"] = ledger.ScheduleState{Schedule: "hourly", Cursor: hour(1)}
	_, v = e.do(http.MethodGet, "hourly", map[string]string{"occurrences": "8"}, nil, "")
	if got := flags(v); got != "PSMPQRBB" {
		t.Errorf("strip = %s, want PSMPQRBB", got)
	}
	if rec := v["occurrences"].([]any)[2].(map[string]any)["record"].(map[string]any); rec["reason"] != "reason missed" {
		t.Errorf("missed record = %v, want its reason", rec)
	}
	// A record older than a record-less occurrence makes that one a gap, not before the start.
	e.l.put(record("hourly", hour(9), ledger.StateSucceeded, ""))
	_, v = e.do(http.MethodGet, "hourly", map[string]string{"occurrences": "10"}, nil, "")
	if got := flags(v); got != "PSMPQR---S" {
		t.Errorf("strip = %s, want PSMPQR---S", got)
	}

	// Reads: the final records and the absences once; the queued and running ones again.
	reads := func() map[string]int {
		e.l.mu.Lock()
		defer e.l.mu.Unlock()
		m := map[string]int{}
		for k, n := range e.l.reads {
			m[k] = n
		}
		return m
	}
	before := reads()
	e.do(http.MethodGet, "hourly", map[string]string{"occurrences": "8"}, nil, "")
	after := reads()
	for h := range 8 {
		id := ledger.ScheduleRunID("hourly", hour(h))
		again := after[id] > before[id]
		if want := h == 0 || h == 4 || h == 5; again != want {
			t.Errorf("occurrence %s read again: %v, want %v", id, again, want)
		}
	}

	// The heartbeat counts: with a 5-minute heartbeat, an occurrence 5½ minutes old is still
	// pending.
	slow, err := New(Config{Ledger: e.l, Leader: e.leader, Scheduler: e.s, Heartbeat: 5 * time.Minute,
		Now: func() time.Time { return hour(0).Add(5*time.Minute + 30*time.Second) }})
	if err != nil {
		t.Fatal(err)
	}
	r = slow.Schedules(context.Background(), Request{Method: http.MethodGet, Path: "hourly", Query: map[string]string{"occurrences": "1"}})
	if occ := r.JSON.(ScheduleView).Occurrences; len(occ) != 1 || !occ[0].Pending {
		t.Errorf("5½ minutes after 09:00 with a 5-minute heartbeat: %+v, want pending", occ)
	}

	// Default and bounds of ?occurrences.
	_, v = e.do(http.MethodGet, "hourly", nil, nil, "")
	if n := len(v["occurrences"].([]any)); n != DefaultOccurrences {
		t.Errorf("default strip has %d occurrences, want %d", n, DefaultOccurrences)
	}
	_, v = e.do(http.MethodGet, "hourly", map[string]string{"occurrences": "100"}, nil, "")
	if n := len(v["occurrences"].([]any)); n != 100 {
		t.Errorf("occurrences=100: %d", n)
	}
	for _, q := range []string{"0", "101", "ten", "-1"} {
		if r, v := e.do(http.MethodGet, "hourly", map[string]string{"occurrences": q}, nil, ""); r.Status != http.StatusBadRequest || errCode(v) != CodeInvalidOccurrences {
			t.Errorf("occurrences=%s: %d %v, want 400 %s", q, r.Status, v, CodeInvalidOccurrences)
		}
	}
}

// An occurrence's local time is on the schedule's wall clock.
func TestSchedules_Get_LocalTimes(t *testing.T) {
	now := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	e := newSchedEnv(t, now)
	_, v := e.do(http.MethodGet, "nightly", map[string]string{"occurrences": "1"}, nil, "")
	o := v["occurrences"].([]any)[0].(map[string]any)
	if o["occurrence"] != "2026-07-01T01:00:00Z" || o["local"] != "2026-07-01T03:00:00+02:00" || o["run"] != "nightly-20260701t010000z" {
		t.Errorf("occurrence = %v", o)
	}
}

// Unknown schedules and endpoints are 404 with the JSON error (naming the declared schedules);
// a wrong method is 405 with Allow; no scheduler is 503; a storage failure is 502.
func TestSchedules_Errors(t *testing.T) {
	e := newSchedEnv(t, t0)
	cases := []struct {
		method, path string
		status       int
		code         string
		allow        string
	}{
		{http.MethodGet, "weekly", 404, CodeNotFound, ""},
		{http.MethodGet, "Nightly", 404, CodeNotFound, ""},
		{http.MethodGet, "../leases", 404, CodeNotFound, ""},
		{http.MethodPost, "weekly/runs", 404, CodeNotFound, ""},
		{http.MethodPost, "weekly/pause", 404, CodeNotFound, ""},
		{http.MethodGet, "nightly/bogus", 404, CodeNotFound, ""},
		{http.MethodGet, "nightly/runs/x", 404, CodeNotFound, ""},
		{http.MethodPost, "", 405, CodeMethodNotAllowed, "GET"},
		{http.MethodDelete, "nightly", 405, CodeMethodNotAllowed, "GET"},
		{http.MethodGet, "nightly/runs", 405, CodeMethodNotAllowed, "POST"},
		{http.MethodGet, "nightly/pause", 405, CodeMethodNotAllowed, "POST"},
		{http.MethodPut, "nightly/resume", 405, CodeMethodNotAllowed, "POST"},
	}
	for _, c := range cases {
		r, v := e.do(c.method, c.path, nil, nil, "")
		if r.Status != c.status || errCode(v) != c.code || r.Headers["Allow"] != c.allow {
			t.Errorf("%s %q: %d %v %v, want %d %s Allow %q", c.method, c.path, r.Status, v, r.Headers, c.status, c.code, c.allow)
		}
	}
	if _, v := e.do(http.MethodGet, "weekly", nil, nil, ""); !strings.Contains(v["error"].(map[string]any)["message"].(string), "nightly, hourly, reports") {
		t.Errorf("404 message %v does not list the declared schedules", v)
	}
	if len(e.s.called()) != 0 {
		t.Errorf("the scheduler was called: %v", e.s.called())
	}

	none := newTestAPI(t, newFakeLedger(), nil, nil)
	if r := none.Schedules(context.Background(), Request{Method: http.MethodGet}); r.Status != http.StatusServiceUnavailable {
		t.Errorf("without a scheduler: %d, want 503", r.Status)
	}

	e.l.scheduleErr = fmt.Errorf("read schedule: %w", ledger.ErrUnavailable)
	for _, p := range []string{"", "nightly"} {
		if r, v := e.do(http.MethodGet, p, nil, nil, ""); r.Status != http.StatusBadGateway || errCode(v) != CodeStorage {
			t.Errorf("GET %q with storage down: %d %v, want 502 %s", p, r.Status, v, CodeStorage)
		}
	}
}

// POST /api/schedules/{name}/runs: 202 with the run and its Location when started or queued,
// 200 for a repeated key, 409 while the overlap policy refuses (with the run in progress and
// the leader), 503 with Retry-After while the scheduler lease stays busy (200 instead when the
// key's run appears meanwhile), 400 for a misconfigured job, a bad key or a body, 413, 404.
func TestSchedules_RunNow(t *testing.T) {
	e := newSchedEnv(t, t0)
	var outcome coordinator.Outcome
	var outErr error
	e.s.runNow = func(schedule, key string) (coordinator.Outcome, error) {
		o := outcome
		if o.Run == "" {
			o.Run = ledger.ScheduleNowRunID(schedule, key, t0)
		}
		return o, outErr
	}
	post := func(key, body string) (Reply, map[string]any) {
		var h map[string][]string
		if key != "" {
			h = map[string][]string{"Idempotency-Key": {key}}
		}
		return e.do(http.MethodPost, "nightly/runs", nil, h, body)
	}

	outcome = coordinator.Outcome{Status: coordinator.StatusStarted, State: ledger.StatePlanning, Epoch: 4}
	r, v := post("k1", "")
	id := ledger.ScheduleNowRunID("nightly", "k1", t0)
	if r.Status != http.StatusAccepted || v["run"] != id || v["status"] != "started" || v["state"] != "planning" || v["schedule"] != "nightly" ||
		r.Headers["Location"] != "/api/runs/"+id {
		t.Errorf("started: %d %v %v", r.Status, v, r.Headers)
	}
	if calls := e.s.called(); len(calls) != 1 || calls[0] != "runs nightly k1" {
		t.Errorf("calls = %q", calls)
	}
	outcome = coordinator.Outcome{Status: coordinator.StatusQueued, State: ledger.StateQueued}
	if r, v := post("", "{}"); r.Status != http.StatusAccepted || v["status"] != "queued" || v["state"] != "queued" {
		t.Errorf("queued: %d %v", r.Status, v)
	}
	outcome = coordinator.Outcome{Status: coordinator.StatusExisting, State: ledger.StateSucceeded}
	if r, v := post("k1", ""); r.Status != http.StatusOK || v["status"] != "existing" || v["run"] != id || r.Headers["Location"] != "/api/runs/"+id {
		t.Errorf("existing: %d %v", r.Status, v)
	}

	active := ledger.ScheduleRunID("nightly", t0.Add(-time.Hour))
	outcome, outErr = coordinator.Outcome{Status: coordinator.StatusSkipped, State: ledger.StateSkipped, ActiveRun: active,
		Reason: "run " + active + " is still in progress (overlap policy: skip)"}, coordinator.ErrRunInProgress
	r, v = post("", "")
	l, _ := v["leader"].(map[string]any)
	if r.Status != http.StatusConflict || errCode(v) != CodeConflict || v["activeRun"] != active || l == nil || l["epoch"] != float64(12) ||
		!strings.Contains(v["error"].(map[string]any)["message"].(string), "overlap policy: skip") {
		t.Errorf("in progress: %d %v", r.Status, v)
	}

	// The key's own run is the one in progress (a retry racing the first request): that run.
	outcome.Run = ledger.ScheduleNowRunID("nightly", "k3", t0)
	e.l.put(manifest(outcome.Run, ledger.StatePlanning, t0, 0))
	if r, v := post("k3", ""); r.Status != http.StatusOK || v["status"] != "existing" || v["run"] != outcome.Run {
		t.Errorf("in progress, the key's run: %d %v", r.Status, v)
	}

	holder := ledger.Holder{App: "app", Instance: "inst-b", PID: 9}
	outcome, outErr = coordinator.Outcome{Status: coordinator.StatusHeld, Holder: holder, HolderEpoch: 13}, fmt.Errorf("%w: held", coordinator.ErrSchedulerBusy)
	r, v = post("", "")
	l, _ = v["leader"].(map[string]any)
	if r.Status != http.StatusServiceUnavailable || errCode(v) != CodeSchedulerBusy || r.Headers["Retry-After"] != "5" || l == nil ||
		l["holder"].(map[string]any)["instance"] != "inst-b" || l["epoch"] != float64(13) {
		t.Errorf("busy: %d %v %v", r.Status, v, r.Headers)
	}
	// Busy, but another request with the key, holding the lease, made the run: that run, 200.
	keyed := ledger.ScheduleNowRunID("nightly", "k2", t0)
	e.l.put(manifest(keyed, ledger.StatePlanning, t0, 0))
	if r, v := post("k2", ""); r.Status != http.StatusOK || v["run"] != keyed || v["status"] != "existing" {
		t.Errorf("busy with the key's run appearing: %d %v", r.Status, v)
	}

	outcome, outErr = coordinator.Outcome{}, fmt.Errorf("%w: the schedule's job is misconfigured: BATON_JOB_PARAMS: bad", coordinator.ErrBadRequest)
	if r, v := post("", ""); r.Status != http.StatusBadRequest || errCode(v) != CodeBadRequest || !strings.Contains(v["error"].(map[string]any)["message"].(string), "BATON_JOB_PARAMS") {
		t.Errorf("misconfigured job: %d %v", r.Status, v)
	}
	outErr = fmt.Errorf("%w: %q", coordinator.ErrUnknownSchedule, "nightly")
	if r, v := post("", ""); r.Status != http.StatusNotFound || errCode(v) != CodeNotFound {
		t.Errorf("unknown to the coordinator: %d %v", r.Status, v)
	}
	outErr = fmt.Errorf("create manifest: %w", ledger.ErrUnavailable)
	if r, v := post("", ""); r.Status != http.StatusBadGateway || errCode(v) != CodeStorage {
		t.Errorf("storage down: %d %v", r.Status, v)
	}

	calls := len(e.s.called())
	for _, c := range []struct {
		name, key, body string
		status          int
		code            string
	}{
		{"a job in the body", "", `{"job":"synthetic"}`, 400, CodeBadRequest},
		{"not JSON", "", `run`, 400, CodeBadRequest},
		{"trailing data", "", `{} {}`, 400, CodeBadRequest},
		{"bad key", "k\x01", "", 400, CodeInvalidKey},
		{"oversize body", "", `{"pad":"` + strings.Repeat("x", MaxBodyBytes) + `"}`, 413, CodeTooLarge},
	} {
		if r, v := post(c.key, c.body); r.Status != c.status || errCode(v) != c.code {
			t.Errorf("%s: %d %v, want %d %s", c.name, r.Status, v, c.status, c.code)
		}
	}
	if len(e.s.called()) != calls {
		t.Errorf("bad requests reached the scheduler: %v", e.s.called()[calls:])
	}
}

// POST /api/schedules/{name}/pause with a note pauses it as the caller App Service
// authentication names (else "a function key holder") and answers with the schedule's view;
// resume undoes it. A schedule paused by the BATON_SCHEDULES setting cannot be resumed here:
// 409 naming the setting. Bad bodies are 400 and reach nothing.
func TestSchedules_PauseResume(t *testing.T) {
	e := newSchedEnv(t, t0)
	who := map[string][]string{"x-ms-client-principal-name": {"alice@contoso.com"}}
	r, v := e.do(http.MethodPost, "nightly/pause", nil, who, `{"note":"storage migration until 14:00"}`)
	if r.Status != http.StatusOK || v["name"] != "nightly" || v["paused"] != true || v["note"] != "storage migration until 14:00" ||
		v["pausedBy"] != "alice@contoso.com" || v["pausedAt"] != t0.Format(time.RFC3339) || v["occurrences"] != nil {
		t.Errorf("pause: %d %v", r.Status, v)
	}
	_, v = e.do(http.MethodGet, "", nil, nil, "")
	if n := v["schedules"].([]any)[0].(map[string]any); n["paused"] != true || n["note"] != "storage migration until 14:00" {
		t.Errorf("the list after pause: %v", n)
	}
	r, v = e.do(http.MethodPost, "nightly/resume", nil, nil, "")
	if r.Status != http.StatusOK || v["paused"] != false || v["note"] != nil || v["pausedBy"] != nil {
		t.Errorf("resume: %d %v", r.Status, v)
	}
	if r, v := e.do(http.MethodPost, "hourly/pause", nil, nil, ""); r.Status != http.StatusOK || v["paused"] != true || v["pausedBy"] != AnonymousOperator {
		t.Errorf("pause without a note or a principal: %d %v", r.Status, v)
	}
	long := strings.Repeat("é", coordinator.MaxPauseNote) // 500 characters, 1,000 bytes
	// The principal's control characters are escaped, visibly, and the whole cut to its bound.
	messy := `bob\u0000\u000a` + strings.Repeat("b", MaxPrincipalLength-15)
	if r, v := e.do(http.MethodPost, "hourly/pause", nil, map[string][]string{PrincipalHeader: {" bob\x00\n" + strings.Repeat("b", 300)}},
		`{"note":"`+long+`"}`); r.Status != http.StatusOK || v["note"] != long || v["pausedBy"] != messy {
		t.Errorf("a 500-character note, a messy principal: %d %v", r.Status, v["pausedBy"])
	}
	want := []string{"pause nightly storage migration until 14:00 by alice@contoso.com", "resume nightly by " + AnonymousOperator,
		"pause hourly  by " + AnonymousOperator, "pause hourly " + long + " by " + messy}
	if got := e.s.called(); !slices.Equal(got, want) {
		t.Errorf("calls:\n%q\nwant\n%q", got, want)
	}

	r, v = e.do(http.MethodPost, "reports/resume", nil, nil, "")
	if r.Status != http.StatusConflict || errCode(v) != CodeConflict || !strings.Contains(v["error"].(map[string]any)["message"].(string), "BATON_SCHEDULES") {
		t.Errorf("resume of a schedule paused by the setting: %d %v", r.Status, v)
	}
	for _, c := range []struct{ path, body, want string }{
		{"nightly/pause", `{"note":"` + long + `x"}`, "501 characters"},
		{"nightly/pause", `{"note":"a","by":"mallory"}`, "unknown field"},
		{"nightly/pause", `{"note":7}`, "body"},
		{"nightly/pause", `"maintenance"`, "JSON object"},
		{"nightly/pause", `{"note":"a"} {}`, "after the JSON object"},
		{"nightly/resume", `{"note":"a"}`, "unknown field"},
	} {
		if r, v := e.do(http.MethodPost, c.path, nil, nil, c.body); r.Status != http.StatusBadRequest || errCode(v) != CodeBadRequest ||
			!strings.Contains(v["error"].(map[string]any)["message"].(string), c.want) {
			t.Errorf("%s %s: %d %v, want 400 saying %q", c.path, c.body, r.Status, v, c.want)
		}
	}
	if r, _ := e.do(http.MethodPost, "nightly/pause", nil, nil, strings.Repeat(" ", MaxBodyBytes+1)); r.Status != http.StatusRequestEntityTooLarge {
		t.Errorf("oversize pause body: %d", r.Status)
	}
	if got := len(e.s.called()); got != len(want) {
		t.Errorf("refused requests reached the scheduler: %q", e.s.called()[len(want):])
	}

	e.s.err = fmt.Errorf("update schedule: %w", ledger.ErrUnavailable)
	for _, p := range []string{"nightly/pause", "nightly/resume"} {
		if r, v := e.do(http.MethodPost, p, nil, nil, ""); r.Status != http.StatusBadGateway || errCode(v) != CodeStorage {
			t.Errorf("%s with storage down: %d %v", p, r.Status, v)
		}
	}
	e.s.err = fmt.Errorf("%w: the note is not valid UTF-8", coordinator.ErrBadRequest)
	if r, v := e.do(http.MethodPost, "nightly/pause", nil, nil, ""); r.Status != http.StatusBadRequest || errCode(v) != CodeBadRequest {
		t.Errorf("the coordinator refuses the note: %d %v", r.Status, v)
	}
}

// A schedule with auto-pause shows its threshold and its streak of failed runs; paused by it,
// it says so (pausedAutomatically, pausedBy "auto-pause", the note naming the runs) until a
// resume, which clears the streak.
func TestSchedules_AutoPause(t *testing.T) {
	e := newSchedEnv(t, t0)
	e.s.schedules[0].AutoPause = 3
	runs := []string{"nightly-20261118t020000z", "nightly-20261119t020000z", "nightly-20261120t020000z"}
	note := "paused automatically after 3 consecutive runs failed or timed out: " + runs[0] + " (failed), " + runs[1] + " (timed-out), " + runs[2] + " (failed)"
	e.l.schedules["nightly"] = ledger.ScheduleState{Schedule: "nightly", Cursor: t0, Paused: true, Note: note, PausedBy: ledger.AutoPauseBy,
		PausedAt: t0, Counted: runs[2], Streak: []ledger.StreakRun{
			{Run: runs[0], State: ledger.StateFailed}, {Run: runs[1], State: ledger.StateTimedOut}, {Run: runs[2], State: ledger.StateFailed}}}
	e.l.schedules["hourly"] = ledger.ScheduleState{Schedule: "hourly", Cursor: t0, Streak: []ledger.StreakRun{{Run: "hourly-x", State: ledger.StateFailed}}}
	_, v := e.do(http.MethodGet, "", nil, nil, "")
	list := v["schedules"].([]any)
	n, h := list[0].(map[string]any), list[1].(map[string]any)
	streak, _ := json.Marshal(n["streak"])
	wantStreak := `[{"run":"` + runs[0] + `","state":"failed"},{"run":"` + runs[1] + `","state":"timed-out"},{"run":"` + runs[2] + `","state":"failed"}]`
	if n["autoPause"] != float64(3) || n["paused"] != true || n["pausedAutomatically"] != true || n["pausedBy"] != "auto-pause" ||
		n["note"] != note || string(streak) != wantStreak {
		t.Errorf("nightly paused automatically: %v", n)
	}
	if _, ok := h["autoPause"]; ok || h["pausedAutomatically"] != nil || h["paused"] != false || len(h["streak"].([]any)) != 1 {
		t.Errorf("hourly, no auto-pause, one failed run: %v", h)
	}
	r, v := e.do(http.MethodPost, "nightly/resume", nil, nil, "")
	if r.Status != http.StatusOK || v["paused"] != false || v["pausedAutomatically"] != nil || v["streak"] != nil || v["autoPause"] != float64(3) {
		t.Errorf("resume: %d %v", r.Status, v)
	}
}
