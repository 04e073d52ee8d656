package api

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/engine/ledger"
)

// FuzzRuns: whatever the request, the Runs endpoint answers (never panics) with a status of
// 200–599; every 4xx/5xx carries {"error":{"code","message"}}; an invalid run ID never reaches
// storage as a path (400), and an oversize POST is 413.
func FuzzRuns(f *testing.F) {
	f.Add("GET", "", "", "", "", []byte(nil))
	f.Add("GET", "tick-20261121t100000z", "", "", "", []byte(nil))
	f.Add("GET", "../leases/leader", "", "", "", []byte(nil))
	f.Add("GET", "", "5", "eyJ2IjoxLCJ0IjoxLCJpZCI6InRpY2stMSJ9", "", []byte(nil))
	f.Add("POST", "", "", "", "k", []byte(`{"job":"synthetic","params":{"partitions":3}}`))
	f.Add("POST", "", "", "", "", []byte(`{"params":{}}`))
	f.Add("DELETE", "x", "0", "!", "\x00", []byte(`[]`))
	f.Fuzz(func(t *testing.T, method, id, limit, continuation, key string, body []byte) {
		l := newFakeLedger()
		l.put(manifest("tick-20261121t100000z", ledger.StateRunning, t0, 3))
		l.put(manifest(ledger.ManualRunID("k", t0), ledger.StateSucceeded, t0, 3))
		s := &fakeStarter{fn: func(req coordinator.ManualRequest) (coordinator.Outcome, error) {
			return coordinator.Outcome{Status: coordinator.StatusStarted, Run: ledger.ManualRunID(req.IdempotencyKey, t0), State: ledger.StateRunning}, nil
		}}
		a, err := New(Config{Starter: s, Ledger: l, Leader: &fakeLeader{}, KeyWait: -1})
		if err != nil {
			t.Fatal(err)
		}
		req := Request{Method: method, ID: id, Query: map[string]string{"limit": limit, "continuation": continuation}, Body: body}
		if key != "" {
			req.Headers = map[string][]string{"Idempotency-Key": {key}}
		}
		r := a.Runs(context.Background(), req)
		if r.Status < 200 || r.Status > 599 {
			t.Fatalf("status %d", r.Status)
		}
		b, err := json.Marshal(r.JSON)
		if err != nil {
			t.Fatalf("reply does not encode: %v", err)
		}
		if r.Status >= 400 {
			var e ErrorBody
			if err := json.Unmarshal(b, &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
				t.Fatalf("error reply %s lacks code or message", b)
			}
		}
		if method == http.MethodGet && id != "" && ledger.ValidateRunID(id) != nil && r.Status != http.StatusBadRequest {
			t.Fatalf("GET invalid ID %q: status %d, want 400", id, r.Status)
		}
		if method == http.MethodPost && id == "" && len(body) > MaxBodyBytes && r.Status != http.StatusRequestEntityTooLarge {
			t.Fatalf("POST of %d bytes: status %d, want 413", len(body), r.Status)
		}
		for run, n := range l.reads {
			if ledger.ValidateRunID(run) != nil && n > 0 {
				t.Fatalf("storage was asked for invalid run %q", run)
			}
		}
	})
}

// FuzzRunsQuery: whatever GET /api/runs's state, trigger, schedule and limit, the reply is 200
// with only matching runs, or 400 with the parameter's error code; it never panics.
func FuzzRunsQuery(f *testing.F) {
	f.Add("failed", "timer", "tick", "5")
	f.Add("missed,skipped", "", "", "")
	f.Add("", "manual,timer", "nightly,tick", "100")
	f.Add("done", "check", "Nightly", "0")
	f.Add(",", ",", ",", "x")
	f.Fuzz(func(t *testing.T, state, trigger, schedule, limit string) {
		l := newFakeLedger()
		for i, st := range allStates {
			at := t0.Add(-time.Duration(i) * time.Hour)
			m := manifest(tickRunID(at), st, at, 2)
			m.Occurrence = at
			switch i % 3 {
			case 1:
				m.RunID, m.Trigger = ledger.ManualRunID(string(st), at), ledger.TriggerManual
			case 2:
				m.RunID, m.Trigger = ledger.ScheduleNowRunID("nightly", "", at), ledger.TriggerManual
			}
			l.put(m)
		}
		a := newTestAPI(t, l, nil, nil)
		q := map[string]string{"state": state, "trigger": trigger, "schedule": schedule, "limit": limit}
		r := a.Runs(context.Background(), Request{Method: http.MethodGet, Query: q})
		b, err := json.Marshal(r.JSON)
		if err != nil {
			t.Fatalf("reply does not encode: %v", err)
		}
		switch r.Status {
		case http.StatusOK:
			var v ListReply
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatal(err)
			}
			f, _ := parseFilter(Request{Query: q})
			for _, run := range v.Runs {
				n, _ := ledger.ParseRunID(run.Run)
				if (len(f.states) > 0 && !f.states[run.State]) || (len(f.triggers) > 0 && !f.triggers[run.Trigger]) ||
					(len(f.schedules) > 0 && !f.schedules[n.Schedule]) {
					t.Fatalf("%v: run %s (%s, %s) does not match", q, run.Run, run.State, run.Trigger)
				}
			}
		case http.StatusBadRequest:
			var e ErrorBody
			if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" {
				t.Fatalf("error reply %s lacks a message", b)
			}
			switch e.Error.Code {
			case CodeInvalidState, CodeInvalidTrigger, CodeInvalidSchedule, CodeInvalidLimit:
			default:
				t.Fatalf("%v: code %s", q, e.Error.Code)
			}
		default:
			t.Fatalf("%v: status %d %s", q, r.Status, b)
		}
	})
}

// FuzzSchedules: whatever the method, path, query, headers and body, the Schedules endpoint
// answers (never panics) with a status of 200–599 and a JSON error body on 4xx/5xx; only a
// POST to a declared schedule's action reaches the scheduler, and a pause note over the limit
// never does.
func FuzzSchedules(f *testing.F) {
	f.Add("GET", "", "", "", "", []byte(nil))
	f.Add("GET", "nightly", "5", "", "", []byte(nil))
	f.Add("POST", "nightly/runs", "", "k", "", []byte(nil))
	f.Add("POST", "nightly/pause", "", "", "alice@contoso.com", []byte(`{"note":"maintenance"}`))
	f.Add("POST", "nightly/resume", "", "", "", []byte(`{}`))
	f.Add("POST", "hourly/resume", "", "", "\x00", []byte(`{"x":1}`))
	f.Add("DELETE", "../x/pause", "-1", "\x00", "", []byte(`[]`))
	f.Fuzz(func(t *testing.T, method, path, occurrences, key, who string, body []byte) {
		l := newFakeLedger()
		now := t0.Add(90 * time.Minute)
		hourly := testSchedule(t, "hourly", "0 0 * * * *", "")
		hourly.Paused, hourly.PausedBy = true, "the app setting BATON_SCHEDULES"
		s := &fakeScheduler{l: l, now: now, schedules: []coordinator.Schedule{testSchedule(t, "nightly", "0 0 3 * * *", "Europe/Berlin"), hourly},
			runNow: func(schedule, key string) (coordinator.Outcome, error) {
				return coordinator.Outcome{Status: coordinator.StatusStarted, Run: ledger.ScheduleNowRunID(schedule, key, now), State: ledger.StatePlanning}, nil
			}}
		a, err := New(Config{Ledger: l, Leader: &fakeLeader{}, Scheduler: s, KeyWait: -1, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		req := Request{Method: method, Path: path, Query: map[string]string{"occurrences": occurrences}, Body: body,
			Headers: map[string][]string{PrincipalHeader: {who}}}
		if key != "" {
			req.Headers["Idempotency-Key"] = []string{key}
		}
		r := a.Schedules(context.Background(), req)
		if r.Status < 200 || r.Status > 599 {
			t.Fatalf("status %d", r.Status)
		}
		b, err := json.Marshal(r.JSON)
		if err != nil {
			t.Fatalf("reply does not encode: %v", err)
		}
		if r.Status >= 400 {
			var e ErrorBody
			if err := json.Unmarshal(b, &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
				t.Fatalf("error reply %s lacks code or message", b)
			}
		}
		calls := s.called()
		name, action, ok := schedulePath(path)
		if len(calls) > 0 && (!ok || method != http.MethodPost || action == "" || (name != "nightly" && name != "hourly")) {
			t.Fatalf("%s %q reached the scheduler: %v", method, path, calls)
		}
		if action == actionResume && name == "hourly" && r.Status < 400 {
			t.Fatalf("resume of a schedule paused by a setting: status %d", r.Status)
		}
		if n, err := decodePause(body); action == actionPause && err != nil && len(calls) > 0 {
			t.Fatalf("a bad pause body (%v) reached the scheduler with note of %d bytes", err, len(n.Note))
		}
	})
}
