package app

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/ledger"
)

// chromium returns the headless browser for the dashboard check: $BATON_CHROMIUM, else
// chromium on PATH. make test installs it (scripts/ensure-chromium.sh) and sets
// BATON_REQUIRE_BROWSER=1, so there a missing browser fails the test instead of skipping it.
func chromium(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("BATON_CHROMIUM"); p != "" {
		return p
	}
	p, err := exec.LookPath("chromium")
	if err == nil {
		return p
	}
	if os.Getenv("BATON_REQUIRE_BROWSER") != "" {
		t.Fatal("chromium not found: run scripts/ensure-chromium.sh (as root it installs Debian's chromium)")
	}
	t.Skip("chromium not installed; make test installs it with scripts/ensure-chromium.sh")
	return ""
}

// dumpDOM loads url in headless chromium, lets the page's scripts run for up to five seconds
// of virtual time (fetches included), and returns the serialized DOM.
func dumpDOM(t *testing.T, browser, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+t.TempDir(), "--virtual-time-budget=5000", "--dump-dom", url)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v\nstderr:\n%s", err, stderr.String())
	}
	return string(out)
}

// rowAttrs returns the data-* attributes of the dashboard's table row for run.
func rowAttrs(dom, run string) (map[string]string, string, bool) {
	re := regexp.MustCompile(`<tr\b[^>]*\bdata-run="` + regexp.QuoteMeta(run) + `"[^>]*>(.*?)</tr>`)
	m := re.FindStringSubmatch(dom)
	if m == nil {
		return nil, "", false
	}
	attrs := map[string]string{}
	for _, a := range regexp.MustCompile(`\bdata-([a-z]+)="([^"]*)"`).FindAllStringSubmatch(m[0][:strings.Index(m[0], ">")], -1) {
		attrs[a[1]] = html.UnescapeString(a[2])
	}
	text := html.UnescapeString(regexp.MustCompile(`<[^>]+>`).ReplaceAllString(m[1], " "))
	return attrs, text, true
}

// The dashboard in a real browser: served through a stand-in for the host, over a ledger
// seeded by real runs (one finished, one three partitions of seven in), it shows both runs
// with the state and percentage the API reports, and the leader; opened with ?code=<key>, it
// sends the key as the x-functions-key header and puts it in no request URL and no link.
func TestDashboard_Browser(t *testing.T) {
	browser := chromium(t)
	e := newAPIEnv(t)
	shim := newHostShim(t, e.hs.URL)

	start := func(key string, parts int) string {
		out := e.invoke(fnRuns, goldenHTTP(t, "http-runs-post.json", withHeader("Idempotency-Key", key),
			withBody(fmt.Sprintf(`{"job":"synthetic","params":{"partitions":%d}}`, parts))))
		v := out.json(t)
		if out.Status != http.StatusAccepted {
			t.Fatalf("POST: %d %v", out.Status, v)
		}
		return v["run"].(string)
	}
	finished := start("dashboard-finished", 2)
	e.work()
	running := start("dashboard-running", 7)
	e.deliver(3)

	// What the API says, fetched through the same stand-in host.
	resp, err := http.Get(shim.srv.URL + "/api/runs")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Runs []struct {
			Run      string
			State    string
			Progress struct{ Percent float64 }
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if err != nil || len(list.Runs) != 2 {
		t.Fatalf("API listing: %v %+v, want 2 runs", err, list)
	}
	want := map[string]struct {
		state   string
		percent float64
	}{}
	for _, r := range list.Runs {
		want[r.Run] = struct {
			state   string
			percent float64
		}{r.State, r.Progress.Percent}
	}
	if w := want[running]; w.state != "running" || w.percent != 42.8 {
		t.Fatalf("API shows %s as %+v, want running at 42.8%% (3 of 7)", running, w)
	}

	const key = "test-key-Z9"
	before := len(shim.requests())
	dom := dumpDOM(t, browser, shim.srv.URL+"/api/dashboard?code="+key)

	if !strings.Contains(dom, `data-loaded="true"`) {
		t.Fatalf("the page never finished a refresh (script blocked or fetch failed); DOM:\n%s", dom)
	}
	for _, run := range []string{running, finished} {
		attrs, text, ok := rowAttrs(dom, run)
		if !ok {
			t.Errorf("no row for run %s in the DOM:\n%s", run, dom)
			continue
		}
		w := want[run]
		if attrs["state"] != w.state || attrs["percent"] != strconv.FormatFloat(w.percent, 'f', -1, 64) {
			t.Errorf("row %s: state %q percent %q, want %q %v (as the API says)", run, attrs["state"], attrs["percent"], w.state, w.percent)
		}
		if label := fmt.Sprintf("%.1f%%", w.percent); !strings.Contains(text, run) || !strings.Contains(text, w.state) || !strings.Contains(text, label) {
			t.Errorf("row %s text %q lacks the ID, state %q or %q", run, text, w.state, label)
		}
	}
	if !strings.Contains(dom, "baton-test/inst-a/101") {
		t.Errorf("the leader (baton-test/inst-a/101) is not shown")
	}

	// Every API call the page made sent the key as the x-functions-key header and in no URL,
	// and it called both endpoints.
	var sawRuns, sawLeader bool
	browserRequests, keys := shim.requests()[before:], shim.functionKeys()[before:]
	for i, uri := range browserRequests {
		if strings.HasPrefix(uri, "/api/dashboard") {
			continue // the page itself, opened with ?code= as Azure links it
		}
		if strings.Contains(uri, key) || strings.Contains(uri, "code=") {
			t.Errorf("page fetched %s: the key is in the URL", uri)
		}
		if keys[i] != key {
			t.Errorf("page fetched %s with x-functions-key %q, want %q", uri, keys[i], key)
		}
		sawRuns = sawRuns || strings.HasPrefix(uri, "/api/runs?")
		sawLeader = sawLeader || strings.HasPrefix(uri, "/api/leader")
	}
	if !sawRuns || !sawLeader {
		t.Errorf("page requests %v: want /api/runs and /api/leader", browserRequests)
	}
	checkLinksWithoutKey(t, dom, shim.srv.URL+"/api/dashboard", key)
}

// checkLinksWithoutKey: no link on the page carries the key, and the links to runs are built
// on the address bar as the page left it (so it no longer holds ?code=).
func checkLinksWithoutKey(t *testing.T, dom, pageURL, key string) {
	t.Helper()
	hrefs := regexp.MustCompile(`\bhref="([^"]*)"`).FindAllStringSubmatch(dom, -1)
	runLinks := 0
	for _, m := range hrefs {
		href := html.UnescapeString(m[1])
		if strings.Contains(href, key) || strings.Contains(href, "code=") {
			t.Errorf("link %s carries the key", href)
		}
		if strings.Contains(href, "run=") {
			runLinks++
			if !strings.HasPrefix(href, pageURL+"#") {
				t.Errorf("link to a run %s, want %s#… (the address bar without the key)", href, pageURL)
			}
		}
	}
	if runLinks == 0 {
		t.Errorf("no link to a run on the page; the check proves nothing:\n%s", dom)
	}
}

// On an instance without the schedule (GET /api/runs?occurrences= answers 503), the page
// still lists the runs and says why the schedule panel is empty.
func TestDashboard_Browser_WithoutSchedule(t *testing.T) {
	browser := chromium(t)
	e := newAPIEnv(t, envWithoutSchedule{})
	shim := newHostShim(t, e.hs.URL)
	out := e.invoke(fnRuns, goldenHTTP(t, "http-runs-post.json", withHeader("Idempotency-Key", "no-schedule")))
	v := out.json(t)
	if out.Status != http.StatusAccepted {
		t.Fatalf("POST: %d %v", out.Status, v)
	}
	dom := dumpDOM(t, browser, shim.srv.URL+"/api/dashboard")
	if !strings.Contains(dom, `data-loaded="true"`) {
		t.Fatalf("the page never finished a refresh; DOM:\n%s", dom)
	}
	if _, _, ok := rowAttrs(dom, v["run"].(string)); !ok {
		t.Errorf("no row for run %s", v["run"])
	}
	m := regexp.MustCompile(`<div id="schedule-error" class="error">([^<]*)</div>`).FindStringSubmatch(dom)
	if m == nil || !strings.Contains(m[1], "503 unavailable: the schedule is not configured") {
		t.Errorf("schedule panel error: %v; want the 503 in words", m)
	}
}

// scripts/ensure-chromium.sh, with stub commands on PATH: it leaves an installed chromium
// alone, installs it with apt-get as root, and fails with a clear message otherwise.
func TestEnsureChromiumScript(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	chmod, err := exec.LookPath("chmod")
	if err != nil {
		t.Skip("no chmod")
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "scripts", "ensure-chromium.sh"))
	if err != nil {
		t.Fatal(err)
	}
	stub := func(dir, name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!"+bash+"\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name     string
		uid      string
		chromium bool
		aptGet   bool
		wantOK   bool
		wantOut  string // in stdout+stderr
		wantApt  string // apt-get calls, one per line
	}{
		{name: "already installed", uid: "1000", chromium: true, aptGet: true, wantOK: true, wantOut: "/chromium"},
		{name: "root installs it", uid: "0", aptGet: true, wantOK: true, wantOut: "/chromium",
			wantApt: "update -q\ninstall -y -q --no-install-recommends chromium\n"},
		{name: "not root", uid: "1000", aptGet: true, wantOut: "sudo apt-get update && sudo apt-get install -y chromium"},
		{name: "root without apt-get", uid: "0", wantOut: "apt-get is not available"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			log := filepath.Join(dir, "apt.log")
			stub(dir, "id", `echo `+c.uid)
			if c.chromium {
				stub(dir, "chromium", "exit 0")
			}
			if c.aptGet {
				// apt-get install creates chromium, as the real package does.
				stub(dir, "apt-get", `echo "$*" >> `+log+`; case "$1" in install) printf '#!`+bash+`\nexit 0\n' > `+dir+`/chromium; `+chmod+` +x `+dir+`/chromium;; esac`)
			}
			cmd := exec.Command(bash, script)
			cmd.Env = []string{"PATH=" + dir}
			out, err := cmd.CombinedOutput()
			if (err == nil) != c.wantOK || !strings.Contains(string(out), c.wantOut) {
				t.Errorf("got err %v, output:\n%s\nwant ok=%v and output containing %q", err, out, c.wantOK, c.wantOut)
			}
			apt, _ := os.ReadFile(log)
			if string(apt) != c.wantApt {
				t.Errorf("apt-get calls:\n%q\nwant\n%q", apt, c.wantApt)
			}
		})
	}
}

// cdp drives headless chromium over the DevTools protocol on a pipe (--remote-debugging-pipe:
// the browser reads NUL-terminated JSON commands on fd 3 and writes replies and events on
// fd 4), so a test can click, read the live DOM and take screenshots with no dependency.
type cdp struct {
	t       testing.TB
	cmd     *exec.Cmd
	w       io.WriteCloser
	session string

	mu      sync.Mutex
	nextID  int
	pending map[int]chan cdpReply
	dead    chan struct{}
}

type cdpReply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// startBrowser starts chromium with env added to its environment, opens one page at
// about:blank with the given viewport and attaches to it.
func startBrowser(t testing.TB, exe string, width, height int, env ...string) *cdp {
	t.Helper()
	toChrome, chromeIn, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	chromeOut, fromChrome, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--hide-scrollbars", "--font-render-hinting=none", "--remote-debugging-pipe", "--user-data-dir="+t.TempDir(),
		fmt.Sprintf("--window-size=%d,%d", width, height), "about:blank")
	cmd.Env = append(os.Environ(), env...)
	cmd.ExtraFiles = []*os.File{toChrome, fromChrome} // fd 3: its input, fd 4: its output
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	toChrome.Close()
	fromChrome.Close()
	b := &cdp{t: t, cmd: cmd, w: chromeIn, pending: map[int]chan cdpReply{}, dead: make(chan struct{})}
	t.Cleanup(func() {
		chromeIn.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		chromeOut.Close()
	})
	go func() {
		defer close(b.dead)
		r := bufio.NewReader(chromeOut)
		for {
			msg, err := r.ReadBytes(0)
			if err != nil {
				return
			}
			var m struct {
				ID int `json:"id"`
				cdpReply
			}
			if json.Unmarshal(msg[:len(msg)-1], &m) != nil || m.ID == 0 {
				continue // an event
			}
			b.mu.Lock()
			ch := b.pending[m.ID]
			delete(b.pending, m.ID)
			b.mu.Unlock()
			if ch != nil {
				ch <- m.cdpReply
			}
		}
	}()
	var targets struct {
		TargetInfos []struct{ TargetID, Type string }
	}
	b.call("Target.getTargets", nil, &targets)
	for _, ti := range targets.TargetInfos {
		if ti.Type == "page" {
			var att struct{ SessionID string }
			b.call("Target.attachToTarget", map[string]any{"targetId": ti.TargetID, "flatten": true}, &att)
			b.session = att.SessionID
			break
		}
	}
	if b.session == "" {
		t.Fatalf("chromium opened no page; stderr:\n%s", stderr.String())
	}
	b.call("Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}, nil)
	return b
}

// call sends one command (to the page once attached) and decodes its result into out.
func (b *cdp) call(method string, params any, out any) {
	b.t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	b.mu.Lock()
	b.nextID++
	id := b.nextID
	ch := make(chan cdpReply, 1)
	b.pending[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method, "params": params}
	if b.session != "" {
		msg["sessionId"] = b.session
	}
	raw, _ := json.Marshal(msg)
	if _, err := b.w.Write(append(raw, 0)); err != nil {
		b.t.Fatalf("cdp %s: %v", method, err)
	}
	select {
	case r := <-ch:
		if r.Error != nil {
			b.t.Fatalf("cdp %s: %s", method, r.Error.Message)
		}
		if out != nil {
			if err := json.Unmarshal(r.Result, out); err != nil {
				b.t.Fatalf("cdp %s: %v in %s", method, err, r.Result)
			}
		}
	case <-b.dead:
		b.t.Fatalf("cdp %s: chromium exited", method)
	case <-time.After(time.Minute):
		b.t.Fatalf("cdp %s: no reply in a minute", method)
	}
}

// eval runs a JavaScript expression in the page (awaiting a promise) and decodes its value.
func (b *cdp) eval(expr string, out any) {
	b.t.Helper()
	var r struct {
		Result           struct{ Value json.RawMessage }
		ExceptionDetails *struct {
			Text      string
			Exception struct{ Description string }
		}
	}
	b.call("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &r)
	if r.ExceptionDetails != nil {
		b.t.Fatalf("eval %s: %s %s", expr, r.ExceptionDetails.Text, r.ExceptionDetails.Exception.Description)
	}
	if out != nil && len(r.Result.Value) > 0 {
		if err := json.Unmarshal(r.Result.Value, out); err != nil {
			b.t.Fatalf("eval %s: %v in %s", expr, err, r.Result.Value)
		}
	}
}

// waitFor evaluates expr until it is truthy (up to 30 s) and returns its last value.
func (b *cdp) waitFor(what, expr string) {
	b.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var ok bool
		b.eval("(() => { try { return !!("+expr+"); } catch (e) { return false; } })()", &ok) // the page may be loading
		if ok {
			return
		}
		if time.Now().After(deadline) {
			var body string
			b.eval("document.body.innerText", &body)
			b.t.Fatalf("waited 30 s for %s (%s); the page shows:\n%s", what, expr, body)
		}
		<-tick.C
	}
}

func (b *cdp) navigate(url string) {
	b.t.Helper()
	b.call("Page.navigate", map[string]any{"url": url}, nil)
}

// screenshot saves the whole page as a PNG when dir is set.
func (b *cdp) screenshot(dir, name string) {
	b.t.Helper()
	if dir == "" {
		return
	}
	var h int
	b.eval("Math.ceil(document.documentElement.scrollHeight)", &h)
	var shot struct{ Data []byte }
	b.call("Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true,
		"clip": map[string]any{"x": 0, "y": 0, "width": 1280, "height": h, "scale": 1}}, &shot)
	if err := os.WriteFile(filepath.Join(dir, name), shot.Data, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// operatorLedger is what seedOperatorLedger wrote: the schedule's latest occurrences (newest
// first) and the run IDs of interest.
type operatorLedger struct {
	occ                      []time.Time
	missed, gap, skipped     string
	failover, timedOut, good string
}

// seedOperatorLedger writes a history the way the coordinator and workers leave it, straight
// into the ledger on Azurite: for the daily schedule's latest occurrences, newest first,
// occ[1] succeeded, occ[2] missed, occ[3] nothing at all (a gap), occ[4] skipped, occ[5]
// partial after a failover (two segments, partitions by two workers, two failed), occ[6]
// timed out, and occ[7] to occ[29] succeeded (a month of history).
func seedOperatorLedger(t *testing.T, e *apiEnv) operatorLedger {
	t.Helper()
	ctx := testCtx(t)
	if err := e.store.EnsureContainer(ctx); err != nil {
		t.Fatal(err)
	}
	var o operatorLedger
	at := time.Now().UTC()
	for range 30 {
		p, err := e.schedule.Prev(at)
		if err != nil {
			t.Fatal(err)
		}
		o.occ = append(o.occ, p)
		at = p.Add(-time.Second)
	}
	instA := ledger.Holder{App: "baton-test", Instance: "inst-a", PID: 101}
	instB := ledger.Holder{App: "baton-test", Instance: "inst-b", PID: 202}
	timer := func(i int, state ledger.State, reason string, parts int) *ledger.Manifest {
		occ := o.occ[i]
		m := &ledger.Manifest{RunID: coordinator.TimerRunID(occ), Trigger: ledger.TriggerTimer, Occurrence: occ, Epoch: int64(100 - i),
			Leader: instA, Segments: []ledger.Segment{{Epoch: int64(100 - i), From: 0}}, Job: "synthetic", State: state, Reason: reason,
			Partitions: parts, PlanDone: parts > 0, Checkpoint: ledger.Checkpoint{Batches: 1, Next: parts}, BatchSize: 100,
			Created: occ.Add(800 * time.Millisecond)}
		if parts > 0 {
			m.Enqueued = m.Created.Add(150 * time.Millisecond)
			m.Deadline = m.Enqueued.Add(time.Hour)
			m.Finished = m.Enqueued.Add(42 * time.Second)
		} else {
			m.Segments, m.Created = nil, occ
			if state == ledger.StateMissed {
				m.Epoch, m.Leader, m.Created = 0, ledger.Holder{}, occ.Add(26*time.Hour)
			}
		}
		return m
	}
	var ms []*ledger.Manifest

	good := timer(1, ledger.StateSucceeded, "", 4)
	good.Succeeded = 4
	ms = append(ms, good)
	ms = append(ms, timer(2, ledger.StateMissed, "no tick fired: the app was stopped across this occurrence", 0))
	ms = append(ms, timer(4, ledger.StateSkipped, fmt.Sprintf("run %s was still in progress (BATON_OVERLAP=skip)", coordinator.TimerRunID(o.occ[5])), 0))
	fo := timer(5, ledger.StatePartial, "2 of 12 partitions failed", 12)
	fo.Epoch, fo.Leader, fo.Segments = 96, instB, []ledger.Segment{{Epoch: 95, From: 0}, {Epoch: 96, From: 7}}
	fo.Succeeded, fo.Failed = 10, 2
	ms = append(ms, fo)
	to := timer(6, ledger.StateTimedOut, "3 of 5 partitions had no result 1h0m0s after the deadline", 5)
	to.Succeeded, to.Failed = 2, 3
	ms = append(ms, to)
	for i := 7; i < len(o.occ); i++ {
		m := timer(i, ledger.StateSucceeded, "", 4)
		m.Succeeded = 4
		ms = append(ms, m)
	}
	for _, m := range ms {
		if err := e.store.CreateManifest(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	o.good, o.missed, o.gap, o.skipped, o.failover, o.timedOut = good.RunID, coordinator.TimerRunID(o.occ[2]),
		coordinator.TimerRunID(o.occ[3]), coordinator.TimerRunID(o.occ[4]), fo.RunID, to.RunID

	// The failover run's results: partitions 0-6 enqueued by epoch 95, 7-11 by epoch 96; inst-a
	// worked the first seven, inst-b the rest; 3 and 9 failed after five attempts.
	var failed []ledger.FailedPart
	for i := range 12 {
		w, epoch := instA, int64(95)
		if i >= 7 {
			w, epoch = instB, 96
		}
		r := ledger.Result{Run: fo.RunID, Index: i, Epoch: epoch, OK: true, Output: json.RawMessage(`{"v":1}`), Attempts: 1, Worker: w,
			Started: fo.Enqueued.Add(time.Second), Finished: fo.Enqueued.Add(2 * time.Second)}
		if i == 3 || i == 9 {
			r.OK, r.Output, r.Attempts = false, nil, 5
			r.Error = fmt.Sprintf("permanent failure: synthetic: index %d fails permanently", i)
			failed = append(failed, ledger.FailedPart{Index: i, Error: r.Error})
		}
		if err := e.store.PutResult(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	reports := []ledger.Report{
		{Run: fo.RunID, Job: "synthetic", State: ledger.StatePartial, Partitions: 12, Succeeded: 10, Failed: 2, FailedList: failed,
			Aggregate: json.RawMessage(`{"partitions":12,"ok":10,"failed":2,"sumV":10}`), Aggregator: instB, Created: fo.Finished},
		{Run: good.RunID, Job: "synthetic", State: ledger.StateSucceeded, Partitions: 4, Succeeded: 4,
			Aggregate: json.RawMessage(`{"partitions":4,"ok":4,"failed":0,"sumV":4}`), Aggregator: instA, Created: good.Finished},
	}
	for _, r := range reports {
		if _, err := e.store.ClaimReport(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	return o
}

// localTime is the page's rendering of t in a fixed-offset zone (the page's local()).
func localTime(t time.Time, zone *time.Location) string {
	l := t.In(zone)
	_, off := l.Zone()
	sign := "+"
	if off < 0 {
		sign, off = "-", -off
	}
	return l.Format("2006-01-02 15:04:05") + fmt.Sprintf(" (UTC%s%02d:%02d)", sign, off/3600, off%3600/60)
}

// The operator's dashboard in a real browser, driven over the DevTools protocol: the
// schedule panel (words, NCRONTAB, the next three occurrences in UTC and in the browser's
// zone, the policies), the occurrence strip with a missed, a skipped and a no-record cell,
// a run's detail opened by URL (two segments, failed partitions with attempts, workers,
// aggregate, reason), Run now (202 followed, then 409 in words), and the filters. With
// BATON_SCREENSHOTS=<dir> it saves a PNG of each view there (scripts/screenshots.sh).
func TestDashboard_Operator(t *testing.T) {
	exe := chromium(t)
	shots := os.Getenv("BATON_SCREENSHOTS")
	e := newAPIEnv(t)
	o := seedOperatorLedger(t, e)
	shim := newHostShim(t, e.hs.URL)
	const key = "op-key-Q7"
	dash := shim.srv.URL + "/api/dashboard?code=" + key
	// Asia/Kolkata has no daylight saving time: UTC+05:30 all year.
	kolkata := time.FixedZone("IST", 5*3600+1800)
	b := startBrowser(t, exe, 1280, 900, "TZ=Asia/Kolkata", "LANG=en_US.UTF-8")

	b.navigate(dash)
	b.waitFor("the first refresh", `document.body.dataset.loaded === "true" && document.querySelectorAll("#strip li").length > 0`)

	// Schedule panel.
	var sched struct {
		Words, Expr, Overlap, Misfire string
		Next                          []struct{ UTC, Text string }
	}
	b.eval(`({words: document.getElementById("sched-words").textContent, expr: document.getElementById("sched-expr").textContent,
		overlap: document.getElementById("sched-overlap").textContent, misfire: document.getElementById("sched-misfire").textContent,
		next: Array.from(document.querySelectorAll("#sched-next li")).map(li => ({utc: li.dataset.utc, text: li.textContent}))})`, &sched)
	if sched.Words != "at 03:00 UTC, every day" || sched.Expr != "0 0 3 * * *" {
		t.Errorf("schedule shown as %q / %q", sched.Words, sched.Expr)
	}
	if !strings.HasPrefix(sched.Overlap, "skip") || !strings.HasPrefix(sched.Misfire, "skip") || !strings.Contains(sched.Misfire, "starting deadline 1 h") {
		t.Errorf("policies shown as %q / %q", sched.Overlap, sched.Misfire)
	}
	if len(sched.Next) != 3 {
		t.Fatalf("next occurrences: %+v, want 3", sched.Next)
	}
	next := o.occ[0]
	for i, n := range sched.Next {
		var err error
		if next, err = e.schedule.Next(next); err != nil {
			t.Fatal(err)
		}
		if got, _ := time.Parse(time.RFC3339, n.UTC); !got.Equal(next) {
			t.Errorf("next[%d] = %s, want %s", i, n.UTC, next)
		}
		if u, l := next.Format("2006-01-02 15:04:05Z"), localTime(next, kolkata); !strings.Contains(n.Text, u) || !strings.Contains(n.Text, l) {
			t.Errorf("next[%d] reads %q; want UTC %q and local %q", i, n.Text, u, l)
		}
	}

	// The strip: one cell per occurrence, the gap as its own "no record" cell, with words.
	var cells []struct{ Run, State, Label, Glyph string }
	b.eval(`Array.from(document.querySelectorAll("#strip li")).map(li => ({run: li.dataset.run, state: li.dataset.state,
		label: li.firstChild.getAttribute("aria-label"), glyph: li.firstChild.textContent}))`, &cells)
	if len(cells) != 30 || cells[0].Run != coordinator.TimerRunID(o.occ[29]) || cells[0].State != "succeeded" {
		t.Errorf("strip has %d cells starting %+v, want 30 starting with %s succeeded", len(cells), cells[0], coordinator.TimerRunID(o.occ[29]))
	}
	byRun := map[string]int{}
	for i, c := range cells {
		byRun[c.Run] = i
	}
	want := []struct{ run, state, words string }{
		{o.good, "succeeded", "succeeded"}, {o.missed, "missed", "missed"}, {o.gap, "none", "no record"},
		{o.skipped, "skipped", "skipped"}, {o.failover, "partial", "partial"}, {o.timedOut, "timed-out", "timed out"},
	}
	for _, w := range want {
		i, ok := byRun[w.run]
		if !ok {
			t.Errorf("no strip cell for %s", w.run)
			continue
		}
		if c := cells[i]; c.State != w.state || !strings.Contains(c.Label, w.words) || c.Glyph == "" {
			t.Errorf("cell %s: %+v, want state %s and words %q", w.run, c, w.state, w.words)
		}
	}
	// Oldest left, newest right: the gap sits between the skipped and the missed cells.
	if !(byRun[o.skipped]+1 == byRun[o.gap] && byRun[o.gap]+1 == byRun[o.missed]) {
		t.Errorf("strip order: skipped %d, gap %d, missed %d; want adjacent, oldest first", byRun[o.skipped], byRun[o.gap], byRun[o.missed])
	}
	if c := cells[byRun[o.missed]]; !strings.Contains(c.Label, "the app was stopped") {
		t.Errorf("missed cell label %q lacks the reason", c.Label)
	}

	// Keyboard: Tab reaches the strip's cells (the gap's too), and Enter on a cell opens its run.
	var focusable bool
	b.eval(`(() => { const c = document.querySelector('#strip li[data-run="`+o.gap+`"] .cell'); c.focus(); return c.tabIndex >= 0 && document.activeElement === c; })()`, &focusable)
	if !focusable {
		t.Error("the no-record cell cannot take the keyboard focus")
	}
	b.eval(`document.querySelector('#strip li[data-run="`+o.timedOut+`"] a').focus()`, nil)
	for _, typ := range []string{"keyDown", "keyUp"} {
		b.call("Input.dispatchKeyEvent", map[string]any{"type": typ, "key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13, "text": "\r"}, nil)
	}
	b.waitFor("the timed-out run's detail after Enter", `location.hash === "#run=`+o.timedOut+`" && document.getElementById("detail").dataset.state === "timed-out" &&
		(document.getElementById("detail-reason") || {}).textContent.includes("no result")`)

	// Run detail by URL (what an alert links to): a fresh load straight onto #run=<id>.
	b.navigate(dash + "#run=" + o.failover)
	b.waitFor("the failover run's detail", `document.getElementById("detail").dataset.state === "partial" && document.querySelector("#detail-segments")`)
	var det struct {
		Epochs    []string
		Leaders   []string
		Failures  [][]string
		Workers   []string
		Reason    string
		Aggregate string
		Timeline  []string
	}
	b.eval(`({epochs: Array.from(document.querySelectorAll("#detail-segments tbody tr")).map(r => r.dataset.epoch),
		leaders: Array.from(document.querySelectorAll("#detail-segments tbody tr")).map(r => r.cells[2].textContent),
		failures: Array.from(document.querySelectorAll("#detail-failures tbody tr")).map(r => Array.from(r.cells).map(c => c.textContent)),
		workers: Array.from(document.querySelectorAll("#detail-workers tbody tr")).map(r => Array.from(r.cells).map(c => c.textContent).join(" ")),
		reason: (document.getElementById("detail-reason") || {}).textContent || "",
		aggregate: (document.getElementById("detail-aggregate") || {}).textContent || "",
		timeline: Array.from(document.querySelectorAll("#detail-timeline tbody tr")).map(r => r.dataset.step)})`, &det)
	if strings.Join(det.Epochs, ",") != "95,96" || !strings.Contains(det.Leaders[1], "inst-b") {
		t.Errorf("segments: epochs %v leaders %v; want 95,96 with inst-b leading the second", det.Epochs, det.Leaders)
	}
	if len(det.Failures) != 2 || det.Failures[0][0] != "3" || det.Failures[0][2] != "5" || !strings.Contains(det.Failures[0][1], "index 3 fails") ||
		!strings.Contains(det.Failures[1][3], "inst-b") {
		t.Errorf("failed partitions: %v; want 3 and 9 with 5 attempts and their workers", det.Failures)
	}
	if len(det.Workers) != 2 || !strings.Contains(det.Workers[0], "inst-a/101 7 1") || !strings.Contains(det.Workers[1], "inst-b/202 5 1") {
		t.Errorf("workers: %v; want inst-a 7 partitions (1 failed), inst-b 5 (1 failed)", det.Workers)
	}
	if !strings.Contains(det.Reason, "2 of 12 partitions failed") || !strings.Contains(det.Aggregate, `"sumV": 10`) {
		t.Errorf("reason %q aggregate %q", det.Reason, det.Aggregate)
	}
	if strings.Join(det.Timeline, ",") != "occurrence,created,planned and enqueued,finished,deadline" {
		t.Errorf("timeline steps %v", det.Timeline)
	}
	b.screenshot(shots, "dashboard-run-detail.png")

	// A missed occurrence's detail says why.
	b.navigate(dash + "#run=" + o.missed)
	b.waitFor("the missed record's reason", `document.getElementById("detail").dataset.state === "missed" &&
		(document.getElementById("detail-reason") || {}).textContent.includes("the app was stopped")`)

	// Filters: state=missed shows only the missed record; the select follows the URL.
	b.navigate(dash)
	b.waitFor("the runs table", `document.querySelectorAll("#runs tbody tr").length >= 5`)
	b.eval(`(() => { const s = document.getElementById("f-state"); s.value = "missed"; s.dispatchEvent(new Event("change")); })()`, nil)
	b.waitFor("the filtered table", `location.hash.includes("state=missed") && Array.from(document.querySelectorAll("#runs tbody tr")).every(r => r.dataset.state === "missed") && document.querySelectorAll("#runs tbody tr").length === 1`)
	b.screenshot(shots, "dashboard-filtered.png")
	b.eval(`(() => { const s = document.getElementById("f-state"); s.value = ""; s.dispatchEvent(new Event("change"));
		const g = document.getElementById("f-trigger"); g.value = "timer"; g.dispatchEvent(new Event("change")); })()`, nil)
	b.waitFor("the timer-only table", `location.hash === "#trigger=timer" && document.querySelectorAll("#runs tbody tr").length === 20 &&
		Array.from(document.querySelectorAll("#runs tbody tr")).every(r => r.dataset.trigger === "timer")`)
	// Paging: the older page holds the other eight timer runs, the oldest last.
	b.eval(`document.getElementById("older").click()`, nil)
	oldest := coordinator.TimerRunID(o.occ[len(o.occ)-1])
	b.waitFor("the older page", `document.querySelectorAll("#runs tbody tr").length === 8 &&
		document.querySelector("#runs tbody tr:last-child").dataset.run === "`+oldest+`" && document.getElementById("older").hidden &&
		!document.getElementById("newer").hidden`)
	b.eval(`document.getElementById("newer").click()`, nil)
	b.waitFor("the first page again", `document.querySelectorAll("#runs tbody tr").length === 20`)

	// Run now: 202, shown in words, and the page follows the new run.
	b.navigate(dash)
	b.waitFor("the page", `document.body.dataset.loaded === "true"`)
	b.eval(`document.getElementById("runnow").click()`, nil)
	b.waitFor("the 202 answer", `document.getElementById("runnow-msg").dataset.status === "202"`)
	var started struct{ Msg, Hash, Detail string }
	b.waitFor("the new run's detail", `document.getElementById("detail").dataset.run && location.hash.includes("run=manual-") &&
		document.getElementById("detail").dataset.run === new URLSearchParams(location.hash.slice(1)).get("run")`)
	b.eval(`({msg: document.getElementById("runnow-msg").textContent, hash: location.hash, detail: document.getElementById("detail").dataset.run})`, &started)
	if !strings.HasPrefix(started.Msg, "Started run "+started.Detail) || !strings.Contains(started.Msg, "Following it") {
		t.Errorf("after Run now: message %q, following %q", started.Msg, started.Detail)
	}
	b.screenshot(shots, "dashboard-run-now.png")

	// Run now again while that run is in progress: 409, in words, naming the active run.
	b.eval(`document.getElementById("runnow").click()`, nil)
	b.waitFor("the 409 answer", `document.getElementById("runnow-msg").dataset.status === "409"`)
	var msg string
	b.eval(`document.getElementById("runnow-msg").textContent`, &msg)
	if !strings.HasPrefix(msg, "Not started: run "+started.Detail+" is still in progress") || !strings.Contains(msg, "Leader: baton-test/inst-a/101") {
		t.Errorf("409 shown as %q", msg)
	}
	b.screenshot(shots, "dashboard-run-now-409.png")

	// The overview, now with a leader and a manual run in progress.
	b.navigate(dash)
	b.waitFor("the overview", `document.body.dataset.loaded === "true" && document.querySelectorAll("#strip li").length === 30 &&
		document.getElementById("leader").dataset.holder === "inst-a"`)
	b.screenshot(shots, "dashboard-overview.png")

	// A longer strip (?occurrences=40 on the page URL) reaches back before the ledger's first
	// run: those ten cells say so instead of showing as gaps.
	b.navigate(shim.srv.URL + "/api/dashboard?occurrences=40&code=" + key)
	b.waitFor("a strip of 40", `document.querySelectorAll("#strip li").length === 40`)
	var kinds []string
	b.eval(`Array.from(document.querySelectorAll("#strip li")).map(li => li.dataset.state)`, &kinds)
	for i, k := range kinds {
		if (k == "before") != (i < 10) {
			t.Errorf("strip cell %d (oldest first) is %q; want the ten oldest, and only them, before the ledger", i, k)
		}
	}

	// The key left the address bar, and no link on the page (resolved, as a copy would take it)
	// carries it.
	var seen struct {
		Location string
		Links    []string
	}
	b.eval(`({location: location.href, links: Array.from(document.querySelectorAll("a[href]")).map(a => a.href)})`, &seen)
	if strings.Contains(seen.Location, key) || len(seen.Links) == 0 {
		t.Errorf("address bar %s (want it without the key), %d links", seen.Location, len(seen.Links))
	}
	for _, href := range seen.Links {
		if strings.Contains(href, key) {
			t.Errorf("link %s carries the key", href)
		}
	}
	// Every API call the page made sent the key as a header and in no URL, the POSTs included.
	keys := shim.functionKeys()
	for i, uri := range shim.requests() {
		if strings.HasPrefix(uri, "/api/runs") || strings.HasPrefix(uri, "/api/leader") {
			if strings.Contains(uri, key) || keys[i] != key {
				t.Errorf("page fetched %s with x-functions-key %q: want the key %q in the header only", uri, keys[i], key)
			}
		}
	}
	if n := e.countRuns(); n != 29 {
		t.Errorf("ledger holds %d runs, want 29 (28 seeded + 1 started; the 409 started none)", n)
	}
}

// BenchmarkDashboard_Browser1000 measures the dashboard in headless chromium over 1,000
// finished runs on Azurite (seedFinishedRuns): from navigation start to the first complete
// view (page, one GET /api/runs with ?occurrences=30, one GET /api/leader, render), as the
// page marks it ("ms/view"). The handler's caches are warm after the first load, as they are
// for an operator who keeps the page open.
func BenchmarkDashboard_Browser1000(b *testing.B) {
	exe := chromium(b)
	e := newAPIEnv(b)
	seedFinishedRuns(b, e, 1000)
	shim := newHostShim(b, e.hs.URL)
	br := startBrowser(b, exe, 1280, 900)
	load := func(i int) float64 {
		br.eval("window.__old = true", nil)
		br.navigate(fmt.Sprintf("%s/api/dashboard?i=%d", shim.srv.URL, i))
		br.waitFor("the first view", `!window.__old && performance.getEntriesByName("baton-first-refresh").length === 1 &&
			document.querySelectorAll("#runs tbody tr").length === 20 && document.querySelectorAll("#strip li").length === 30`)
		var ms float64
		br.eval(`performance.getEntriesByName("baton-first-refresh")[0].startTime`, &ms)
		return ms
	}
	load(0)
	var total float64
	n := 0
	for b.Loop() {
		n++
		total += load(n)
	}
	b.ReportMetric(total/float64(n), "ms/view")
}
