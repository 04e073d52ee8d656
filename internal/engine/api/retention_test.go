package api

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// deletedFlags is flags with "D" for an occurrence deleted by retention.
func deletedFlags(v map[string]any) string {
	out := []byte(flags(v))
	for i, x := range v["occurrences"].([]any) {
		if x.(map[string]any)["deleted"] == true {
			out[i] = 'D'
		}
	}
	return string(out)
}

// Retention deletes old records: the strip shows an occurrence without a record at or before
// the schedule's retained horizon as deleted by retention, never as a gap; one after it is
// still a gap. A record this process cached before its deletion is not shown, and the runs
// listing pages on without it.
func TestSchedules_Get_DeletedByRetention(t *testing.T) {
	now := time.Date(2026, 11, 25, 9, 1, 30, 0, time.UTC)
	e := newSchedEnv(t, now)
	hour := func(h int) time.Time { return time.Date(2026, 11, 25, 9-h, 0, 0, 0, time.UTC) }
	for h := 1; h <= 7; h++ {
		if h != 3 { // 06:00 left no record: a gap
			e.l.put(record("hourly", hour(h), ledger.StateSucceeded, ""))
		}
	}
	e.l.schedules["hourly"] = ledger.ScheduleState{Schedule: "hourly", Cursor: hour(1), Latest: ledger.ScheduleRunID("hourly", hour(1))}
	_, v := e.do(http.MethodGet, "hourly", map[string]string{"occurrences": "8"}, nil, "")
	if got := deletedFlags(v); got != "PSS-SSSS" {
		t.Fatalf("strip before retention = %s, want PSS-SSSS (newest first)", got)
	}
	list := func() []string {
		t.Helper()
		var ids []string
		for token := ""; ; {
			q := map[string]string{"limit": "3"}
			if token != "" {
				q["continuation"] = token
			}
			r := e.a.Runs(context.Background(), Request{Method: http.MethodGet, Query: q})
			if r.Status != http.StatusOK {
				t.Fatalf("GET /api/runs: %d %v", r.Status, r.JSON)
			}
			page := r.JSON.(ListReply)
			for _, rv := range page.Runs {
				ids = append(ids, rv.Run)
			}
			if token = page.Continuation; token == "" {
				return ids
			}
		}
	}
	if got := list(); len(got) != 6 {
		t.Fatalf("runs listed before retention: %v", got)
	}

	// The sweep moves the horizon to 04:00, then deletes 02:00 to 04:00 (records this process
	// has cached); 06:00, after the horizon, stays a gap.
	e.l.updateSchedule("hourly", func(st *ledger.ScheduleState) { st.Retained = hour(5) })
	e.l.mu.Lock()
	for _, h := range []int{5, 6, 7} {
		delete(e.l.manifests, ledger.ScheduleRunID("hourly", hour(h)))
	}
	e.l.mu.Unlock()
	_, v = e.do(http.MethodGet, "hourly", map[string]string{"occurrences": "8"}, nil, "")
	if got := deletedFlags(v); got != "PSS-SDDD" {
		t.Errorf("strip after retention = %s, want PSS-SDDD (newest first: 06:00 a gap, 02:00 to 04:00 deleted)", got)
	}
	if o := v["occurrences"].([]any)[5].(map[string]any); o["deleted"] != true || o["record"] != nil || o["beforeLedger"] == true {
		t.Errorf("04:00 = %v, want deleted, no record, not before the ledger", o)
	}
	if got := list(); len(got) != 3 {
		t.Errorf("runs listed after retention: %v, want the 3 left", got)
	}
	r := e.a.Runs(context.Background(), Request{Method: http.MethodGet, ID: ledger.ScheduleRunID("hourly", hour(5))})
	if r.Status != http.StatusNotFound {
		t.Errorf("GET of a deleted run: %d, want 404", r.Status)
	}
}
