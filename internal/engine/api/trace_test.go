package api

import (
	"net/http"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// TestGetRun_Trace: a run recorded with its trace context answers its trace ID and, with
// Config.TraceURL, its address in the trace UI; a run without one, or with a malformed one,
// answers neither.
func TestGetRun_Trace(t *testing.T) {
	l := newFakeLedger()
	traced := manifest("tick-20261121t100000z", ledger.StateSucceeded, t0, 2)
	traced.Trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	plain := manifest("tick-20261121t110000z", ledger.StateSucceeded, t0.Add(time.Hour), 2)
	odd := manifest("tick-20261121t120000z", ledger.StateSucceeded, t0.Add(2*time.Hour), 2)
	odd.Trace = `00-0af7651916cd43dd8448eb211c8031"x-b7ad6b7169203331-01`
	for _, m := range []ledger.Manifest{traced, plain, odd} {
		l.put(m)
	}
	a, err := New(Config{Ledger: l, Leader: &fakeLeader{}, TraceURL: "http://localhost:16686/trace/{trace}?uiFind={trace}"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ run, trace, url string }{
		{traced.RunID, "0af7651916cd43dd8448eb211c80319c", "http://localhost:16686/trace/0af7651916cd43dd8448eb211c80319c?uiFind=0af7651916cd43dd8448eb211c80319c"},
		{plain.RunID, "", ""},
		{odd.RunID, "", ""},
	} {
		r, v := get(a, tc.run, nil)
		if r.Status != http.StatusOK {
			t.Fatalf("GET %s: %d %v", tc.run, r.Status, v)
		}
		if got, _ := v["trace"].(string); got != tc.trace {
			t.Errorf("%s: trace %q, want %q", tc.run, got, tc.trace)
		}
		if got, _ := v["traceUrl"].(string); got != tc.url {
			t.Errorf("%s: traceUrl %q, want %q", tc.run, got, tc.url)
		}
	}
	// Without a trace UI, the trace ID alone.
	r, v := get(newTestAPI(t, l, nil, nil), traced.RunID, nil)
	if r.Status != http.StatusOK || v["trace"] != "0af7651916cd43dd8448eb211c80319c" || v["traceUrl"] != nil {
		t.Errorf("no TraceURL: %d trace %v traceUrl %v, want the ID and no address", r.Status, v["trace"], v["traceUrl"])
	}
}
