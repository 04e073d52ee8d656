package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
)

func TestIDTime_MatchesTheCoordinatorsIDs(t *testing.T) {
	occ := time.Date(2026, 11, 21, 2, 5, 7, 0, time.UTC)
	if got, ok := idTime(tickRunID(occ)); !ok || !got.Equal(occ) {
		t.Errorf("timer ID %s: got %v %v, want %v", tickRunID(occ), got, ok, occ)
	}
	gen := ledger.ManualRunID("", occ.Add(500*time.Millisecond))
	if got, ok := idTime(gen); !ok || !got.Equal(occ) {
		t.Errorf("generated manual ID %s: got %v %v, want %v", gen, got, ok, occ)
	}
	for _, id := range []string{ledger.ScheduleRunID("nightly", occ), ledger.ScheduleRunID("a-b-9", occ),
		ledger.ScheduleNowRunID("nightly", "", occ.Add(999*time.Millisecond)), ledger.ScheduleNowRunID("x-now", "", occ)} {
		if got, ok := idTime(id); !ok || !got.Equal(occ) {
			t.Errorf("%s: got %v %v, want %v", id, got, ok, occ)
		}
	}
	for _, id := range []string{ledger.ManualRunID("key", occ), ledger.ScheduleNowRunID("nightly", "key", occ), "tick-2026",
		"tick-20261321t000000z", "manual-20261121t020507z", "other", "nightly-now-20261121t020507z-0123abcz"} {
		if got, ok := idTime(id); ok {
			t.Errorf("%s: got time %v, want none", id, got)
		}
	}
}

func get(a *API, id string, query map[string]string) (Reply, map[string]any) {
	r := a.Runs(context.Background(), Request{Method: http.MethodGet, ID: id, Query: query})
	b, _ := json.Marshal(r.JSON)
	var v map[string]any
	_ = json.Unmarshal(b, &v)
	return r, v
}

func TestGetRun_InvalidAndUnknownIDs(t *testing.T) {
	a := newTestAPI(t, newFakeLedger(), nil, nil)
	for _, id := range []string{"..", "../leases/leader", "%2e%2e", "..%2F..%2Fleases", "a/b", "TICK-20261121T100000Z",
		"-tick", "tick-", strings.Repeat("a", 64), "tick_1", "tick 1", "\x00", "run/manifest.json"} {
		r, v := get(a, id, nil)
		if r.Status != http.StatusBadRequest || errCode(v) != CodeInvalidRunID {
			t.Errorf("GET runs/%q: got %d %v, want 400 %s", id, r.Status, v, CodeInvalidRunID)
		}
	}
	r, v := get(a, "tick-20261121t100000z", nil)
	if r.Status != http.StatusNotFound || errCode(v) != CodeNotFound {
		t.Errorf("unknown run: got %d %v, want 404", r.Status, v)
	}
}

func TestProgress(t *testing.T) {
	big := ExactProgressLimit + 1
	cases := []struct {
		name    string
		m       ledger.Manifest
		results int
		done    map[int]int64
		want    Progress
	}{
		{name: "planning: total unknown", m: func() ledger.Manifest {
			m := manifest("tick-20261121t100000z", ledger.StateEnqueuing, t0, 0)
			m.Checkpoint.Next = 40
			return m
		}(), results: 5, want: Progress{Enqueued: 40, Completed: 5, Source: "results"}},
		{name: "running, small: exact from the results listing", m: manifest("tick-20261121t100000z", ledger.StateRunning, t0, 7), results: 3,
			want: Progress{Total: 7, TotalKnown: true, Enqueued: 7, Completed: 3, Percent: 42.8, Source: "results"}},
		{name: "running, large: approximate from the done shards", m: manifest("tick-20261121t100000z", ledger.StateRunning, t0, big),
			done: map[int]int64{0: 2500}, want: Progress{Total: big, TotalKnown: true, Enqueued: big, Completed: 2500, Percent: 49.9, Approximate: true, Source: "done"}},
		{name: "large, duplicates over-count: capped at the total", m: manifest("tick-20261121t100000z", ledger.StateRunning, t0, big),
			done: map[int]int64{0: int64(big) + 9}, want: Progress{Total: big, TotalKnown: true, Enqueued: big, Completed: big, Percent: 100, Approximate: true, Source: "done"}},
		{name: "second shard counted", m: manifest("tick-20261121t100000z", ledger.StateRunning, t0, 2*ledger.DoneShardSize),
			done: map[int]int64{0: ledger.DoneShardSize, 1: 1}, want: Progress{Total: 2 * ledger.DoneShardSize, TotalKnown: true, Enqueued: 2 * ledger.DoneShardSize,
				Completed: ledger.DoneShardSize + 1, Percent: 50, Approximate: true, Source: "done"}},
		{name: "striped: every stripe counted", m: func() ledger.Manifest {
			m := manifest("tick-20261121t100000z", ledger.StateRunning, t0, 10_000)
			m.DoneLayout = ledger.DoneStriped
			return m
		}(), done: map[int]int64{0: 768, 9: 512, ledger.DoneStripes - 1: 500, ledger.DoneStripes: 99},
			want: Progress{Total: 10_000, TotalKnown: true, Enqueued: 10_000, Completed: 1780, Percent: 17.8, Approximate: true, Source: "done"}},
		{name: "finished: exact from the manifest", m: func() ledger.Manifest {
			m := manifest("tick-20261121t100000z", ledger.StatePartial, t0, 10)
			m.Succeeded, m.Failed = 8, 2
			return m
		}(), results: 3, want: Progress{Total: 10, TotalKnown: true, Enqueued: 10, Completed: 10, Succeeded: 8, Failed: 2, Percent: 100, Source: "manifest"}},
		{name: "skipped: nothing to do", m: manifest("tick-20261121t100000z", ledger.StateSkipped, t0, 0),
			want: Progress{TotalKnown: true, Source: "manifest"}},
		{name: "missed: nothing ran, whatever the manifest says", m: manifest("tick-20261121t100000z", ledger.StateMissed, t0, 3),
			want: Progress{TotalKnown: true, Enqueued: 3, Source: "manifest"}},
		{name: "one short of done never shows 100", m: manifest("tick-20261121t100000z", ledger.StateRunning, t0, 3000), results: 2999,
			want: Progress{Total: 3000, TotalKnown: true, Enqueued: 3000, Completed: 2999, Percent: 99.9, Source: "results"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := newFakeLedger()
			l.results[c.m.RunID] = c.results
			l.done[c.m.RunID] = c.done
			a := newTestAPI(t, l, nil, nil)
			got, err := a.progress(context.Background(), c.m)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestGetRun_ViewAndReport(t *testing.T) {
	l := newFakeLedger()
	m := manifest("tick-20261121t100000z", ledger.StatePartial, t0, 200)
	m.Succeeded, m.Failed, m.Enqueued, m.Finished = 150, 50, t0.Add(2*time.Second), t0.Add(90*time.Second)
	m.Params = json.RawMessage(`{"partitions":200}`)
	m.Leader = ledger.Holder{App: "app", Instance: "i1", PID: 3}
	l.put(m)
	rep := ledger.Report{Run: m.RunID, Job: "synthetic", State: ledger.StatePartial, Partitions: 200, Succeeded: 150, Failed: 50,
		Aggregate: json.RawMessage(`{"sum":42}`)}
	for i := range 50 {
		rep.FailedList = append(rep.FailedList, ledger.FailedPart{Index: i, Error: "boom"})
	}
	l.reports[m.RunID], _ = json.Marshal(rep)
	a := newTestAPI(t, l, nil, nil)

	r, v := get(a, m.RunID, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("got %d %v", r.Status, v)
	}
	want := map[string]any{"run": m.RunID, "state": "partial", "trigger": "timer", "job": "synthetic", "epoch": float64(3)}
	for k, w := range want {
		if v[k] != w {
			t.Errorf("%s = %v, want %v", k, v[k], w)
		}
	}
	p := v["progress"].(map[string]any)
	if p["total"] != float64(200) || p["succeeded"] != float64(150) || p["failed"] != float64(50) || p["percent"] != float64(100) || p["enqueued"] != float64(200) {
		t.Errorf("progress = %v", p)
	}
	tm := v["timings"].(map[string]any)
	if tm["planningMs"] != float64(2000) || tm["durationMs"] != float64(90000) {
		t.Errorf("timings = %v", tm)
	}
	if v["leader"].(map[string]any)["instance"] != "i1" || fmt.Sprint(v["params"]) != "map[partitions:200]" {
		t.Errorf("leader/params = %v %v", v["leader"], v["params"])
	}
	rv := v["report"].(map[string]any)
	if rv["truncated"] != nil || len(rv["failedPartitions"].([]any)) != 50 || rv["aggregate"].(map[string]any)["sum"] != float64(42) {
		t.Errorf("small report not whole: %v", rv)
	}

	// A report over MaxReportBytes is summarised: counts, the first failures, no aggregate.
	rep.Aggregate = json.RawMessage(`{"blob":"` + strings.Repeat("x", MaxReportBytes) + `"}`)
	l.reports[m.RunID], _ = json.Marshal(rep)
	_, v = get(a, m.RunID, nil)
	rv = v["report"].(map[string]any)
	if rv["truncated"] != true || rv["aggregate"] != nil || len(rv["failedPartitions"].([]any)) != SummaryFailures ||
		rv["failed"] != float64(50) || rv["bytes"].(float64) <= MaxReportBytes {
		t.Errorf("large report summary = %v", rv)
	}

	// A report too large to read is summarised from the manifest.
	l.reports[m.RunID] = []byte(`{"x":"` + strings.Repeat("y", MaxReportReadBytes) + `"}`)
	_, v = get(a, m.RunID, nil)
	rv = v["report"].(map[string]any)
	if rv["truncated"] != true || rv["succeeded"] != float64(150) || rv["failed"] != float64(50) {
		t.Errorf("unread report summary = %v", rv)
	}
	if b, _ := json.Marshal(v); len(b) > 2*MaxReportBytes {
		t.Errorf("reply is %d bytes; a huge report must not be copied into it", len(b))
	}
}

// seedRuns stores timer runs every minute and keyed/generated manual runs in between, and
// returns every ID newest first.
func seedRuns(l *fakeLedger) []string {
	var want []string
	for i := 9; i >= 0; i-- {
		at := t0.Add(time.Duration(i) * time.Minute)
		keyed := manifest(ledger.ManualRunID(fmt.Sprintf("key-%d", i), at), ledger.StateSucceeded, at.Add(40*time.Second), 1)
		keyed.Trigger = ledger.TriggerManual
		l.put(keyed)
		gen := ledger.ManualRunID("", at.Add(20*time.Second))
		gm := manifest(gen, ledger.StateRunning, at.Add(20*time.Second), 4)
		gm.Trigger = ledger.TriggerManual
		l.put(gm)
		tick := tickRunID(at)
		l.put(manifest(tick, ledger.StateSucceeded, at.Add(300*time.Millisecond), 2))
		want = append(want, keyed.RunID, gen, tick)
	}
	return want
}

func TestListRuns_NewestFirstAcrossPages(t *testing.T) {
	l := newFakeLedger()
	want := seedRuns(l)
	a := newTestAPI(t, l, nil, nil)

	var got []string
	tok := ""
	for pages := 0; ; pages++ {
		if pages > 20 {
			t.Fatal("too many pages")
		}
		q := map[string]string{"limit": "7"}
		if tok != "" {
			q["continuation"] = tok
		}
		r, v := get(a, "", q)
		if r.Status != http.StatusOK {
			t.Fatalf("page %d: %d %v", pages, r.Status, v)
		}
		runs := v["runs"].([]any)
		if len(runs) > 7 {
			t.Fatalf("page of %d runs, limit 7", len(runs))
		}
		for _, x := range runs {
			got = append(got, x.(map[string]any)["run"].(string))
		}
		tok, _ = v["continuation"].(string)
		if tok == "" {
			break
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("listing order:\ngot  %v\nwant %v", got, want)
	}

	// Keyed runs' manifests are read once per process for ordering, then come from the cache.
	keyed := ledger.ManualRunID("key-3", t0)
	before := l.reads[keyed]
	get(a, "", map[string]string{"limit": "1"})
	if l.reads[keyed] != before {
		t.Errorf("listing page 1 read %s again (%d → %d reads); its creation time should be cached", keyed, before, l.reads[keyed])
	}
}

func TestListRuns_DefaultLimitProgressAndEmpty(t *testing.T) {
	l := newFakeLedger()
	a := newTestAPI(t, l, nil, nil)
	r, v := get(a, "", nil)
	if r.Status != http.StatusOK || v["runs"] == nil || len(v["runs"].([]any)) != 0 || v["continuation"] != nil {
		t.Fatalf("empty ledger: %d %v; want runs [] and no continuation", r.Status, v)
	}
	for i := range 25 {
		l.put(manifest(tickRunID(t0.Add(time.Duration(i)*time.Minute)), ledger.StateRunning, t0, 4))
	}
	l.results[tickRunID(t0.Add(24*time.Minute))] = 1
	_, v = get(a, "", nil)
	runs := v["runs"].([]any)
	if len(runs) != DefaultLimit || v["continuation"] == nil {
		t.Fatalf("got %d runs, continuation %v; want %d and a token", len(runs), v["continuation"], DefaultLimit)
	}
	first := runs[0].(map[string]any)
	if p := first["progress"].(map[string]any); p["percent"] != float64(25) || first["params"] != nil || first["report"] != nil {
		t.Errorf("first listed run = %v; want 25%% and no params/report", first)
	}
}

func TestListRuns_BadQuery400(t *testing.T) {
	a := newTestAPI(t, newFakeLedger(), nil, nil)
	forged := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	cases := []struct {
		name  string
		query map[string]string
		code  string
	}{
		{"limit zero", map[string]string{"limit": "0"}, CodeInvalidLimit},
		{"limit too big", map[string]string{"limit": "101"}, CodeInvalidLimit},
		{"limit not a number", map[string]string{"limit": "ten"}, CodeInvalidLimit},
		{"limit repeated", map[string]string{"limit": "5,6"}, CodeInvalidLimit},
		{"token not base64", map[string]string{"continuation": "!!!"}, CodeInvalidContinuation},
		{"token not JSON", map[string]string{"continuation": forged("hello")}, CodeInvalidContinuation},
		{"token with traversal ID", map[string]string{"continuation": forged(`{"v":1,"t":1,"id":"../leases"}`)}, CodeInvalidContinuation},
		{"token of another version", map[string]string{"continuation": forged(`{"v":2,"t":1,"id":"tick-1"}`)}, CodeInvalidContinuation},
		{"token with extra fields", map[string]string{"continuation": forged(`{"v":1,"t":1,"id":"tick-1","x":1}`)}, CodeInvalidContinuation},
		{"token too long", map[string]string{"continuation": strings.Repeat("A", 600)}, CodeInvalidContinuation},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, v := get(a, "", c.query)
			if r.Status != http.StatusBadRequest || errCode(v) != c.code {
				t.Errorf("got %d %v, want 400 %s", r.Status, v, c.code)
			}
		})
	}
	// The function key (?code=) and other unknown parameters are ignored.
	if r, v := get(a, "", map[string]string{"code": "secret", "x": "y"}); r.Status != http.StatusOK {
		t.Errorf("unknown query parameters: got %d %v, want 200", r.Status, v)
	}
}

func TestListRuns_StorageError502(t *testing.T) {
	l := newFakeLedger()
	l.listErr = fmt.Errorf("list runs: %w: connection refused", ledger.ErrUnavailable)
	a := newTestAPI(t, l, nil, nil)
	if r, v := get(a, "", nil); r.Status != http.StatusBadGateway || errCode(v) != CodeStorage {
		t.Errorf("got %d %v, want 502 %s", r.Status, v, CodeStorage)
	}
	// No runs container yet (nothing ever started): an empty listing, not an error.
	l.listErr = fmt.Errorf("list runs: %w", ledger.ErrNotFound)
	if r, v := get(a, "", nil); r.Status != http.StatusOK || len(v["runs"].([]any)) != 0 {
		t.Errorf("missing container: got %d %v, want 200 and no runs", r.Status, v)
	}
}

func TestLeader_Reply(t *testing.T) {
	since := time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		st   election.LeaderState
		want string
	}{
		{"never contended", election.LeaderState{},
			`{"held":false,"holder":null,"epoch":0,"since":null,"releasedAt":null,"leaseState":"none","deadLetters":[]}`},
		{"held", election.LeaderState{Held: true, Holder: ledger.Holder{App: "a", Instance: "i", PID: 2}, Epoch: 7, Since: since, LeaseState: "leased"},
			`{"held":true,"holder":{"app":"a","instance":"i","pid":2},"epoch":7,"since":"2026-11-21T09:00:00Z","releasedAt":null,"leaseState":"leased","deadLetters":[]}`},
		{"released", election.LeaderState{Holder: ledger.Holder{App: "a", Instance: "i", PID: 2}, Epoch: 7, Since: since, ReleasedAt: since.Add(time.Second), LeaseState: "available"},
			`{"held":false,"holder":{"app":"a","instance":"i","pid":2},"epoch":7,"since":"2026-11-21T09:00:00Z","releasedAt":"2026-11-21T09:00:01Z","leaseState":"available","deadLetters":[]}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := newTestAPI(t, newFakeLedger(), nil, &fakeLeader{st: c.st})
			r := a.Leader(context.Background(), Request{Method: http.MethodGet})
			b, _ := json.Marshal(r.JSON)
			if r.Status != http.StatusOK || string(b) != c.want {
				t.Errorf("got %d %s\nwant 200 %s", r.Status, b, c.want)
			}
		})
	}
	a := newTestAPI(t, newFakeLedger(), nil, &fakeLeader{err: fmt.Errorf("read lease: %w", context.DeadlineExceeded)})
	if r := a.Leader(context.Background(), Request{Method: http.MethodGet}); r.Status != http.StatusGatewayTimeout {
		t.Errorf("lease read timeout: got %d, want 504", r.Status)
	}
}

// A large run's progress reads every done shard once per process, then only the shards still
// filling: the shards of a run in its millions are not read again on each request. A run
// created again under the same ID is counted afresh.
func TestProgress_ALargeRunReadsOnlyTheShardsStillFilling(t *testing.T) {
	per := ledger.DoneUnit * ledger.DoneUnitsPerStripe // a striped shard's partitions
	m := manifest("tick-20261121t100000z", ledger.StateRunning, t0, 3*ledger.DoneStripes*per)
	m.DoneLayout = ledger.DoneStriped
	shards := m.DoneLayout.Shards(m.Partitions)
	l := newFakeLedger()
	l.done[m.RunID] = map[int]int64{}
	for s := range shards - 1 {
		l.done[m.RunID][s] = int64(per)
	}
	l.done[m.RunID][shards-1] = 100
	a := newTestAPI(t, l, nil, nil)
	ctx := context.Background()
	check := func(what string, reads, completed int) {
		t.Helper()
		l.doneReads = 0
		p, err := a.progress(ctx, m)
		if err != nil || p.Completed != completed || l.doneReads != reads {
			t.Errorf("%s: completed %d after %d done-shard reads, %v; want %d after %d", what, p.Completed, l.doneReads, err, completed, reads)
		}
	}
	check("first request", shards, (shards-1)*per+100)
	check("second request", 1, (shards-1)*per+100)
	l.done[m.RunID][shards-1] = int64(per)
	check("the last shard filled", 1, shards*per)
	check("all complete", 0, shards*per)
	m.Created = m.Created.Add(time.Hour)
	check("the run created again", shards, shards*per)
}
