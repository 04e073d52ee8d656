package main

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// chromium returns the headless browser for the dashboard check: $BATON_CHROMIUM, else
// chromium on PATH. make test installs it (scripts/ensure-chromium.sh) and sets
// BATON_REQUIRE_BROWSER=1, so there a missing browser fails the test instead of skipping it.
func chromium(t *testing.T) string {
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
// with the state and percentage the API reports, and the leader; its fetches carry the page's
// own query string (the function key in Azure).
func TestDashboard_Browser(t *testing.T) {
	browser := chromium(t)
	e := newAPIEnv(t)
	shim := newHostShim(t, e.hs.URL)

	start := func(key string, parts int) string {
		out := e.invoke(FnRuns, goldenHTTP(t, "http-runs-post.json", withHeader("Idempotency-Key", key),
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

	// Every API call the page made carried its query string, and it called both endpoints.
	var sawRuns, sawLeader bool
	browserRequests := shim.requests()[before:]
	for _, uri := range browserRequests {
		if strings.HasPrefix(uri, "/api/runs") || strings.HasPrefix(uri, "/api/leader") {
			if !strings.Contains(uri, "code="+key) {
				t.Errorf("page fetched %s without its ?code=", uri)
			}
			sawRuns = sawRuns || strings.HasPrefix(uri, "/api/runs?")
			sawLeader = sawLeader || strings.HasPrefix(uri, "/api/leader?")
		}
	}
	if !sawRuns || !sawLeader {
		t.Errorf("page requests %v: want /api/runs and /api/leader", browserRequests)
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
	script, err := filepath.Abs(filepath.Join("..", "scripts", "ensure-chromium.sh"))
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
