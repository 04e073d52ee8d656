package bench

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
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
			h.add("c/run/manifest.json", "call", 0, time.Time{})
		}
		h.add(fmt.Sprintf("c/run/results/%d.json", i), kindResult, 1, time.Time{})
	}
	for i := range hotWindowParts {
		if i < 40 {
			h.add("c/run/done/0", "call", 0, time.Time{})
		}
		h.add(fmt.Sprintf("c/run/results/%d.json", hotWindowParts+i), kindResult, 1, time.Time{})
	}
	h.add("c/run/done/0", "call", 0, time.Time{}) // in the next window, which never closes
	h.close()
	// A queue hotter than every blob is the hottest entity, not the hottest blob.
	for i := range hotWindowParts {
		h.add("queue q", "call", 0, time.Time{})
		h.add(fmt.Sprintf("c/run/results/%d.json", 2*hotWindowParts+i), kindResult, 1, time.Time{})
	}
	if h.worst.Entity != "queue q" || h.worst.PerPart != 1 {
		t.Errorf("worst = %+v, want the queue", h.worst)
	}
	if h.busy != h.worst {
		t.Errorf("busy = %+v, want the queue as worst (no empty polls)", h.busy)
	}
	got := h.blob
	if got.Entity != "c/run/done/0" || got.Calls != 40 || got.Parts != hotWindowParts || got.Window != 1 || got.PerPart != 0.04 {
		t.Errorf("hottest blob = %+v, want the done shard's 40 calls in window 1", got)
	}
}

// Empty polls count against their queue in the hottest entity, and are left out of the busy
// one: a queue polled empty 50 times and used 5 times is hotter than the manifest's 20 calls,
// its 5 used calls are not.
func TestHotTracker_EmptyPollsLeftOutOfBusy(t *testing.T) {
	h := newHotTracker()
	for i := range hotWindowParts {
		switch {
		case i < 50:
			h.add("queue q", kindEmptyPoll, 0, time.Time{})
		case i < 55:
			h.add("queue q", "call", 0, time.Time{})
		}
		if i < 20 {
			h.add("c/run/manifest.json", "call", 0, time.Time{})
		}
		h.add(fmt.Sprintf("c/run/results/%d.json", i), kindResult, 1, time.Time{})
	}
	h.close()
	if h.worst.Entity != "queue q" || h.worst.Calls != 55 {
		t.Errorf("worst = %+v, want the queue's 55 calls", h.worst)
	}
	if h.busy.Entity != "c/run/manifest.json" || h.busy.Calls != 20 || h.busy.PerPart != 0.02 {
		t.Errorf("busy = %+v, want the manifest's 20 calls", h.busy)
	}
}

func TestMessageSniffer(t *testing.T) {
	for _, tc := range []struct {
		writes []string
		want   bool
	}{
		{[]string{`<?xml version="1.0"?><QueueMessagesList></QueueMessagesList>`}, false},
		{[]string{`<QueueMessagesList><QueueMessage><MessageId>1</MessageId></QueueMessage></QueueMessagesList>`}, true},
		{[]string{`<QueueMessagesList><QueueMe`, `ssage><MessageId>`}, true}, // the tag split across writes
	} {
		s := &messageSniffer{ResponseWriter: httptest.NewRecorder()}
		for _, w := range tc.writes {
			if _, err := s.Write([]byte(w)); err != nil {
				t.Fatal(err)
			}
		}
		if s.found != tc.want {
			t.Errorf("%q: found %v, want %v", tc.writes, s.found, tc.want)
		}
	}
}

// Each entity is listed at its own worst window, hottest first, with its calls by kind.
func TestHotTracker_TopListsEachEntityAtItsWorst(t *testing.T) {
	h := newHotTracker()
	at := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	window := func(manifest, lease, shard int) {
		for i := range hotWindowParts {
			switch {
			case i < manifest:
				h.add("c/run/manifest.json", "blob GET manifest", 0, at)
			case i < manifest+lease:
				h.add("c/lease", "blob lease renew", 0, at)
			}
			if i < shard {
				h.add("c/run/done/0", "blob append done", 0, at)
			}
			at = at.Add(time.Millisecond)
			h.add("c/run/results/x.json", kindResult, 1, at)
		}
	}
	window(12, 3, 5)
	window(4, 9, 6)
	top := h.top(3)
	want := []struct {
		entity string
		calls  int64
		window int
		kinds  string
	}{
		{"c/run/results/x.json", 1000, 0, "blob PUT result=1000"},
		{"c/run/manifest.json", 12, 0, "blob GET manifest=12"},
		{"c/lease", 9, 1, "blob lease renew=9"},
	}
	if len(top) != len(want) {
		t.Fatalf("top(3) = %v", top)
	}
	for i, w := range want {
		if got := top[i]; got.Entity != w.entity || got.Calls != w.calls || got.Window != w.window || got.Kinds != w.kinds {
			t.Errorf("top[%d] = %v, want %s with %d calls in window %d (%s)", i, got, w.entity, w.calls, w.window, w.kinds)
		}
	}
	if span := top[1].Span; span != time.Second {
		t.Errorf("window 0's span = %s, want 1s (its first call to its thousandth result)", span)
	}
}

// Windows by finish time: 1,000 partitions finishing one a millisecond make a window of a
// second, and a call counts in the window whose finishes it falls among (the last one also
// takes the calls after the run's last finish).
func TestFinishWindow(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var ends []time.Time
	for k := range 2500 {
		ends = append(ends, t0.Add(time.Duration(2499-k)*time.Millisecond)) // any order
	}
	at := func(d time.Duration, n int) []time.Time {
		var ts []time.Time
		for range n {
			ts = append(ts, t0.Add(d))
		}
		return ts
	}
	calls := append(append(at(500*time.Millisecond, 5), at(1500*time.Millisecond, 30)...), at(2200*time.Millisecond, 1)...)
	if n, per, span := finishWindow(ends, calls); n != 30 || per != 0.030 || span != 999*time.Millisecond {
		t.Errorf("got %d calls, %.4f per partition over %s; want the second window's 30, 0.0300, 999ms", n, per, span)
	}
	// 20 calls after the last finish go to the last window (500 partitions): 21, 0.042.
	calls = append(calls, at(3*time.Second, 20)...)
	if n, per, _ := finishWindow(ends, calls); n != 21 || per != 0.042 {
		t.Errorf("with calls after the last finish: %d calls, %.4f; want 21, 0.0420", n, per)
	}
}
