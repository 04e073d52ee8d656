package bench

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestCallKind(t *testing.T) {
	for _, tc := range []struct {
		method, target string
		header         map[string]string
		queue          bool
		want           string
	}{
		{http.MethodPost, "/devstoreaccount1/q-1/messages?messagettl=-1", nil, true, "queue enqueue"},
		{http.MethodGet, "/devstoreaccount1/q-1/messages?numofmessages=16", nil, true, "queue dequeue"},
		{http.MethodDelete, "/devstoreaccount1/q-1/messages/abc?popreceipt=x", nil, true, "queue delete"},
		{http.MethodPut, "/devstoreaccount1/q-1/messages/abc?popreceipt=x", nil, true, "queue update"},
		{http.MethodPut, "/devstoreaccount1/q-1", nil, true, "queue PUT other"},
		{http.MethodGet, "/devstoreaccount1/runs-1/manual-abc/manifest.json", nil, false, "blob GET manifest"},
		{http.MethodPut, "/devstoreaccount1/runs-1/manual-abc/report.json", nil, false, "blob PUT report"},
		{http.MethodPut, "/devstoreaccount1/runs-1/manual-abc/results/17.json", nil, false, "blob PUT result"},
		{http.MethodGet, "/devstoreaccount1/runs-1/manual-abc/partials/3.json", nil, false, "blob GET partial"},
		{http.MethodPut, "/devstoreaccount1/runs-1/manual-abc/plan/0.json", nil, false, "blob PUT plan"},
		{http.MethodPut, "/devstoreaccount1/runs-1/manual-abc/done/0?comp=appendblock", nil, false, "blob append done"},
		{http.MethodHead, "/devstoreaccount1/runs-1/manual-abc/done/0", nil, false, "blob HEAD done"},
		{http.MethodGet, "/devstoreaccount1/runs-1/_schedules/tick.json", nil, false, "blob GET schedule"},
		{http.MethodPut, "/devstoreaccount1/runs-1/_limits/crm.json", nil, false, "blob PUT limit"},
		{http.MethodPut, "/devstoreaccount1/lease-1/runs/tick-now-abc?comp=metadata", nil, false, "blob PUT metadata run lease"},
		{http.MethodGet, "/devstoreaccount1/runs-1?restype=container&comp=list&prefix=x", nil, false, "blob list"},
		{http.MethodPut, "/devstoreaccount1/lease-1/baton-leader?comp=lease", map[string]string{"x-ms-lease-action": "renew"}, false, "blob lease renew"},
		{http.MethodPut, "/devstoreaccount1/lease-1/baton-leader?comp=metadata", nil, false, "blob PUT metadata baton-leader"},
		{http.MethodPut, "/devstoreaccount1/runs-1?restype=container", nil, false, "blob PUT container"},
	} {
		r := httptest.NewRequest(tc.method, tc.target, nil)
		for k, v := range tc.header {
			r.Header.Set(k, v)
		}
		if got := callKind(r, tc.queue); got != tc.want {
			t.Errorf("callKind(%s %s) = %q, want %q", tc.method, tc.target, got, tc.want)
		}
	}
}

func TestCallsTable(t *testing.T) {
	total, line := callsTable(map[string]int64{"queue enqueue": 10, "blob GET manifest": 20}, 10)
	if total != 30 {
		t.Errorf("total = %d, want 30", total)
	}
	if want := " blob GET manifest 20 (2.0000); queue enqueue 10 (1.0000);"; line != want {
		t.Errorf("line = %q, want %q", line, want)
	}
}

// A block's PUT counts the partitions its members metadata names; a result's, one.
func TestResultParts(t *testing.T) {
	for _, tc := range []struct {
		path, members string
		kind          string
		parts         int
	}{
		{"/devstoreaccount1/runs-1/r/results/0000017.json", "", kindResult, 1},
		{"/devstoreaccount1/runs-1/r/results/0000256+256.json", strings.Repeat("ff", 32), kindBlock, 256},
		{"/devstoreaccount1/runs-1/r/results/0000008+8.json", "a1", kindBlock, 3},
		{"/devstoreaccount1/runs-1/r/results/0000008+8.json", "", kindBlock, 0},
	} {
		r := httptest.NewRequest(http.MethodPut, tc.path, nil)
		if tc.members != "" {
			r.Header.Set("x-ms-meta-members", tc.members)
		}
		if kind, n := resultParts(r); kind != tc.kind || n != tc.parts {
			t.Errorf("resultParts(%s, %q) = %s, %d; want %s, %d", tc.path, tc.members, kind, n, tc.kind, tc.parts)
		}
	}
}

// A limit write's answer is passed through with its status noted (a lost race is 412).
func TestStatusSniffer(t *testing.T) {
	rec := httptest.NewRecorder()
	s := &statusSniffer{ResponseWriter: rec}
	s.WriteHeader(http.StatusPreconditionFailed)
	if _, err := s.Write([]byte("no")); err != nil {
		t.Fatal(err)
	}
	if s.status != http.StatusPreconditionFailed || rec.Code != http.StatusPreconditionFailed || rec.Body.String() != "no" {
		t.Errorf("status %d, passed on %d %q; want 412 both, %q", s.status, rec.Code, rec.Body.String(), "no")
	}
}
