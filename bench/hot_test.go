package bench

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestCallEntity(t *testing.T) {
	for _, tc := range []struct {
		method, target string
		queue          bool
		want           string
	}{
		{http.MethodPost, "/devstoreaccount1/q-1/messages?messagettl=-1", true, "queue q-1"},
		{http.MethodDelete, "/devstoreaccount1/q-1/messages/abc?popreceipt=x", true, "queue q-1"},
		{http.MethodGet, "/devstoreaccount1/runs-1/manual-abc/manifest.json", false, "runs-1/manual-abc/manifest.json"},
		{http.MethodPut, "/devstoreaccount1/runs-1/manual-abc/done/0?comp=appendblock", false, "runs-1/manual-abc/done/0"},
		{http.MethodGet, "/devstoreaccount1/runs-1?restype=container&comp=list", false, "runs-1"},
	} {
		if got := callEntity(httptest.NewRequest(tc.method, tc.target, nil), tc.queue); got != tc.want {
			t.Errorf("callEntity(%s %s) = %q, want %q", tc.method, tc.target, got, tc.want)
		}
	}
}

func TestHotTracker_WorstWindow(t *testing.T) {
	h := newHotTracker()
	// Window 0: the manifest takes 10 calls in 1,000 partitions; window 1: the done shard 40.
	for i := range hotWindowParts {
		if i < 10 {
			h.add("c/run/manifest.json", false)
		}
		h.add(fmt.Sprintf("c/run/results/%d.json", i), true)
	}
	for i := range hotWindowParts {
		if i < 40 {
			h.add("c/run/done/0", false)
		}
		h.add(fmt.Sprintf("c/run/results/%d.json", hotWindowParts+i), true)
	}
	h.add("c/run/done/0", false) // in the next window, which never closes
	h.close()
	// A queue hotter than every blob is the hottest entity, not the hottest blob.
	for i := range hotWindowParts {
		h.add("queue q", false)
		h.add(fmt.Sprintf("c/run/results/%d.json", 2*hotWindowParts+i), true)
	}
	if h.worst.Entity != "queue q" || h.worst.PerPart != 1 {
		t.Errorf("worst = %+v, want the queue", h.worst)
	}
	got := h.blob
	if got.Entity != "c/run/done/0" || got.Calls != 40 || got.Parts != hotWindowParts || got.Window != 1 || got.PerPart != 0.04 {
		t.Errorf("hottest blob = %+v, want the done shard's 40 calls in window 1", got)
	}
}
