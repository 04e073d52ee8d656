package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// walk pages through GET /api/runs with query and returns the run IDs and the number of pages.
func walk(t *testing.T, a *API, query map[string]string) ([]string, int) {
	t.Helper()
	var ids []string
	tok := ""
	for pages := 1; ; pages++ {
		if pages > 200 {
			t.Fatal("too many pages")
		}
		q := map[string]string{}
		for k, v := range query {
			q[k] = v
		}
		if tok != "" {
			q["continuation"] = tok
		}
		r, v := get(a, "", q)
		if r.Status != http.StatusOK {
			t.Fatalf("%v: %d %v", q, r.Status, v)
		}
		for _, x := range v["runs"].([]any) {
			ids = append(ids, x.(map[string]any)["run"].(string))
		}
		tok, _ = v["continuation"].(string)
		if tok == "" {
			return ids, pages
		}
	}
}

// Filters by state and trigger return exactly the matching runs, newest first, across pages;
// the trigger filter reads no manifest of a run its ID rules out.
func TestListRuns_Filters(t *testing.T) {
	l := newFakeLedger()
	states := []ledger.State{ledger.StateSucceeded, ledger.StateFailed, ledger.StateMissed, ledger.StateSkipped, ledger.StateRunning}
	var all []ledger.Manifest
	for i := range 60 {
		at := t0.Add(time.Duration(i) * time.Minute)
		m := manifest(tickRunID(at), states[i%len(states)], at, 2)
		if i%3 == 0 {
			m.RunID, m.Trigger = ledger.ManualRunID(fmt.Sprintf("k-%d", i), at), ledger.TriggerManual
		}
		l.put(m)
		all = append(all, m)
	}
	newest := func(keep func(ledger.Manifest) bool) []string {
		var ids []string
		for i := len(all) - 1; i >= 0; i-- {
			if keep(all[i]) {
				ids = append(ids, all[i].RunID)
			}
		}
		return ids
	}
	a := newTestAPI(t, l, nil, nil)
	cases := []struct {
		query map[string]string
		keep  func(ledger.Manifest) bool
	}{
		{map[string]string{"state": "failed", "limit": "4"}, func(m ledger.Manifest) bool { return m.State == ledger.StateFailed }},
		{map[string]string{"state": "missed,skipped", "limit": "5"}, func(m ledger.Manifest) bool {
			return m.State == ledger.StateMissed || m.State == ledger.StateSkipped
		}},
		{map[string]string{"trigger": "manual", "limit": "7"}, func(m ledger.Manifest) bool { return m.Trigger == ledger.TriggerManual }},
		{map[string]string{"trigger": "timer", "state": "running"}, func(m ledger.Manifest) bool {
			return m.Trigger == ledger.TriggerTimer && m.State == ledger.StateRunning
		}},
		{map[string]string{"trigger": "timer,manual", "state": "timed-out"}, func(ledger.Manifest) bool { return false }},
	}
	for _, c := range cases {
		got, _ := walk(t, a, c.query)
		if want := newest(c.keep); !slices.Equal(got, want) {
			t.Errorf("%v:\ngot  %v\nwant %v", c.query, got, want)
		}
	}

	// A trigger filter skips the other trigger's runs by ID: a fresh API (empty caches)
	// listing manual runs never reads a timer run's manifest.
	fresh := newTestAPI(t, l, nil, nil)
	for id := range l.reads {
		l.reads[id] = 0
	}
	walk(t, fresh, map[string]string{"trigger": "manual", "state": "running"})
	for _, m := range all {
		if m.Trigger == ledger.TriggerTimer && l.reads[m.RunID] != 0 {
			t.Errorf("listing manual runs read timer run %s", m.RunID)
		}
	}
}

// A filtered page reads at most MaxScanReads manifests from storage: a filter that matches
// nothing in a long history answers page by page with continuations, each bounded.
func TestListRuns_FilterScanIsBounded(t *testing.T) {
	l := newFakeLedger()
	n := MaxScanReads*2 + 50
	for i := range n {
		at := t0.Add(time.Duration(i) * time.Minute)
		l.put(manifest(tickRunID(at), ledger.StateSucceeded, at, 1))
	}
	l.put(manifest(tickRunID(t0.Add(-time.Hour)), ledger.StateFailed, t0.Add(-time.Hour), 1)) // the oldest
	a := newTestAPI(t, l, nil, nil)
	total := func() int {
		s := 0
		for _, c := range l.reads {
			s += c
		}
		return s
	}
	var ids []string
	tok := ""
	pages := 0
	for {
		pages++
		before := total()
		q := map[string]string{"state": "failed"}
		if tok != "" {
			q["continuation"] = tok
		}
		r, v := get(a, "", q)
		if r.Status != http.StatusOK {
			t.Fatalf("%d %v", r.Status, v)
		}
		if reads := total() - before; reads > MaxScanReads {
			t.Errorf("page %d read %d manifests, bound %d", pages, reads, MaxScanReads)
		}
		for _, x := range v["runs"].([]any) {
			ids = append(ids, x.(map[string]any)["run"].(string))
		}
		tok, _ = v["continuation"].(string)
		if tok == "" {
			break
		}
	}
	if want := []string{tickRunID(t0.Add(-time.Hour))}; !slices.Equal(ids, want) || pages != 3 {
		t.Errorf("got %v over %d pages, want %v over 3", ids, pages, want)
	}
	// Now every final manifest is cached: the same filter answers in one page, no reads.
	before := total()
	if got, pages := walk(t, a, map[string]string{"state": "failed"}); len(got) != 1 || pages != 1 || total() != before {
		t.Errorf("warm: %v in %d pages with %d reads; want 1 run, 1 page, 0 reads", got, pages, total()-before)
	}
}

func TestListRuns_BadFilters400(t *testing.T) {
	a := newTestAPI(t, newFakeLedger(), nil, nil)
	cases := []struct {
		query map[string]string
		code  string
	}{
		{map[string]string{"state": "done"}, CodeInvalidState},
		{map[string]string{"state": "failed,"}, CodeInvalidState},
		{map[string]string{"state": "FAILED"}, CodeInvalidState},
		{map[string]string{"trigger": "check"}, CodeInvalidTrigger},
		{map[string]string{"trigger": "cron"}, CodeInvalidTrigger},
		{map[string]string{"schedule": "Nightly"}, CodeInvalidSchedule},
		{map[string]string{"schedule": "nightly,"}, CodeInvalidSchedule},
		{map[string]string{"schedule": "manual"}, CodeInvalidSchedule},
		{map[string]string{"schedule": "../x"}, CodeInvalidSchedule},
		// ?occurrences moved to GET /api/schedules/{name}: the reply says where.
		{map[string]string{"occurrences": "30"}, CodeBadRequest},
	}
	for _, c := range cases {
		r, v := get(a, "", c.query)
		if r.Status != http.StatusBadRequest || errCode(v) != c.code {
			t.Errorf("%v: got %d %v, want 400 %s", c.query, r.Status, v, c.code)
		}
		if msg := v["error"].(map[string]any)["message"].(string); msg == "" {
			t.Errorf("%v: empty message", c.query)
		} else if c.query["occurrences"] != "" && !strings.Contains(msg, "/api/schedules/{name}?occurrences=N") {
			t.Errorf("%v: message %q does not say where occurrences went", c.query, msg)
		}
	}
}

// A run's detail shows its segments (a takeover as a second one, with the current leader on
// it), its failed partitions with their attempts, each try's error and worker, and who processed its
// partitions; the listing carries the segments but reads no results.
func TestGetRun_SegmentsFailuresWorkers(t *testing.T) {
	l := newFakeLedger()
	id := tickRunID(t0)
	m := manifest(id, ledger.StatePartial, t0, 6)
	m.Occurrence, m.Epoch = t0, 8
	m.Leader = ledger.Holder{App: "app", Instance: "b", PID: 2}
	m.Segments = []ledger.Segment{{Epoch: 7, From: 0}, {Epoch: 8, From: 4}}
	m.Enqueued, m.Finished, m.Succeeded, m.Failed = t0.Add(2*time.Second), t0.Add(9*time.Second), 5, 1
	m.Created = t0.Add(time.Second)
	l.put(m)
	wa, wb := ledger.Holder{App: "app", Instance: "a", PID: 1}, ledger.Holder{App: "app", Instance: "b", PID: 2}
	for i := range 6 {
		w, epoch := wa, int64(7)
		if i >= 4 {
			w, epoch = wb, 8
		}
		r := ledger.Result{Run: id, Index: i, Epoch: epoch, OK: i != 2, Attempts: 1, Worker: w, Finished: t0.Add(5 * time.Second)}
		if i == 2 {
			r.Error, r.Attempts, r.Errors = "boom", 3, []string{"down", "still down", "boom"}
		}
		l.putResult(r)
	}
	rep, _ := json.Marshal(ledger.Report{Run: id, State: ledger.StatePartial, Partitions: 6, Succeeded: 5, Failed: 1,
		FailedList: []ledger.FailedPart{{Index: 2, Error: "boom"}}, Aggregate: json.RawMessage(`{"sum":5}`)})
	l.reports[id] = rep
	a := newTestAPI(t, l, nil, nil)

	r, v := get(a, id, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("%d %v", r.Status, v)
	}
	b, _ := json.Marshal(v["segments"])
	if want := `[{"epoch":7,"from":0,"leader":null,"to":4},{"epoch":8,"from":4,"leader":{"app":"app","instance":"b","pid":2},"to":6}]`; string(b) != want {
		t.Errorf("segments = %s\nwant       %s", b, want)
	}
	b, _ = json.Marshal(v["failures"])
	if want := `[{"attempts":3,"epoch":7,"error":"boom","errors":["down","still down","boom"],"finished":"2026-11-21T10:00:05Z","index":2,"worker":{"app":"app","instance":"a","pid":1}}]`; string(b) != want {
		t.Errorf("failures = %s\nwant       %s", b, want)
	}
	b, _ = json.Marshal(v["workers"])
	if want := `{"epochs":{"7":4,"8":2},"instances":[{"failed":1,"partitions":4,"worker":{"app":"app","instance":"a","pid":1}},{"failed":0,"partitions":2,"worker":{"app":"app","instance":"b","pid":2}}],"read":6,"sampled":false}`; string(b) != want {
		t.Errorf("workers = %s\nwant      %s", b, want)
	}
	tm := v["timings"].(map[string]any)
	if tm["startDelayMs"] != float64(1000) || tm["runningMs"] != float64(7000) || tm["durationMs"] != float64(8000) {
		t.Errorf("timings = %v", tm)
	}

	before := l.resultReads
	_, lv := get(a, "", nil)
	run := lv["runs"].([]any)[0].(map[string]any)
	if l.resultReads != before || run["workers"] != nil || run["failures"] != nil || len(run["segments"].([]any)) != 2 {
		t.Errorf("listing: %d result reads, run %v; want none, no workers/failures, two segments", l.resultReads-before, run)
	}
}

// A run whose results are in blocks shows the same detail: each failure with its attempts and
// errors, and every worker, reading each block once.
func TestGetRun_FailuresAndWorkersFromBlocks(t *testing.T) {
	l := newFakeLedger()
	id := tickRunID(t0)
	m := manifest(id, ledger.StatePartial, t0, 8)
	m.Succeeded, m.Failed = 7, 1
	l.put(m)
	w := ledger.Holder{App: "app", Instance: "a", PID: 1}
	for first := 0; first < 8; first += 4 {
		b := ledger.Block{Run: id, Span: ledger.Span{First: first, Size: 4}}
		for i := first; i < first+4; i++ {
			r := ledger.Result{Run: id, Index: i, Epoch: 1, OK: i != 5, Attempts: 1, Worker: w}
			if i == 5 {
				r.Error, r.Attempts, r.Errors = "boom", 2, []string{"down", "boom"}
			}
			b.Results = append(b.Results, r)
		}
		l.blocks[id] = append(l.blocks[id], b)
	}
	rep, _ := json.Marshal(ledger.Report{Run: id, State: ledger.StatePartial, Partitions: 8, Succeeded: 7, Failed: 1,
		FailedList: []ledger.FailedPart{{Index: 5, Error: "boom"}}})
	l.reports[id] = rep
	a := newTestAPI(t, l, nil, nil)
	r, v := get(a, id, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("%d %v", r.Status, v)
	}
	b, _ := json.Marshal(v["failures"])
	if want := `[{"attempts":2,"epoch":1,"error":"boom","errors":["down","boom"],"index":5,"worker":{"app":"app","instance":"a","pid":1}}]`; string(b) != want {
		t.Errorf("failures = %s\nwant       %s", b, want)
	}
	wv := v["workers"].(map[string]any)
	if wv["read"] != float64(8) {
		t.Errorf("workers %v, want all 8 read", wv)
	}
	if l.blockReads != 2 {
		t.Errorf("%d block reads, want each of the 2 blocks once", l.blockReads)
	}
}

// A large run's workers come from an even sample of MaxWorkerReads results.
func TestGetRun_WorkersSampled(t *testing.T) {
	l := newFakeLedger()
	id := tickRunID(t0)
	n := MaxWorkerReads * 50
	l.put(manifest(id, ledger.StateRunning, t0, n))
	for i := range n {
		l.putResult(ledger.Result{Run: id, Index: i, OK: true, Worker: ledger.Holder{App: "app", Instance: fmt.Sprintf("i%d", i%3)}})
	}
	a := newTestAPI(t, l, nil, nil)
	before := l.resultReads
	_, v := get(a, id, nil)
	w := v["workers"].(map[string]any)
	if w["sampled"] != true || w["read"] != float64(MaxWorkerReads) || len(w["instances"].([]any)) != 3 {
		t.Errorf("workers = %v; want a sample of %d over 3 instances", w, MaxWorkerReads)
	}
	if reads := l.resultReads - before; reads != MaxWorkerReads {
		t.Errorf("read %d results, want %d", reads, MaxWorkerReads)
	}
}

// ?schedule= keeps the runs of the named schedules (their occurrences and runs now), newest
// first, across pages, and combines with the other filters; it reads no manifest of a run
// whose ID names another schedule (or none: an ad-hoc run).
func TestListRuns_FilterBySchedule(t *testing.T) {
	l := newFakeLedger()
	var all []ledger.Manifest
	for i := range 40 {
		at := t0.Add(time.Duration(i) * time.Minute)
		var m ledger.Manifest
		switch i % 5 {
		case 0:
			m = manifest(ledger.ScheduleRunID("nightly", at), ledger.StateSucceeded, at, 1)
		case 1:
			m = manifest(ledger.ScheduleNowRunID("nightly", fmt.Sprintf("k-%d", i), at), ledger.StateFailed, at, 1)
			m.Trigger = ledger.TriggerManual
		case 2:
			m = manifest(ledger.ScheduleNowRunID("nightly-now", "", at), ledger.StateSucceeded, at, 1) // a schedule named nightly-now
			m.Trigger = ledger.TriggerManual
		case 3:
			m = manifest(tickRunID(at), ledger.StatePaused, at, 0)
		default:
			m = manifest(ledger.ManualRunID("", at), ledger.StateSucceeded, at, 1)
			m.Trigger = ledger.TriggerManual
		}
		l.put(m)
		all = append(all, m)
	}
	of := func(m ledger.Manifest) string { n, _ := ledger.ParseRunID(m.RunID); return n.Schedule }
	newest := func(keep func(ledger.Manifest) bool) []string {
		var ids []string
		for i := len(all) - 1; i >= 0; i-- {
			if keep(all[i]) {
				ids = append(ids, all[i].RunID)
			}
		}
		return ids
	}
	a := newTestAPI(t, l, nil, nil)
	cases := []struct {
		query map[string]string
		keep  func(ledger.Manifest) bool
	}{
		{map[string]string{"schedule": "nightly", "limit": "3"}, func(m ledger.Manifest) bool { return of(m) == "nightly" }},
		{map[string]string{"schedule": "nightly-now"}, func(m ledger.Manifest) bool { return of(m) == "nightly-now" }},
		{map[string]string{"schedule": "tick,nightly", "limit": "5"}, func(m ledger.Manifest) bool { return of(m) == "tick" || of(m) == "nightly" }},
		{map[string]string{"schedule": "nightly", "trigger": "manual"}, func(m ledger.Manifest) bool {
			return of(m) == "nightly" && m.Trigger == ledger.TriggerManual
		}},
		{map[string]string{"schedule": "tick", "state": "paused"}, func(m ledger.Manifest) bool { return of(m) == "tick" }},
		{map[string]string{"schedule": "gone"}, func(ledger.Manifest) bool { return false }},
	}
	for _, c := range cases {
		got, _ := walk(t, a, c.query)
		if want := newest(c.keep); !slices.Equal(got, want) || len(want) == 0 && c.query["schedule"] != "gone" {
			t.Errorf("%v:\ngot  %v\nwant %v", c.query, got, want)
		}
	}

	fresh := newTestAPI(t, l, nil, nil)
	for id := range l.reads {
		l.reads[id] = 0
	}
	walk(t, fresh, map[string]string{"schedule": "nightly", "state": "failed"})
	for _, m := range all {
		if of(m) != "nightly" && l.reads[m.RunID] != 0 {
			t.Errorf("listing schedule nightly read run %s", m.RunID)
		}
	}
}
