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
	"github.com/batonfn/baton/internal/engine/api"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/limit"
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
// seeded by real runs (one finished, one three partitions of seven in), it opens on the app's
// three schedules and shows both runs with the state and percentage the API reports, and the
// leader; opened with ?code=<key>, it sends the key as the x-functions-key header and puts it in
// no request URL and no link.
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
	// Run now of nightly takes the scheduler lease, so the page has a leader to show.
	if out := e.invoke(fnSchedules, goldenHTTP(t, "http-schedules-run.json")); out.Status != http.StatusAccepted {
		t.Fatalf("run now: %d %s", out.Status, out.Body)
	}

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
	if err != nil || len(list.Runs) != 3 {
		t.Fatalf("API listing: %v %+v, want 3 runs", err, list)
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
	for _, name := range []string{"nightly", "hourly", "reports"} {
		if !regexp.MustCompile(`<tr\b[^>]*\bdata-schedule="` + name + `"`).MatchString(dom) {
			t.Errorf("no row for schedule %s on the schedules page", name)
		}
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
	// and it called every endpoint it shows.
	saw := map[string]bool{}
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
		for _, p := range []string{"/api/schedules?", "/api/runs?", "/api/leader", "/api/limits"} {
			saw[p] = saw[p] || strings.HasPrefix(uri, p)
		}
	}
	if len(saw) != 4 || !saw["/api/schedules?"] || !saw["/api/runs?"] || !saw["/api/leader"] || !saw["/api/limits"] {
		t.Errorf("page requests %v: want /api/schedules, /api/runs, /api/limits and /api/leader", browserRequests)
	}
	checkLinksWithoutKey(t, dom, shim.srv.URL+"/api/dashboard", key)
}

// The dashboard's limits in a real browser: the limit the synthetic job runs under, its slots,
// waiting bundle and slow-down written by the real limiter to its blob on Azurite, shows the
// numbers the API reports, who holds the slots, and the slow-down with its reason and times.
func TestDashboard_Browser_Limits(t *testing.T) {
	browser := chromium(t)
	e := newAPIEnv(t)
	shim := newHostShim(t, e.hs.URL)
	ctx := testCtx(t)
	if err := e.store.EnsureContainer(ctx); err != nil {
		t.Fatal(err)
	}
	spec := limit.Spec{Name: testLimit, MaxInFlight: 4}
	for _, b := range []struct {
		id string
		n  int
	}{{"bundle-1", 3}, {"bundle-2", 5}, {"bundle-3", 6}} {
		if _, _, err := e.limiter.Acquire(ctx, spec, b.id, b.n); err != nil {
			t.Fatal(err)
		}
	}
	until := time.Now().UTC().Add(10 * time.Minute).Truncate(time.Second)
	if err := e.limiter.SlowDown(ctx, testLimit, until, "429 Too Many Requests"); err != nil {
		t.Fatal(err)
	}

	resp, err := http.Get(shim.srv.URL + "/api/limits/" + testLimit)
	if err != nil {
		t.Fatal(err)
	}
	var v api.LimitView
	err = json.NewDecoder(resp.Body).Decode(&v)
	resp.Body.Close()
	if err != nil || v.InFlight != 4 || v.Waiting != 6 || v.Started != 8 || !v.Slowed || v.SlowAt == nil {
		t.Fatalf("API: %v %+v, want 4 in flight, 6 waiting, 8 started, slowed", err, v)
	}

	dom := dumpDOM(t, browser, shim.srv.URL+"/api/dashboard")
	if !strings.Contains(dom, `data-loaded="true"`) {
		t.Fatalf("the page never finished a refresh; DOM:\n%s", dom)
	}
	m := regexp.MustCompile(`<tr\b[^>]*\bdata-limit="` + testLimit + `"[^>]*>(.*?)</tr>`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("no row for the limit %s; DOM:\n%s", testLimit, dom)
	}
	attrs := map[string]string{}
	for _, a := range regexp.MustCompile(`\bdata-([a-z]+)="([^"]*)"`).FindAllStringSubmatch(m[0][:strings.Index(m[0], ">")], -1) {
		attrs[a[1]] = a[2]
	}
	if attrs["inflight"] != "4" || attrs["waiting"] != "6" || attrs["started"] != "8" || attrs["slowed"] != "true" {
		t.Errorf("row attributes %v, want what the API says (4 in flight, 6 waiting, 8 started, slowed)", attrs)
	}
	text := html.UnescapeString(regexp.MustCompile(`<[^>]+>`).ReplaceAllString(m[1], " "))
	utc := func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }
	for _, want := range []string{"maxInFlight 4", "set by BATON_LIMITS", "job synthetic", "4 / 4", "6 partitions", "inst-a/101",
		"3 slots", "1 slot,", "slowed down", "until " + utc(until) + " (429 Too Many Requests), asked at " + utc(*v.SlowAt)} {
		if !strings.Contains(text, want) {
			t.Errorf("the limit's row %q lacks %q", text, want)
		}
	}
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

// On an instance without the scheduler (GET /api/schedules answers 503), the page still lists
// the runs and says why the schedules page is empty.
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
	m := regexp.MustCompile(`<div id="schedules-error" class="error">([^<]*)</div>`).FindStringSubmatch(dom)
	if m == nil || !strings.Contains(m[1], "503 unavailable: schedules are not configured") {
		t.Errorf("schedules page error: %v; want the 503 in words", m)
	}
}

// The host takes the key's parameter in any case (?Code=, ?CODE=), so the page does too: opened
// with ?Code=<key> and another parameter, it sends the key as the x-functions-key header, and
// no request URL carries the key or any of the page's parameters, and no link the key.
func TestDashboard_Browser_KeyParameterInAnyCase(t *testing.T) {
	browser := chromium(t)
	e := newAPIEnv(t)
	shim := newHostShim(t, e.hs.URL)
	if out := e.invoke(fnRuns, goldenHTTP(t, "http-runs-post.json", withHeader("Idempotency-Key", "key-case"))); out.Status != http.StatusAccepted {
		t.Fatalf("POST: %d %s", out.Status, out.Body)
	}
	const key = "case-key-M4"
	before := len(shim.requests())
	dom := dumpDOM(t, browser, shim.srv.URL+"/api/dashboard?Code="+key+"&CODE="+key+"&page=only")
	if !strings.Contains(dom, `data-loaded="true"`) {
		t.Fatalf("the page never finished a refresh; DOM:\n%s", dom)
	}
	calls := 0
	keys := shim.functionKeys()
	for i, uri := range shim.requests()[before:] {
		if strings.HasPrefix(uri, "/api/dashboard") {
			continue
		}
		calls++
		if l := strings.ToLower(uri); strings.Contains(uri, key) || strings.Contains(l, "code=") || strings.Contains(l, "page=") {
			t.Errorf("page fetched %s: the key or a page parameter is in the URL", uri)
		}
		if keys[before+i] != key {
			t.Errorf("page fetched %s with x-functions-key %q, want %q", uri, keys[before+i], key)
		}
	}
	if calls == 0 {
		t.Error("the page made no API call")
	}
	checkLinksWithoutKey(t, dom, shim.srv.URL+"/api/dashboard?page=only", key)
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
	// The whole page; only the viewport while a modal dialog dims it.
	b.eval(`document.querySelector("dialog[open]") ? window.innerHeight : Math.ceil(document.documentElement.scrollHeight)`, &h)
	var shot struct{ Data []byte }
	b.call("Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true,
		"clip": map[string]any{"x": 0, "y": 0, "width": 1280, "height": h, "scale": 1}}, &shot)
	if err := os.WriteFile(filepath.Join(dir, name), shot.Data, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// screenshotOf saves the element selector matches (with a margin) as a PNG when dir is set.
func (b *cdp) screenshotOf(dir, name, selector string) {
	b.t.Helper()
	if dir == "" {
		return
	}
	var r struct{ X, Y, Width, Height float64 }
	b.eval(`(function () { var r = document.querySelector(`+strconv.Quote(selector)+`).getBoundingClientRect();
		return {x: r.left + window.scrollX, y: r.top + window.scrollY, width: r.width, height: r.height}; })()`, &r)
	var shot struct{ Data []byte }
	b.call("Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true,
		"clip": map[string]any{"x": max(r.X-12, 0), "y": max(r.Y-12, 0), "width": r.Width + 24, "height": r.Height + 24, "scale": 1}}, &shot)
	if err := os.WriteFile(filepath.Join(dir, name), shot.Data, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// operatorLedger is what seedOperatorLedger wrote: nightly's and hourly's latest occurrences
// (newest first) and the run IDs of interest.
type operatorLedger struct {
	occ, hours                       []time.Time
	paused, missed, gap, skipped     string
	failover, timedOut, good, queued string
}

// seedOperatorLedger writes a history the way the scheduler and workers leave it, straight into
// the ledger on Azurite. For nightly's latest occurrences, newest first: occ[0] paused, occ[1]
// succeeded, occ[2] missed, occ[3] nothing at all (a gap), occ[4] skipped, occ[5] partial after
// a failover (two segments, partitions by two workers, two failed), occ[6] timed out, and
// occ[7] to occ[29] succeeded (a month of history); its cursor at occ[0]. For hourly: hours[0]
// queued behind hours[1] running, hours[2] succeeded, hours[3] skipped, hours[4] paused, and
// nothing before (its first heartbeat came after hours[5]). Reports has no history.
func seedOperatorLedger(t *testing.T, e *apiEnv) operatorLedger {
	t.Helper()
	ctx := testCtx(t)
	if err := e.store.EnsureContainer(ctx); err != nil {
		t.Fatal(err)
	}
	var o operatorLedger
	prev := func(s coordinator.Schedule, n int) []time.Time {
		var out []time.Time
		at := time.Now().UTC()
		for range n {
			p, ok := s.Cron.Prev(at)
			if !ok {
				t.Fatal("no earlier occurrence")
			}
			out = append(out, p)
			at = p.Add(-time.Second)
		}
		return out
	}
	o.occ, o.hours = prev(e.sched("nightly"), 30), prev(e.sched("hourly"), 6)
	instA := ledger.Holder{App: "baton-test", Instance: "inst-a", PID: 101}
	instB := ledger.Holder{App: "baton-test", Instance: "inst-b", PID: 202}
	record := func(schedule string, occ time.Time, epoch int64, state ledger.State, reason string, parts int) *ledger.Manifest {
		m := &ledger.Manifest{RunID: ledger.ScheduleRunID(schedule, occ), Trigger: ledger.TriggerTimer, Schedule: schedule, Occurrence: occ,
			Epoch: epoch, Leader: instA, Segments: []ledger.Segment{{Epoch: epoch, From: 0}}, Job: "synthetic", State: state, Reason: reason,
			Partitions: parts, PlanDone: parts > 0, Checkpoint: ledger.Checkpoint{Batches: 1, Next: parts}, BatchSize: 100,
			Created: occ.Add(800 * time.Millisecond)}
		switch {
		case parts > 0:
			m.Enqueued = m.Created.Add(150 * time.Millisecond)
			m.Deadline = m.Enqueued.Add(time.Hour)
			if state.Final() {
				m.Finished = m.Enqueued.Add(42 * time.Second)
			}
		case state == ledger.StateQueued:
			m.Segments, m.Epoch, m.Created = nil, 0, occ
		default:
			m.Segments, m.Created, m.Finished = nil, occ, occ
			if state == ledger.StateMissed {
				m.Epoch, m.Leader, m.Created, m.Finished = 0, ledger.Holder{}, occ.Add(26*time.Hour), occ.Add(26*time.Hour)
			}
		}
		return m
	}
	nightly := func(i int, state ledger.State, reason string, parts int) *ledger.Manifest {
		return record("nightly", o.occ[i], int64(100-i), state, reason, parts)
	}
	var ms []*ledger.Manifest
	ms = append(ms, nightly(0, ledger.StatePaused, "storage migration, back at 06:00 (ask Alice)", 0))
	good := nightly(1, ledger.StateSucceeded, "", 4)
	good.Succeeded = 4
	ms = append(ms, good)
	ms = append(ms, nightly(2, ledger.StateMissed, "found 26h0m0s late, past the catch-up window of 10m0s: the app was stopped", 0))
	ms = append(ms, nightly(4, ledger.StateSkipped, fmt.Sprintf("run %s is still in progress (overlap policy: skip)", ledger.ScheduleRunID("nightly", o.occ[5])), 0))
	fo := nightly(5, ledger.StatePartial, "2 of 12 partitions failed", 12)
	fo.Epoch, fo.Leader, fo.Segments = 96, instB, []ledger.Segment{{Epoch: 95, From: 0}, {Epoch: 96, From: 7}}
	fo.Succeeded, fo.Failed, fo.Params = 10, 2, json.RawMessage(`{"partitions":12}`)
	fo.Trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ms = append(ms, fo)
	to := nightly(6, ledger.StateTimedOut, "3 of 5 partitions had no result 1h0m0s after the deadline", 5)
	to.Succeeded, to.Failed = 2, 3
	ms = append(ms, to)
	for i := 7; i < len(o.occ); i++ {
		m := nightly(i, ledger.StateSucceeded, "", 4)
		m.Succeeded = 4
		ms = append(ms, m)
	}
	hour := func(i int, state ledger.State, reason string, parts int) *ledger.Manifest {
		return record("hourly", o.hours[i], 50, state, reason, parts)
	}
	hourly := []*ledger.Manifest{hour(0, ledger.StateQueued, "", 0), hour(1, ledger.StateRunning, "", 3), hour(2, ledger.StateSucceeded, "", 1),
		hour(3, ledger.StateSkipped, "run hourly-x is still in progress (overlap policy: buffer-one) and hourly-y is already waiting for it", 0),
		hour(4, ledger.StatePaused, "maintenance window", 0)}
	hourly[2].Succeeded = 1
	ms = append(ms, hourly...)
	for _, m := range ms {
		if err := e.store.CreateManifest(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	for name, st := range map[string]ledger.ScheduleState{
		"nightly": {Cursor: o.occ[0], Latest: good.RunID},
		"hourly":  {Cursor: o.hours[0], Latest: hourly[1].RunID, Buffered: hourly[0].RunID},
	} {
		if _, err := e.store.UpdateSchedule(ctx, name, func(cur *ledger.ScheduleState) error {
			cur.Cursor, cur.Latest, cur.Buffered = st.Cursor, st.Latest, st.Buffered
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	o.paused, o.good, o.missed, o.gap, o.skipped, o.failover, o.timedOut, o.queued = ms[0].RunID, good.RunID,
		ledger.ScheduleRunID("nightly", o.occ[2]), ledger.ScheduleRunID("nightly", o.occ[3]), ledger.ScheduleRunID("nightly", o.occ[4]),
		fo.RunID, to.RunID, hourly[0].RunID

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
	// Its plan, which a redrive sends again.
	plan := ledger.PlanBatch{Batch: 0, First: 0, Last: true}
	for i := range 12 {
		plan.Partitions = append(plan.Partitions, json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)))
	}
	if err := e.store.PutPlanBatch(ctx, fo.RunID, plan); err != nil {
		t.Fatal(err)
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

// wallTime is the page's rendering of t on a zone's wall clock (its wall()): "2026-11-25
// 03:00:00 CET".
func wallTime(t time.Time, zone string) string {
	loc, err := time.LoadLocation(zone)
	if err != nil {
		panic(err)
	}
	return t.In(loc).Format("2006-01-02 15:04:05 MST")
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

// stripCell is one cell of an occurrence strip as the page shows it.
type stripCell struct{ Run, State, Label, Glyph string }

// strip reads the cells of the strip list that selector finds, oldest first.
func (b *cdp) strip(selector string) []stripCell {
	b.t.Helper()
	var cells []stripCell
	b.eval(`Array.from(document.querySelectorAll(`+strconv.Quote(selector)+`)).map(li => ({run: li.dataset.run, state: li.dataset.state,
		label: li.firstChild.getAttribute("aria-label"), glyph: li.firstChild.textContent}))`, &cells)
	return cells
}

// The operator's dashboard in a real browser, driven over the DevTools protocol. It opens on
// the schedules page: every schedule with its strip (paused, missed, skipped, queued, a gap),
// next run in its zone and in UTC, last run, pause state (the setting's pause cannot be lifted
// here) and buttons. A schedule's detail (words, NCRONTAB, zone, the next three occurrences on
// the zone's clock, in UTC and in the browser's zone, the policies, a strip of 30 opened by
// keyboard) filters the runs to it; a run's detail opens by URL (two segments, failed
// partitions with attempts, workers, aggregate, reason). Pause asks for a note and shows it,
// resume lifts it, Run now starts a run (202 followed, then 409 in words), and the filters and
// paging work; Redrive on a partial run's page runs its failed partitions again, and Cancel on a
// running run's page asks for a note and shows the run ending; the limits show a full limit
// slowed down by its downstream. No link or request URL carries
// the key. With BATON_SCREENSHOTS=<dir> it saves a
// PNG of each view there (scripts/screenshots.sh).
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
	b.waitFor("the schedules page", `document.body.dataset.loaded === "true" && document.querySelectorAll("#schedules tbody tr").length === 3`)

	// One row per schedule, in declaration order, with its state, next run and buttons.
	var rows []struct {
		Schedule, Paused, Last, Next, NextUTC, Status string
		Buttons                                       []struct {
			Action, Text string
			Disabled     bool
		}
		Cells int
	}
	b.eval(`Array.from(document.querySelectorAll("#schedules tbody tr")).map(tr => ({schedule: tr.dataset.schedule, paused: tr.dataset.paused,
		last: tr.dataset.last, next: tr.cells[3].textContent, nextUTC: tr.cells[3].dataset.utc, status: tr.cells[5].textContent,
		cells: tr.querySelectorAll(".strip li").length,
		buttons: Array.from(tr.querySelectorAll("button")).map(b => ({action: b.dataset.action, text: b.textContent, disabled: b.disabled}))}))`, &rows)
	if len(rows) != 3 || rows[0].Schedule != "nightly" || rows[1].Schedule != "hourly" || rows[2].Schedule != "reports" {
		t.Fatalf("schedule rows = %+v", rows)
	}
	for _, r := range rows {
		s := e.sched(r.Schedule)
		got, _ := time.Parse(time.RFC3339, r.NextUTC)
		if p, _ := s.Cron.Prev(got); !p.Equal(got) || !got.After(time.Now().Add(-time.Minute)) {
			t.Errorf("%s: next run %s is not its coming occurrence", r.Schedule, r.NextUTC)
		}
		if !strings.Contains(r.Next, wallTime(got, s.TimeZone)) || !strings.Contains(r.Next, got.Format("2006-01-02 15:04:05Z")) {
			t.Errorf("%s: next run reads %q; want %s on its clock and in UTC", r.Schedule, r.Next, wallTime(got, s.TimeZone))
		}
		if r.Cells != 20 {
			t.Errorf("%s: %d strip cells, want 20", r.Schedule, r.Cells)
		}
	}
	if r := rows[0]; r.Paused != "false" || r.Last != "succeeded" || !strings.Contains(r.Status, "active") ||
		len(r.Buttons) != 2 || r.Buttons[0].Action != "pause" || r.Buttons[1].Action != "run" {
		t.Errorf("nightly row = %+v", r)
	}
	if r := rows[1]; r.Last != "running" || len(r.Buttons) != 2 || r.Buttons[0].Action != "pause" {
		t.Errorf("hourly row = %+v", r)
	}
	if r := rows[2]; r.Paused != "true" || !strings.Contains(r.Status, "BATON_SCHEDULES") || len(r.Buttons) != 2 ||
		r.Buttons[0].Action != "resume" || !r.Buttons[0].Disabled || r.Buttons[1].Disabled {
		t.Errorf("reports row (paused by the setting) = %+v", r)
	}
	// The rows' strips: each record's state, by run.
	cells := b.strip(`#schedules tr[data-schedule="hourly"] .strip li`)
	byRun := map[string]stripCell{}
	for _, c := range cells {
		byRun[c.Run] = c
	}
	for run, state := range map[string]string{o.queued: "queued", ledger.ScheduleRunID("hourly", o.hours[3]): "skipped",
		ledger.ScheduleRunID("hourly", o.hours[4]): "paused", ledger.ScheduleRunID("hourly", o.hours[5]): "before"} {
		if c := byRun[run]; c.State != state || c.Glyph == "" {
			t.Errorf("hourly strip cell %s = %+v, want %s", run, c, state)
		}
	}
	b.screenshot(shots, "dashboard-overview.png")

	// A schedule's detail: click its name. The runs table follows it.
	b.eval(`document.querySelector('#schedules a[data-schedule="nightly"]').click()`, nil)
	b.waitFor("nightly's detail", `location.hash === "#schedule=nightly" && document.getElementById("sched-detail").dataset.schedule === "nightly" &&
		document.querySelectorAll("#strip li").length === 30 && document.querySelectorAll("#runs tbody tr").length > 0 &&
		Array.from(document.querySelectorAll("#runs tbody tr")).every(r => r.dataset.schedule === "nightly") &&
		document.getElementById("f-schedule").value === "nightly"`)
	var sched struct {
		Words, Expr, Zone, Overlap, Catchup, Cursor string
		Next                                        []struct{ UTC, Text string }
	}
	b.eval(`({words: document.getElementById("sd-words").textContent, expr: document.getElementById("sd-expr").textContent,
		zone: document.getElementById("sd-zone").textContent, overlap: document.getElementById("sd-overlap").textContent,
		catchup: document.getElementById("sd-catchup").textContent, cursor: document.getElementById("sd-cursor").textContent,
		next: Array.from(document.querySelectorAll("#sd-next li")).map(li => ({utc: li.dataset.utc, text: li.textContent}))})`, &sched)
	if sched.Words != "at 03:00:00 every day" || sched.Expr != "0 0 3 * * *" || sched.Zone != "Europe/Berlin" ||
		!strings.HasPrefix(sched.Overlap, "skip") || !strings.HasPrefix(sched.Catchup, "10 min") || sched.Cursor != o.occ[0].Format("2006-01-02 15:04:05Z") {
		t.Errorf("schedule shown as %+v", sched)
	}
	if len(sched.Next) != 3 {
		t.Fatalf("next occurrences: %+v, want 3", sched.Next)
	}
	prev := o.occ[0]
	for i, n := range sched.Next {
		at, _ := time.Parse(time.RFC3339, n.UTC)
		if want, _ := e.sched("nightly").Cron.Next(prev); !at.Equal(want) && i > 0 || !at.After(prev) {
			t.Errorf("next[%d] = %s, want the occurrence after %s", i, n.UTC, prev)
		}
		prev = at
		if w, u, l := wallTime(at, "Europe/Berlin"), at.Format("2006-01-02 15:04:05Z"), localTime(at, kolkata); !strings.Contains(n.Text, w) ||
			!strings.Contains(n.Text, u) || !strings.Contains(n.Text, l) {
			t.Errorf("next[%d] reads %q; want Berlin %q, UTC %q and the browser's %q", i, n.Text, w, u, l)
		}
	}

	// The strip: one cell per occurrence, the gap as its own "no record" cell, with words.
	cells = b.strip("#strip li")
	byRun = map[string]stripCell{}
	pos := map[string]int{}
	for i, c := range cells {
		byRun[c.Run], pos[c.Run] = c, i
	}
	for _, w := range []struct{ run, state, words string }{
		{o.paused, "paused", "storage migration"}, {o.good, "succeeded", "succeeded"}, {o.missed, "missed", "catch-up window"},
		{o.gap, "none", "no record"}, {o.skipped, "skipped", "skipped"}, {o.failover, "partial", "partial"}, {o.timedOut, "timed-out", "timed out"},
	} {
		if c, ok := byRun[w.run]; !ok || c.State != w.state || !strings.Contains(c.Label, w.words) || c.Glyph == "" {
			t.Errorf("cell %s: %+v, want state %s and words %q", w.run, c, w.state, w.words)
		}
	}
	if c := byRun[o.missed]; !strings.Contains(c.Label, wallTime(o.occ[2], "Europe/Berlin")) {
		t.Errorf("missed cell label %q does not name the occurrence on Berlin's clock", c.Label)
	}
	// Oldest left, newest right: the gap sits between the skipped and the missed cells.
	if !(pos[o.skipped]+1 == pos[o.gap] && pos[o.gap]+1 == pos[o.missed]) {
		t.Errorf("strip order: skipped %d, gap %d, missed %d; want adjacent, oldest first", pos[o.skipped], pos[o.gap], pos[o.missed])
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
	b.waitFor("the timed-out run's detail after Enter", `location.hash === "#schedule=nightly&run=`+o.timedOut+`" && document.getElementById("detail").dataset.state === "timed-out" &&
		(document.getElementById("detail-reason") || {}).textContent.includes("no result")`)
	b.eval(`document.getElementById("detail-close").click()`, nil)
	b.waitFor("the schedule's view again", `location.hash === "#schedule=nightly" && document.getElementById("detail").hidden`)
	b.screenshot(shots, "dashboard-schedule.png")

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
	var traceLink struct{ Href, Text, Target string }
	b.eval(`(() => { const a = document.getElementById("detail-trace"); return a ? {href: a.href, text: a.textContent, target: a.target} : {}; })()`, &traceLink)
	if traceLink.Href != "http://jaeger.test/trace/4bf92f3577b34da6a3ce929d0e0e4736" || !strings.Contains(traceLink.Text, "4bf92f3577b34da6a3ce929d0e0e4736") ||
		traceLink.Target != "_blank" {
		t.Errorf("trace link %+v: want the run's trace in the trace UI (BATON_TRACE_URL), in a new tab", traceLink)
	}
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

	// Redrive its failed partitions: the page says which round started and follows the run,
	// which is running again with its round listed.
	b.waitFor("the redrive button", `!document.getElementById("detail-redrive").hidden && document.getElementById("detail-cancel").hidden`)
	b.eval(`document.getElementById("detail-redrive").click()`, nil)
	b.waitFor("the redrive answered and shown", `document.getElementById("action-msg").dataset.status === "202" &&
		document.getElementById("action-msg").textContent.includes("Redrive round 1") &&
		document.getElementById("detail").dataset.state === "running" &&
		(document.querySelector('#detail-redrives li[data-round="1"]') || {}).textContent.includes("2 partitions redriven")`)
	if m, err := e.store.ReadManifest(testCtx(t), o.failover); err != nil || m.Round != 1 || len(m.Redrives) != 1 ||
		len(m.Redrives[0].Indexes) != 2 || m.Redrives[0].Indexes[0] != 3 || m.Redrives[0].Indexes[1] != 9 {
		t.Errorf("the redrive in the ledger: %+v %v", m.Redrives, err)
	}
	b.screenshot(shots, "dashboard-redrive.png")
	// The workers run the round (the dependency is back): the run ends succeeded.
	e.work()
	b.eval(`window.dispatchEvent(new HashChangeEvent("hashchange"))`, nil)
	b.waitFor("the redriven run succeeded", `document.getElementById("detail").dataset.state === "succeeded"`)

	// A missed occurrence's detail says why.
	b.navigate(dash + "#run=" + o.missed)
	b.waitFor("the missed record's reason", `document.getElementById("detail").dataset.state === "missed" &&
		(document.getElementById("detail-reason") || {}).textContent.includes("the app was stopped")`)

	// Filters: state=missed shows only the missed record; the select follows the URL. Then the
	// schedule filter alone.
	b.navigate(dash)
	b.waitFor("the runs table", `document.querySelectorAll("#runs tbody tr").length >= 5`)
	change := func(id, value string) {
		b.eval(`(() => { const s = document.getElementById("`+id+`"); s.value = "`+value+`"; s.dispatchEvent(new Event("change")); })()`, nil)
	}
	change("f-state", "missed")
	b.waitFor("the filtered table", `location.hash.includes("state=missed") && Array.from(document.querySelectorAll("#runs tbody tr")).every(r => r.dataset.state === "missed") && document.querySelectorAll("#runs tbody tr").length === 1`)
	b.screenshot(shots, "dashboard-filtered.png")
	change("f-state", "")
	change("f-schedule", "hourly")
	b.waitFor("hourly's runs", `location.hash === "#schedule=hourly" && document.querySelectorAll("#runs tbody tr").length === 5 &&
		Array.from(document.querySelectorAll("#runs tbody tr")).every(r => r.dataset.schedule === "hourly") &&
		document.getElementById("sched-detail").dataset.schedule === "hourly"`)
	change("f-schedule", "")
	change("f-trigger", "timer")
	b.waitFor("the timer-only table", `location.hash === "#trigger=timer" && document.querySelectorAll("#runs tbody tr").length === 20 &&
		Array.from(document.querySelectorAll("#runs tbody tr")).every(r => r.dataset.trigger === "timer") && document.getElementById("sched-detail").hidden`)
	// Paging: 34 timer records, so the older page holds 14, nightly's oldest last.
	b.eval(`document.getElementById("older").click()`, nil)
	oldest := ledger.ScheduleRunID("nightly", o.occ[len(o.occ)-1])
	b.waitFor("the older page", `document.querySelectorAll("#runs tbody tr").length === 14 &&
		document.querySelector("#runs tbody tr:last-child").dataset.run === "`+oldest+`" && document.getElementById("older").hidden &&
		!document.getElementById("newer").hidden`)
	b.eval(`document.getElementById("newer").click()`, nil)
	b.waitFor("the first page again", `document.querySelectorAll("#runs tbody tr").length === 20`)

	// Pause with a note: the dialog asks for it; the row then shows it and the paused state.
	const note = "Storage migration until 14:00 UTC — ask Alice"
	b.navigate(dash)
	b.waitFor("the page", `document.body.dataset.loaded === "true" && document.querySelector('#schedules tr[data-schedule="hourly"] button[data-action="pause"]')`)
	b.eval(`document.querySelector('#schedules tr[data-schedule="hourly"] button[data-action="pause"]').click()`, nil)
	b.waitFor("the pause dialog", `document.getElementById("pause-dialog").open && document.activeElement === document.getElementById("pause-note")`)
	b.call("Input.insertText", map[string]any{"text": note}, nil)
	b.waitFor("the note typed", `document.getElementById("pause-count").textContent === "`+strconv.Itoa(len([]rune(note)))+` / 500"`)
	b.screenshot(shots, "dashboard-pause.png")
	b.eval(`document.getElementById("pause-ok").click()`, nil)
	b.waitFor("hourly paused", `document.getElementById("action-msg").dataset.status === "200" &&
		document.querySelector('#schedules tr[data-schedule="hourly"]').dataset.paused === "true" &&
		document.querySelector('#schedules tr[data-schedule="hourly"] .pause-note')`)
	var paused struct{ Note, Status, Msg string }
	b.eval(`({note: document.querySelector('#schedules tr[data-schedule="hourly"] .pause-note').textContent,
		status: document.querySelector('#schedules tr[data-schedule="hourly"]').cells[5].textContent,
		msg: document.getElementById("action-msg").textContent})`, &paused)
	if paused.Note != note || !strings.Contains(paused.Status, "paused by "+api.AnonymousOperator) || !strings.Contains(paused.Msg, "Paused hourly") {
		t.Errorf("after pause: %+v", paused)
	}
	if st, err := e.store.ReadSchedule(testCtx(t), "hourly"); err != nil || !st.Paused || st.Note != note || st.PausedBy != api.AnonymousOperator {
		t.Errorf("hourly's state in the ledger: %+v %v", st, err)
	}
	// Its detail says so too; Resume lifts it.
	b.eval(`document.querySelector('#schedules a[data-schedule="hourly"]').click()`, nil)
	b.waitFor("hourly's detail, paused", `document.getElementById("sched-detail").dataset.paused === "true" &&
		(document.getElementById("sd-pause-note") || {}).textContent === " Note: `+note+`"`)
	b.eval(`document.querySelector('#sd-actions button[data-action="resume"]').click()`, nil)
	b.waitFor("hourly resumed", `document.getElementById("action-msg").dataset.status === "200" &&
		document.querySelector('#schedules tr[data-schedule="hourly"]').dataset.paused === "false" &&
		document.getElementById("sched-detail").dataset.paused === "false"`)
	if st, err := e.store.ReadSchedule(testCtx(t), "hourly"); err != nil || st.Paused || st.Note != "" {
		t.Errorf("hourly's state after resume: %+v %v", st, err)
	}

	// Run now: 202, shown in words, and the page follows the new run.
	runs := e.countRuns()
	b.navigate(dash)
	b.waitFor("the page", `document.body.dataset.loaded === "true"`)
	b.eval(`document.querySelector('#schedules tr[data-schedule="nightly"] button[data-action="run"]').click()`, nil)
	b.waitFor("the 202 answer", `document.getElementById("action-msg").dataset.status === "202"`)
	var started struct{ Msg, Hash, Detail string }
	b.waitFor("the new run's detail", `document.getElementById("detail").dataset.run && location.hash.includes("run=nightly-now-") &&
		document.getElementById("detail").dataset.run === new URLSearchParams(location.hash.slice(1)).get("run")`)
	b.eval(`({msg: document.getElementById("action-msg").textContent, hash: location.hash, detail: document.getElementById("detail").dataset.run})`, &started)
	b.waitFor("the buttons back", `!document.querySelector('#schedules tr[data-schedule="nightly"] button[data-action="run"]').disabled`)
	if !strings.HasPrefix(started.Msg, "Started run "+started.Detail+" of nightly") || !strings.Contains(started.Msg, "Following it") {
		t.Errorf("after Run now: message %q, following %q", started.Msg, started.Detail)
	}
	if n := e.countRuns(); n != runs+1 {
		t.Errorf("ledger holds %d runs after Run now, want %d", n, runs+1)
	}
	// Its start check planned it (as the control queue's trigger would); the page follows.
	e.deliver(0)
	b.eval(`window.dispatchEvent(new HashChangeEvent("hashchange"))`, nil) // refresh now rather than in 5 s
	b.waitFor("the run planned, everywhere", `document.getElementById("detail").dataset.state === "running" &&
		document.querySelector('#schedules tr[data-schedule="nightly"]').dataset.last === "running" &&
		document.querySelector('#runs tbody tr[data-run="`+started.Detail+`"][data-state="running"]')`)
	b.screenshot(shots, "dashboard-run-now.png")

	// Run now again while that run is in progress: 409, in words, naming the active run.
	b.eval(`document.querySelector('#schedules tr[data-schedule="nightly"] button[data-action="run"]').click()`, nil)
	b.waitFor("the 409 answer", `document.getElementById("action-msg").dataset.status === "409"`)
	var msg string
	b.eval(`document.getElementById("action-msg").textContent`, &msg)
	if !strings.HasPrefix(msg, "Not started: run "+started.Detail+" is still in progress") || !strings.Contains(msg, "Leader: baton-test/inst-a/101") {
		t.Errorf("409 shown as %q", msg)
	}
	b.screenshot(shots, "dashboard-run-now-409.png")
	if n := e.countRuns(); n != runs+1 {
		t.Errorf("ledger holds %d runs after the refused Run now, want %d", n, runs+1)
	}

	// Cancel the running run from its page: the dialog asks for a note; the page then says who
	// cancelled it and that it is ending, and hides the button.
	const why = "CRM is down; re-run after 09:00"
	b.waitFor("the cancel button", `!document.getElementById("detail-cancel").hidden`)
	b.eval(`document.getElementById("detail-cancel").click()`, nil)
	b.waitFor("the cancel dialog", `document.getElementById("cancel-dialog").open && document.activeElement === document.getElementById("cancel-note")`)
	b.call("Input.insertText", map[string]any{"text": why}, nil)
	b.screenshot(shots, "dashboard-cancel.png")
	b.eval(`document.getElementById("cancel-ok").click()`, nil)
	b.waitFor("the cancel recorded and shown", `document.getElementById("action-msg").dataset.status === "202" &&
		(document.getElementById("detail-stop") || {}).textContent.includes("`+why+`") && document.getElementById("detail-cancel").hidden`)
	if m, err := e.store.ReadManifest(testCtx(t), started.Detail); err != nil || m.Stop == nil || m.Stop.Note != why ||
		m.Stop.State != ledger.StateCancelled || m.Stop.By != api.AnonymousOperator {
		t.Errorf("the run's stop in the ledger: %+v %v", m.Stop, err)
	}
	b.screenshot(shots, "dashboard-cancelling.png")

	// A longer strip (?occurrences=40 on the page URL) reaches back before nightly's first
	// record: those cells say so instead of showing as gaps.
	b.navigate(shim.srv.URL + "/api/dashboard?occurrences=40&code=" + key + "#schedule=nightly")
	b.waitFor("a strip of 40", `document.querySelectorAll("#strip li").length === 40`)
	for _, c := range b.strip("#strip li") {
		n, _ := ledger.ParseRunID(c.Run)
		_, seeded := byRun[c.Run]
		if older := n.Occurrence.Before(o.occ[len(o.occ)-1]); older != (c.State == "before") || seeded && older {
			t.Errorf("strip cell %s is %q; want the cells older than the seeded month, and only them, before the ledger", c.Run, c.State)
		}
	}

	// Retention deleted nightly's three oldest records (its horizon moved first): their cells say
	// so instead of showing as gaps; the older ones, never recorded, stay "before".
	deleted := o.occ[len(o.occ)-3:]
	for _, occ := range deleted {
		if err := e.store.DeleteRun(testCtx(t), ledger.ScheduleRunID("nightly", occ)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.store.UpdateSchedule(testCtx(t), "nightly", func(st *ledger.ScheduleState) error {
		st.Retained, st.RetainedFrom = deleted[0], deleted[len(deleted)-1]
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b.navigate(shim.srv.URL + "/api/dashboard?occurrences=40&code=" + key + "#schedule=nightly")
	b.waitFor("the deleted cells", `document.querySelectorAll('#strip li[data-state="deleted"]').length === 3`)
	for _, c := range b.strip(`#strip li[data-state="deleted"]`) {
		if !strings.Contains(c.Label, "deleted by retention") {
			t.Errorf("deleted cell %s reads %q", c.Run, c.Label)
		}
	}
	b.screenshot(shots, "dashboard-retention.png")

	// A schedule that paused itself after failed runs in a row says so, with its note.
	const autoNote = "paused automatically after 3 consecutive runs failed or timed out"
	if _, err := e.store.UpdateSchedule(testCtx(t), "hourly", func(st *ledger.ScheduleState) error {
		st.Paused, st.PausedBy, st.PausedAt, st.Note = true, ledger.AutoPauseBy, time.Now().UTC(), autoNote
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b.navigate(dash)
	b.waitFor("hourly paused automatically", `document.querySelector('#schedules tr[data-schedule="hourly"]').dataset.paused === "true" &&
		document.querySelector('#schedules tr[data-schedule="hourly"] td[data-auto="true"]') &&
		document.querySelector('#schedules tr[data-schedule="hourly"]').textContent.includes("paused automatically")`)
	b.screenshot(shots, "dashboard-auto-paused.png")

	// The limit the synthetic job runs under, full, with a bundle waiting and the downstream
	// asking to slow down.
	if err := e.store.EnsureContainer(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	// In this order: 3 slots, then the last 1, then a refusal (6 waiting).
	for _, b := range []struct {
		id string
		n  int
	}{{"bundle-1", 3}, {"bundle-2", 5}, {"bundle-3", 6}} {
		if _, _, err := e.limiter.Acquire(testCtx(t), limit.Spec{Name: testLimit, MaxInFlight: 4}, b.id, b.n); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.limiter.SlowDown(testCtx(t), testLimit, time.Now().Add(5*time.Minute), "429 Too Many Requests"); err != nil {
		t.Fatal(err)
	}
	b.navigate(dash)
	b.waitFor("the limit, full and slowed down", `(function () { var tr = document.querySelector('#limits tr[data-limit="crm"]');
		return tr && tr.dataset.inflight === "4" && tr.dataset.waiting === "6" && tr.dataset.slowed === "true"; })()`)
	b.screenshotOf(shots, "dashboard-limits.png", "#limits-panel")

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
	calls := 0
	for i, uri := range shim.requests() {
		if strings.HasPrefix(uri, "/api/dashboard") {
			continue
		}
		calls++
		if strings.Contains(uri, key) || keys[i] != key {
			t.Errorf("page fetched %s with x-functions-key %q: want the key %q in the header only", uri, keys[i], key)
		}
	}
	if calls == 0 {
		t.Error("the page made no API call")
	}
}

// BenchmarkDashboard_Browser1000 measures the dashboard in headless chromium over 1,000
// finished runs on Azurite (seedFinishedRuns): from navigation start to the first complete
// view (page, one GET /api/schedules with three strips of 20, one GET /api/runs, one GET
// /api/leader, render), as the page marks it ("ms/view"). The handler's caches are warm after the first load, as they are
// for an operator who keeps the page open.
func BenchmarkDashboard_Browser1000(b *testing.B) {
	exe := chromium(b)
	e := newAPIEnv(b)
	seedFinishedRuns(b, e, 1000)
	decideUpToNow(b, e)
	shim := newHostShim(b, e.hs.URL)
	br := startBrowser(b, exe, 1280, 900)
	load := func(i int) float64 {
		br.eval("window.__old = true", nil)
		br.navigate(fmt.Sprintf("%s/api/dashboard?i=%d", shim.srv.URL, i))
		br.waitFor("the first view", `!window.__old && performance.getEntriesByName("baton-first-refresh").length === 1 &&
			document.querySelectorAll("#runs tbody tr").length === 20 && document.querySelectorAll("#schedules .strip li").length === 60`)
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
