package devhost

import (
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestReadHostConfig_Repo(t *testing.T) {
	hc, err := ReadHostConfig(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	want := HostConfig{FunctionTimeout: 10 * time.Minute, Executable: "baton", RoutePrefix: "api",
		Queues: QueueOptions{BatchSize: 16, NewBatchThreshold: 8, MaxDequeueCount: 5, VisibilityTimeout: 5 * time.Second,
			MaxPollingInterval: 2 * time.Second, MessageEncoding: "base64"}}
	if hc.FunctionTimeout != want.FunctionTimeout || hc.Executable != want.Executable || hc.RoutePrefix != want.RoutePrefix || hc.Queues != want.Queues {
		t.Errorf("got %+v\nwant %+v", hc, want)
	}
}

func TestReadHostConfig_DefaultsAndErrors(t *testing.T) {
	for _, c := range []struct {
		name, json string
		wantErr    string
		check      func(HostConfig) bool
	}{
		{"defaults", `{"customHandler":{"description":{"defaultExecutablePath":"h"}}}`, "", func(h HostConfig) bool {
			return h.FunctionTimeout == DefaultFunctionTimeout && h.RoutePrefix == "api" && h.Queues.BatchSize == 16 &&
				h.Queues.NewBatchThreshold == 8 && h.Queues.MaxDequeueCount == 5 && h.Queues.MessageEncoding == "base64" &&
				h.Queues.VisibilityTimeout == 0 && h.Queues.MaxPollingInterval == time.Minute
		}},
		{"unbounded timeout and empty prefix", `{"functionTimeout":"-1","customHandler":{"description":{"defaultExecutablePath":"h"}},"extensions":{"http":{"routePrefix":""}}}`, "",
			func(h HostConfig) bool { return h.FunctionTimeout == 0 && h.RoutePrefix == "" }},
		{"no executable", `{}`, "defaultExecutablePath", nil},
		{"batch too big", `{"customHandler":{"description":{"defaultExecutablePath":"h"}},"extensions":{"queues":{"batchSize":33}}}`, "batchSize", nil},
		{"bad encoding", `{"customHandler":{"description":{"defaultExecutablePath":"h"}},"extensions":{"queues":{"messageEncoding":"hex"}}}`, "messageEncoding", nil},
		{"bad duration", `{"functionTimeout":"soon","customHandler":{"description":{"defaultExecutablePath":"h"}}}`, "functionTimeout", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "host.json"), []byte(c.json), 0o644); err != nil {
				t.Fatal(err)
			}
			hc, err := ReadHostConfig(dir)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want one naming %s", err, c.wantErr)
				}
				return
			}
			if err != nil || !c.check(hc) {
				t.Errorf("got %+v, %v", hc, err)
			}
		})
	}
}

func TestLoadApp_Repo(t *testing.T) {
	app, err := LoadApp(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"Tick": "timerTrigger", "Work": "serviceBusTrigger", "WorkQueue": "queueTrigger",
		"Control": "serviceBusTrigger", "ControlQueue": "queueTrigger",
		"Leader": "httpTrigger", "Runs": "httpTrigger"}
	for name, typ := range want {
		fn := app.Function(name)
		if fn == nil {
			t.Errorf("function %s not found", name)
			continue
		}
		if got := fn.Trigger().Type; got != typ {
			t.Errorf("%s trigger = %s, want %s", name, got, typ)
		}
	}
	if out := app.Function("Runs").Output("http"); out == nil || out.Name != "res" {
		t.Errorf("Runs http output = %+v", out)
	}
}

func TestLoadSettings_Precedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "local.settings.json")
	if err := os.WriteFile(file, []byte(`{"Values":{"A":"file","B":"file","C":"file","Q":"%A%-%B%","AzureWebJobs.Work.Disabled":"true"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := LoadSettings(dir, "", []string{"B=env", "Z=env"}, map[string]string{"C": "flag"})
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"A": "file", "B": "env", "C": "flag"} {
		if got := s.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if _, ok := s.Lookup("Z"); ok {
		t.Error("an environment variable that is not a Value became a setting")
	}
	if len(s.Skipped) != 1 || s.Skipped[0] != "B" {
		t.Errorf("Skipped = %v, want [B]", s.Skipped)
	}
	if got, err := s.Resolve("%Q%"); err != nil || got != "%A%-%B%" {
		t.Errorf("Resolve(%%Q%%) = %q, %v (no recursive expansion)", got, err)
	}
	if got, err := s.Resolve("x-%A%-%B%"); err != nil || got != "x-file-env" {
		t.Errorf("Resolve = %q, %v", got, err)
	}
	if _, err := s.Resolve("%NOPE_NOT_SET_ANYWHERE%"); err == nil || !strings.Contains(err.Error(), "NOPE_NOT_SET_ANYWHERE") {
		t.Errorf("Resolve of an unset setting: %v", err)
	}
	if !s.Disabled("Work") || s.Disabled("Tick") {
		t.Error("Disabled: want Work disabled, Tick enabled")
	}
	env := strings.Join(s.Environ([]string{"PATH=/bin", "B=old"}, map[string]string{"X": "1"}), " ")
	for _, kv := range []string{"PATH=/bin", "B=env", "X=1", "A=file"} {
		if !strings.Contains(env, kv) {
			t.Errorf("Environ lacks %s: %s", kv, env)
		}
	}
	if strings.Contains(env, "B=old") {
		t.Error("Environ kept the base value of a setting")
	}
	if err := os.WriteFile(file, []byte(`{"Values":{"N":3}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSettings(dir, "", nil, nil); err == nil {
		t.Error("a non-string Value was accepted")
	}
}

func TestRoute_Match(t *testing.T) {
	str := func(s string) *string { return &s }
	for _, c := range []struct {
		tmpl, path string
		ok         bool
		params     map[string]*string
	}{
		{"leader", "leader", true, map[string]*string{}},
		{"leader", "LEADER", true, map[string]*string{}},
		{"leader", "leader/x", false, nil},
		{"runs/{id?}", "runs", true, map[string]*string{"id": nil}},
		{"runs/{id?}", "runs/abc", true, map[string]*string{"id": str("abc")}},
		{"runs/{id?}", "runs/abc/def", false, nil},
		{"runs/{id}", "runs", false, nil},
		{"items/{n:int}", "items/42", true, map[string]*string{"n": str("42")}},
		{"items/{n:int}", "items/x", false, nil},
		{"files/{*path}", "files/a/b/c", true, map[string]*string{"path": str("a/b/c")}},
		{"files/{*path}", "files", true, map[string]*string{"path": nil}},
	} {
		segs, err := parseRoute(c.tmpl)
		if err != nil {
			t.Fatalf("%s: %v", c.tmpl, err)
		}
		r := &route{segs: segs}
		parts := strings.Split(c.path, "/")
		params, ok := r.match(parts)
		if ok != c.ok {
			t.Errorf("%s ~ %s: ok = %v, want %v", c.tmpl, c.path, ok, c.ok)
			continue
		}
		for k, want := range c.params {
			got, present := params[k]
			if !present || (want == nil) != (got == nil) || (want != nil && *want != *got) {
				t.Errorf("%s ~ %s: param %s = %v, want %v", c.tmpl, c.path, k, got, want)
			}
		}
	}
	for _, bad := range []string{"", "a/{x?}/b", "a/{x", "{*p}/b"} {
		if _, err := parseRoute(bad); err == nil {
			t.Errorf("parseRoute(%q) accepted", bad)
		}
	}
}

func TestJudge(t *testing.T) {
	for _, c := range []struct {
		name   string
		status int
		ct     string
		body   string
		ok     bool
	}{
		{"2xx JSON object", 200, "application/json", `{"Outputs":{"res":{}},"Logs":["a"],"ReturnValue":null}`, true},
		{"case-insensitive names and charset", 200, "application/json; charset=utf-8", `{"outputs":{},"logs":[]}`, true},
		{"text/json", 202, "text/json", `{}`, true},
		{"non-2xx", 500, "application/json", `{"Outputs":{}}`, false},
		{"400", 400, "application/json", `{}`, false},
		{"text/plain", 200, "text/plain; charset=utf-8", `{}`, false},
		{"no content type", 200, "", `{}`, false},
		{"empty body", 200, "application/json", ``, false},
		{"null body", 200, "application/json", `null`, false},
		{"bad JSON", 200, "application/json", `{"Outputs":`, false},
		{"array", 200, "application/json", `[]`, false},
		{"Logs not strings", 200, "application/json", `{"Logs":[1]}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := Judge(c.status, c.ct, []byte(c.body))
			if c.ok != (err == nil) {
				t.Fatalf("err = %v, want ok=%v", err, c.ok)
			}
			if err != nil && !errors.Is(err, ErrReply) {
				t.Errorf("err %v does not wrap ErrReply", err)
			}
			if c.ok && r == nil {
				t.Error("nil reply")
			}
		})
	}
}

func TestWriteHTTPOutput(t *testing.T) {
	for _, c := range []struct {
		name, res  string
		wantStatus int
		wantBody   string
		wantCT     string
	}{
		{"number status and string body", `{"statusCode":201,"body":"created","headers":{"Content-Type":"text/plain"}}`, 201, "created", "text/plain"},
		{"string status", `{"statusCode":"409","body":"{}"}`, 409, "{}", ""},
		{"status fallback", `{"status":404}`, 404, "", ""},
		{"default 200 and object body", `{"body":{"a":1}}`, 200, `{"a":1}`, ""},
		{"case-insensitive keys, non-string header", `{"StatusCode":202,"Headers":{"X-N":5}}`, 202, "", ""},
		{"missing output", ``, 200, "{}", "application/json"},
		{"bad status", `{"statusCode":"abc"}`, 500, "", "application/json"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			writeHTTPOutput(w, []byte(c.res))
			if w.Code != c.wantStatus {
				t.Errorf("status = %d, want %d", w.Code, c.wantStatus)
			}
			if c.wantBody != "" && w.Body.String() != c.wantBody {
				t.Errorf("body = %q, want %q", w.Body.String(), c.wantBody)
			}
			if c.wantCT != "" && w.Header().Get("Content-Type") != c.wantCT {
				t.Errorf("Content-Type = %q, want %q", w.Header().Get("Content-Type"), c.wantCT)
			}
		})
	}
	w := httptest.NewRecorder()
	writeHTTPOutput(w, []byte(`{"statusCode":202,"headers":{"X-N":5}}`))
	if w.Header().Get("X-N") != "5" {
		t.Errorf("header X-N = %q, want 5 (stringified)", w.Header().Get("X-N"))
	}
}

func TestNextBackoff(t *testing.T) {
	d := time.Duration(0)
	for i := 0; i < 20; i++ {
		next := nextBackoff(d, 2*time.Second)
		if next < d || next > 2*time.Second || next < minPollingInterval {
			t.Fatalf("step %d: %s after %s", i, next, d)
		}
		d = next
	}
	if d != 2*time.Second {
		t.Errorf("backoff settles at %s, want the max 2s", d)
	}
}

// The repo's app under the devhost: both queue functions are discovered from their
// function.json, and the control queue (BATON_CONTROL_QUEUE) has one listener for the host
// polling at most every ControlPollingInterval, while the work queue keeps a listener per
// instance and host.json's maxPollingInterval.
func TestNew_ControlQueuePollsFast(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opt  time.Duration
		want time.Duration // 0: host.json's
	}{{0, DefaultControlPollingInterval}, {50 * time.Millisecond, 50 * time.Millisecond}, {-1, 0}} {
		h, err := New(Options{AppRoot: filepath.Join("..", "..", ".."), Executable: exe, Environ: []string{},
			SettingsFile: filepath.Join("..", "..", "..", "local.settings.example.json"), ControlPollingInterval: tc.opt})
		if err != nil {
			t.Fatal(err)
		}
		byFn := map[string]*queueTrigger{}
		for _, q := range h.queues {
			byFn[q.fn.Name] = q
		}
		work, control := byFn["WorkQueue"], byFn["ControlQueue"]
		if work == nil || control == nil {
			t.Fatalf("queue functions %v, want WorkQueue and ControlQueue", byFn)
		}
		hostMax := h.app.Host.Queues.MaxPollingInterval
		want := tc.want
		if want == 0 {
			want = hostMax
		}
		if control.shared != (tc.opt >= 0) || work.shared {
			t.Errorf("option %s: one listener for the host: control %v, work %v", tc.opt, control.shared, work.shared)
		}
		if control.name != "baton-control" || control.opts.MaxPollingInterval != want {
			t.Errorf("option %s: ControlQueue polls %s at most every %s, want baton-control every %s", tc.opt, control.name, control.opts.MaxPollingInterval, want)
		}
		if work.name != "baton-work" || work.opts.MaxPollingInterval != hostMax {
			t.Errorf("option %s: WorkQueue polls %s at most every %s, want baton-work every %s", tc.opt, work.name, work.opts.MaxPollingInterval, hostMax)
		}
	}
}
