package devhost

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// status is the status of GET url.
func status(t *testing.T, url string) int {
	t.Helper()
	resp, _ := get(t, http.MethodGet, url, "", nil)
	return resp.StatusCode
}

// TestHost_TwoSideBySide: two hosts of one app, each with its control endpoint on a free
// port, run side by side and both serve; each announces itself in the app's folder while it
// runs, and Close takes its announcement away.
func TestHost_TwoSideBySide(t *testing.T) {
	root := fakeApp(t, false)
	free := func(o *Options) { o.ControlAddr = "127.0.0.1:0" }
	a, b := startFake(t, root, 1, nil, free), startFake(t, root, 1, nil, free)
	if a.ControlURL() == b.ControlURL() || a.HTTPURL() == b.HTTPURL() {
		t.Fatalf("the hosts share an endpoint: control %s and %s, http %s and %s", a.ControlURL(), b.ControlURL(), a.HTTPURL(), b.HTTPURL())
	}
	for _, h := range []*Host{a, b} {
		if got := status(t, h.ControlURL()+"/instances"); got != http.StatusOK {
			t.Errorf("GET %s/instances: %d", h.ControlURL(), got)
		}
		if got := status(t, h.HTTPURL()+"/api/echo/x"); got != http.StatusCreated {
			t.Errorf("GET %s/api/echo/x: %d", h.HTTPURL(), got)
		}
	}
	hosts, err := RunningHosts(root)
	if err != nil || len(hosts) != 2 {
		t.Fatalf("RunningHosts: %+v, %v; want both hosts", hosts, err)
	}
	got := map[string]string{hosts[0].Control: hosts[0].HTTP, hosts[1].Control: hosts[1].HTTP}
	if got[a.ControlURL()] != a.HTTPURL() || got[b.ControlURL()] != b.HTTPURL() || hosts[0].PID != os.Getpid() {
		t.Errorf("RunningHosts: %+v, want control %s (http %s) and %s (http %s) of pid %d", hosts,
			a.ControlURL(), a.HTTPURL(), b.ControlURL(), b.HTTPURL(), os.Getpid())
	}
	if b, err := os.ReadFile(filepath.Join(root, EndpointsDir, ".gitignore")); err != nil || !strings.Contains(string(b), "*") {
		t.Errorf("%s/.gitignore: %q, %v; want the folder to ignore itself", EndpointsDir, b, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if hosts, err := RunningHosts(root); err != nil || len(hosts) != 1 || hosts[0].Control != b.ControlURL() {
		t.Errorf("RunningHosts after the first Close: %+v, %v; want only %s", hosts, err, b.ControlURL())
	}
}

// TestRunningHosts_SkipsTheDead: an announcement whose process is gone (a host killed before
// its Close) is not listed, and a folder without announcements lists none.
func TestRunningHosts_SkipsTheDead(t *testing.T) {
	root := t.TempDir()
	if hosts, err := RunningHosts(root); err != nil || len(hosts) != 0 {
		t.Fatalf("RunningHosts of a folder without announcements: %+v, %v", hosts, err)
	}
	writeJSONFile(t, filepath.Join(root, EndpointsDir, "1-1.json"), Endpoint{PID: deadPID(t), Control: "http://127.0.0.1:1"})
	writeJSONFile(t, filepath.Join(root, EndpointsDir, "2-2.json"), Endpoint{PID: os.Getpid(), Control: "http://127.0.0.1:2"})
	hosts, err := RunningHosts(root)
	if err != nil || len(hosts) != 1 || hosts[0].Control != "http://127.0.0.1:2" {
		t.Errorf("RunningHosts: %+v, %v; want only the live one", hosts, err)
	}
}

// deadPID is the id of a process that has exited and been reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	p, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	return p.Pid
}

// TestNew_RefusesRemoteListen: an HTTP front or control endpoint address beyond loopback is
// refused before anything starts, unless AllowRemote; loopback addresses are accepted.
func TestNew_RefusesRemoteListen(t *testing.T) {
	root := fakeApp(t, false)
	for _, tc := range []struct {
		option, addr string
		remote       bool
	}{
		{"HTTPAddr", "0.0.0.0:7071", true},
		{"HTTPAddr", ":7071", true},
		{"HTTPAddr", "[::]:0", true},
		{"HTTPAddr", "192.0.2.1:7071", true},
		{"HTTPAddr", "devbox.example:7071", true},
		{"ControlAddr", "0.0.0.0:0", true},
		{"ControlAddr", "127.0.0.1:0", false},
		{"ControlAddr", "127.0.0.2:7070", false},
		{"HTTPAddr", "localhost:0", false},
		{"HTTPAddr", "[::1]:0", false},
	} {
		opts := Options{AppRoot: root, SkipConfigCheck: true, Settings: map[string]string{"FAKE_SCHEDULE": neverSchedule}}
		if tc.option == "HTTPAddr" {
			opts.HTTPAddr = tc.addr
		} else {
			opts.ControlAddr = tc.addr
		}
		_, err := New(opts)
		var le *ListenError
		switch {
		case tc.remote && (!errors.As(err, &le) || !le.Remote || le.Option != tc.option ||
			!strings.Contains(err.Error(), "Options.AllowRemote") || !strings.Contains(err.Error(), tc.addr)):
			t.Errorf("New with %s %s: %v, want a refusal naming the address and Options.AllowRemote", tc.option, tc.addr, err)
		case !tc.remote && err != nil:
			t.Errorf("New with %s %s: %v, want it accepted", tc.option, tc.addr, err)
		}
		opts.AllowRemote = true
		if _, err := New(opts); err != nil {
			t.Errorf("New with %s %s and AllowRemote: %v", tc.option, tc.addr, err)
		}
	}
}

// TestHost_AllowRemote: with AllowRemote the HTTP front listens on every interface, says so,
// and its URL names the loopback address.
func TestHost_AllowRemote(t *testing.T) {
	w := &syncedBuilder{}
	h := startFake(t, fakeApp(t, false), 1, nil, func(o *Options) { o.HTTPAddr, o.AllowRemote, o.Out = "0.0.0.0:0", true, w })
	if !strings.HasPrefix(h.HTTPURL(), "http://127.0.0.1:") {
		t.Errorf("HTTPURL %s, want a loopback URL", h.HTTPURL())
	}
	if got := status(t, h.HTTPURL()+"/api/echo/x"); got != http.StatusCreated {
		t.Errorf("GET %s/api/echo/x: %d", h.HTTPURL(), got)
	}
	if s := w.String(); !strings.Contains(s, "listens beyond loopback") {
		t.Errorf("no warning that the HTTP front listens beyond loopback:\n%s", s)
	}
}

// TestHost_BusyControlAddr: a control endpoint address that is taken fails Start with an error
// that says how to choose another.
func TestHost_BusyControlAddr(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	h, err := New(Options{AppRoot: fakeApp(t, false), SkipConfigCheck: true, ControlAddr: ln.Addr().String(),
		Settings: map[string]string{"DEVHOST_FAKE_HANDLER": "1", "FAKE_SCHEDULE": neverSchedule}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = h.Start(ctx)
	defer h.Close(ctx)
	var le *ListenError
	if !errors.As(err, &le) || le.Option != "ControlAddr" || !errors.Is(err, syscall.EADDRINUSE) ||
		!strings.Contains(err.Error(), "Options.ControlAddr") || !strings.Contains(err.Error(), "port 0") {
		t.Errorf("Start with a busy ControlAddr: %v, want an error naming Options.ControlAddr and port 0", err)
	}
}

// syncedBuilder is a strings.Builder safe for the host's many writers.
type syncedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncedBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncedBuilder) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
