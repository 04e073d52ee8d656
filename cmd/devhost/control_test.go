package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/tools/devhost"
)

// fakeApp writes an app for fakeHandler (this test binary, to pass as -exe) with one HTTP
// function, Echo, and settings Baton's config check accepts; it returns the app's folder.
func fakeApp(t *testing.T) string {
	t.Helper()
	exe := testBinary(t)
	dir := t.TempDir()
	writeTestFiles(t, dir, map[string]string{
		"host.json": `{"version":"2.0","customHandler":{"description":{"defaultExecutablePath":"` + exe + `"}},
			"extensions":{"http":{"routePrefix":"api"}}}`,
		"Echo/function.json": `{"bindings":[{"name":"req","type":"httpTrigger","direction":"in","methods":["get"],"route":"echo"},
			{"name":"res","type":"http","direction":"out"}]}`,
		"local.settings.json": `{"IsEncrypted":false,"Values":{"DEVHOST_FAKE_HANDLER":"1","FUNCTIONS_WORKER_RUNTIME":"custom",
			"AzureWebJobsStorage":"UseDevelopmentStorage=true","BATON_TRANSPORT":"queue","BATON_HEARTBEAT":"0 * * * * *"}}`,
	})
	return dir
}

func testBinary(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

func writeTestFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// running is a `devhost run` started by startRun: its output, and its result once it returned.
type running struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
	done    chan struct{}
	err     error
	cancel  context.CancelFunc
}

func (r *running) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf.Write(p)
	close(r.changed)
	r.changed = make(chan struct{})
	return len(p), nil
}

func (r *running) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.String()
}

// waitLine returns the first output line that contains s, once written; it fails the test when
// the command returns first or a minute passes.
func (r *running) waitLine(t *testing.T, s string) string {
	t.Helper()
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	for {
		r.mu.Lock()
		for _, l := range strings.Split(r.buf.String(), "\n") {
			if strings.Contains(l, s) {
				r.mu.Unlock()
				return l
			}
		}
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ch:
		case <-r.done:
			if !strings.Contains(r.String(), s) {
				t.Fatalf("devhost run returned (%v) before printing %q:\n%s", r.err, s, r.String())
			}
		case <-timeout.C:
			t.Fatalf("devhost run printed no %q in a minute:\n%s", s, r.String())
		}
	}
}

// stop ends the command as Ctrl-C does and returns its result.
func (r *running) stop() error {
	r.cancel()
	<-r.done
	return r.err
}

// startRun starts `devhost run args...` until the test ends (or stop).
func startRun(t *testing.T, args ...string) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{changed: make(chan struct{}), done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(r.done)
		r.err = runCmd(ctx, args, r)
	}()
	t.Cleanup(func() {
		if err := r.stop(); err != nil {
			t.Errorf("devhost run %v: %v", args, err)
		}
	})
	return r
}

// field returns the word after prefix in line ("control endpoint http://…" → the URL).
func field(t *testing.T, line, prefix string) string {
	t.Helper()
	_, rest, ok := strings.Cut(line, prefix)
	if !ok || len(strings.Fields(rest)) == 0 {
		t.Fatalf("line %q has nothing after %q", line, prefix)
	}
	return strings.Fields(rest)[0]
}

func ctl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	err := ctlCmd(ctx, args, &out)
	return out.String(), err
}

// TestRun_TwoHostsSideBySide: two hosts of one app run side by side, each with its control
// endpoint on a free port it prints, and both serve; ctl finds the one host announced in the
// app's folder, and asks for -control while there are two.
func TestRun_TwoHostsSideBySide(t *testing.T) {
	t.Setenv(ControlEnv, "")
	app := fakeApp(t)
	args := []string{"-app", app, "-exe", testBinary(t), "-n", "1", "-http", "127.0.0.1:0", "-progress", "0"}
	a, b := startRun(t, args...), startRun(t, args...)
	urls := map[*running]string{}
	for _, r := range []*running{a, b} {
		ctlURL := field(t, r.waitLine(t, "control endpoint http://"), "control endpoint ")
		urls[r] = ctlURL
		if out, err := ctl("-control", ctlURL, "list"); err != nil || !strings.Contains(out, `"instance-1"`) {
			t.Errorf("ctl -control %s list: %v\n%s", ctlURL, err, out)
		}
		front := field(t, r.waitLine(t, "http front "), "http front ")
		resp, err := http.Get(front + "/api/echo")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "echo" {
			t.Errorf("GET %s/api/echo: %d %q, want 200 echo", front, resp.StatusCode, body)
		}
	}
	if urls[a] == urls[b] {
		t.Fatalf("both hosts printed the control endpoint %s", urls[a])
	}
	out, err := ctl("-app", app, "list")
	if err == nil || !strings.Contains(err.Error(), "-control") || !strings.Contains(err.Error(), urls[a]) || !strings.Contains(err.Error(), urls[b]) {
		t.Errorf("ctl -app with two hosts running: %v (output %q), want an error naming -control and both URLs", err, out)
	}
	if err := a.stop(); err != nil {
		t.Fatalf("stop the first host: %v", err)
	}
	hosts, err := devhost.RunningHosts(app)
	if err != nil || len(hosts) != 1 || hosts[0].Control != urls[b] {
		t.Errorf("announced after the first host stopped: %+v, %v; want only %s", hosts, err, urls[b])
	}
	if out, err := ctl("-app", app, "list"); err != nil || !strings.Contains(out, `"instance-1"`) {
		t.Errorf("ctl -app %s list with one host running: %v\n%s", app, err, out)
	}
}

// TestRun_BusyPort: a port that is taken fails the start with an error that names the flag
// choosing it (and, for the control endpoint, its environment variable).
func TestRun_BusyPort(t *testing.T) {
	t.Setenv(ControlEnv, "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := ln.Addr().String()
	app := fakeApp(t)
	for _, tc := range []struct {
		flag string
		args []string
		want []string
	}{
		{"-control", []string{"-http", "127.0.0.1:0", "-control", busy}, []string{"-control " + busy, ControlEnv, "127.0.0.1:0"}},
		{"-http", []string{"-http", busy}, []string{"-http " + busy, "127.0.0.1:0"}},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var out strings.Builder
			err := runCmd(ctx, append([]string{"-app", app, "-exe", testBinary(t), "-n", "1", "-progress", "0"}, tc.args...), &out)
			if err == nil {
				t.Fatalf("run with %s on a busy port: no error\n%s", tc.flag, out.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("run with %s on a busy port: %v, want it to name %q", tc.flag, err, w)
				}
			}
		})
	}
}

// TestCmd_RefusesRemoteListen: run and demo refuse listen addresses beyond loopback, naming the
// flag and -allow-remote, before building or starting anything.
func TestCmd_RefusesRemoteListen(t *testing.T) {
	t.Setenv(ControlEnv, "")
	for _, tc := range []struct {
		cmd  func(context.Context, []string, io.Writer) error
		name string
		args []string
		flag string
	}{
		{runCmd, "run -http 0.0.0.0", []string{"-http", "0.0.0.0:7071"}, "-http"},
		{runCmd, "run -http :7071", []string{"-http", ":7071"}, "-http"},
		{runCmd, "run -control 0.0.0.0", []string{"-http", "127.0.0.1:0", "-control", "0.0.0.0:0"}, "-control"},
		{demoCmd, "demo -control [::]", []string{"-control", "[::]:0"}, "-control"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			err := tc.cmd(context.Background(), append([]string{"-app", t.TempDir()}, tc.args...), &out)
			if err == nil || !strings.Contains(err.Error(), tc.flag) || !strings.Contains(err.Error(), "-allow-remote") || !strings.Contains(err.Error(), "loopback") {
				t.Errorf("%s: %v, want a refusal naming %s and -allow-remote", tc.name, err, tc.flag)
			}
			if strings.Contains(out.String(), "building") {
				t.Errorf("%s built the app before refusing:\n%s", tc.name, out.String())
			}
		})
	}
}

// TestRunCmd_RefusesLibraryPackage: in a module whose root is a library and whose handler is
// ./handler, run without -pkg refuses with a message naming -pkg and ./handler, and leaves the
// handler binary built before as it was.
func TestRunCmd_RefusesLibraryPackage(t *testing.T) {
	dir := t.TempDir()
	writeTestFiles(t, dir, map[string]string{
		"go.mod":          "module example.com/lib\n\ngo 1.24\n",
		"lib.go":          "package lib\n\nfunc X() int { return 1 }\n",
		"handler/main.go": "package main\n\nfunc main() {}\n",
		"host.json":       `{"version":"2.0","customHandler":{"description":{"defaultExecutablePath":"lib"}}}`,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out strings.Builder
	exe, err := devhost.Build(ctx, dir, "./handler", &out)
	if err != nil {
		t.Fatalf("build ./handler: %v\n%s", err, out.String())
	}
	before, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	err = runCmd(ctx, []string{"-app", dir}, &out)
	if err == nil || !strings.Contains(err.Error(), "-pkg") || !strings.Contains(err.Error(), "./handler") || !errors.Is(err, devhost.ErrNotMain) {
		t.Errorf("run in a library's folder: %v, want a refusal naming -pkg and ./handler", err)
	}
	after, err := os.ReadFile(exe)
	if err != nil || !bytes.Equal(before, after) {
		t.Errorf("the handler binary %s changed (%v)", exe, err)
	}
}
