package api

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/ledger"
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
		l.put(manifest(coordinator.ManualRunID("k", t0), ledger.StateSucceeded, t0, 3))
		s := &fakeStarter{fn: func(req coordinator.ManualRequest) (coordinator.Outcome, error) {
			return coordinator.Outcome{Status: coordinator.StatusStarted, Run: coordinator.ManualRunID(req.IdempotencyKey, t0), State: ledger.StateRunning}, nil
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

// FuzzRunsQuery: whatever GET /api/runs's state, trigger, occurrences and limit, the reply is
// 200 with only matching runs and at most N occurrences, or 400 with the parameter's error
// code; it never panics.
func FuzzRunsQuery(f *testing.F) {
	f.Add("failed", "timer", "3", "5")
	f.Add("missed,skipped", "", "", "")
	f.Add("", "manual,timer", "100", "100")
	f.Add("done", "check", "0", "0")
	f.Add(",", ",", "-1", "x")
	f.Fuzz(func(t *testing.T, state, trigger, occurrences, limit string) {
		l := newFakeLedger()
		for i, st := range allStates {
			at := t0.Add(-time.Duration(i) * time.Hour)
			m := manifest(coordinator.TimerRunID(at), st, at, 2)
			m.Occurrence = at
			if i%2 == 1 {
				m.RunID, m.Trigger = coordinator.ManualRunID(string(st), at), ledger.TriggerManual
			}
			l.put(m)
		}
		s, err := coordinator.ParseSchedule("0 0 * * * *", nil)
		if err != nil {
			t.Fatal(err)
		}
		a, err := New(Config{Ledger: l, Leader: &fakeLeader{}, Now: func() time.Time { return t0.Add(time.Minute) },
			Schedule: &ScheduleConfig{Schedule: s, Overlap: "skip", Misfire: "skip", StartingDeadline: time.Hour}})
		if err != nil {
			t.Fatal(err)
		}
		q := map[string]string{"state": state, "trigger": trigger, "occurrences": occurrences, "limit": limit}
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
				if (len(f.states) > 0 && !f.states[run.State]) || (len(f.triggers) > 0 && !f.triggers[run.Trigger]) {
					t.Fatalf("%v: run %s (%s, %s) does not match", q, run.Run, run.State, run.Trigger)
				}
			}
			if n, _ := parseOccurrences(occurrences); occurrences != "" && len(v.Occurrences) != n {
				t.Fatalf("%v: %d occurrences", q, len(v.Occurrences))
			}
		case http.StatusBadRequest:
			var e ErrorBody
			if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" {
				t.Fatalf("error reply %s lacks a message", b)
			}
			switch e.Error.Code {
			case CodeInvalidState, CodeInvalidTrigger, CodeInvalidOccurrences, CodeInvalidLimit:
			default:
				t.Fatalf("%v: code %s", q, e.Error.Code)
			}
		default:
			t.Fatalf("%v: status %d %s", q, r.Status, b)
		}
	})
}
