package devhost

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/batonfn/baton/internal/engine/protocol"
)

func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func get(t *testing.T, method, url, body string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == "" {
		req.Body = nil
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// TestHost_HTTP_PayloadRoutingAndReplies drives the HTTP front against the fake handler: the
// request the handler receives has the §1.6 shape, the res output is unwrapped, and replies
// the host would reject answer 500.
func TestHost_HTTP_PayloadRoutingAndReplies(t *testing.T) {
	var mu sync.Mutex
	var records []InvokeRecord
	h := startFake(t, fakeApp(t, false), 2, nil, func(o *Options) {
		o.OnInvoke = func(r InvokeRecord) { mu.Lock(); records = append(records, r); mu.Unlock() }
	})
	base := h.HTTPURL()

	t.Run("GET with a route parameter and a repeated query key", func(t *testing.T) {
		resp, body := get(t, "GET", base+"/api/echo/abc?x=1&x=2&y=3", "", map[string]string{"X-Test": "a"})
		if resp.StatusCode != 201 {
			t.Fatalf("status = %d, want 201 (statusCode \"201\" from the output): %s", resp.StatusCode, body)
		}
		if ua := resp.Header.Get("X-UA"); ua != "Azure-Functions-Host/"+HostVersion {
			t.Errorf("User-Agent seen by the handler = %q", ua)
		}
		req, err := protocol.DecodeRequest(body)
		if err != nil {
			t.Fatal(err)
		}
		hr, err := protocol.DecodeHTTPRequest(req.Data["req"])
		if err != nil {
			t.Fatal(err)
		}
		if hr.Method != "GET" || hr.Query["x"] != "1,2" || hr.Query["y"] != "3" || hr.Param("id") != "abc" || hr.Body != nil {
			t.Errorf("request = %+v", hr)
		}
		if got := hr.Headers["X-Test"]; len(got) != 1 || got[0] != "a" {
			t.Errorf("Headers[X-Test] = %v, want [a]", got)
		}
		if !strings.HasSuffix(hr.URL, "/api/echo/abc?x=1&x=2&y=3") || !strings.HasPrefix(hr.URL, "http://127.0.0.1:") {
			t.Errorf("Url = %q", hr.URL)
		}
		if got := string(req.Metadata["id"]); got != `"\"abc\""` {
			t.Errorf("Metadata.id = %s, want the quoted form", got)
		}
		var single map[string]string
		if err := json.Unmarshal(req.Metadata["Headers"], &single); err != nil || single["X-Test"] != "a" {
			t.Errorf("Metadata.Headers = %s (%v): want single string values", req.Metadata["Headers"], err)
		}
		if s := req.Sys(); s.MethodName != "Echo" || len(s.UtcNow) != len("2006-01-02T15:04:05.0000000Z") {
			t.Errorf("sys = %+v", s)
		}
	})

	t.Run("POST with a body and the optional parameter absent", func(t *testing.T) {
		resp, body := get(t, "POST", base+"/api/echo", "hello", map[string]string{"Content-Type": "text/plain"})
		if resp.StatusCode != 201 {
			t.Fatalf("status = %d: %s", resp.StatusCode, body)
		}
		req, err := protocol.DecodeRequest(body)
		if err != nil {
			t.Fatal(err)
		}
		hr, _ := protocol.DecodeHTTPRequest(req.Data["req"])
		if hr.Body == nil || *hr.Body != "hello" {
			t.Errorf("Body = %v, want hello", hr.Body)
		}
		if v, ok := hr.Params["id"]; !ok || v != nil {
			t.Errorf("Params = %v, want id present and null", hr.Params)
		}
		if _, ok := req.Metadata["id"]; ok {
			t.Error("Metadata has id: null binding data must be skipped")
		}
	})

	for _, c := range []struct {
		name, method, path string
		want               int
	}{
		{"unknown route", "GET", "/api/nope", 404},
		{"outside the route prefix", "GET", "/echo/abc", 404},
		{"method not in function.json", "DELETE", "/api/echo/abc", 405},
		{"2xx with text/plain is a failed invocation", "GET", "/api/plain", 500},
		{"500 from the handler is a failed invocation", "GET", "/api/fail", 500},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, body := get(t, c.method, base+c.path, "", nil)
			if resp.StatusCode != c.want {
				t.Errorf("status = %d, want %d: %s", resp.StatusCode, c.want, body)
			}
		})
	}

	mu.Lock()
	defer mu.Unlock()
	var plain *InvokeRecord
	for i := range records {
		if records[i].Function == "Plain" {
			plain = &records[i]
		}
		if _, err := uuid.Parse(records[i].Header.Get(protocol.HeaderInvocationID)); err != nil {
			t.Errorf("invocation id header %q: %v", records[i].Header.Get(protocol.HeaderInvocationID), err)
		}
	}
	if plain == nil || !errors.Is(plain.Err, ErrReply) {
		t.Errorf("Plain invocation record = %+v, want an ErrReply failure", plain)
	}
}

// TestHost_Timeout: an invocation past functionTimeout fails and its handler is restarted.
func TestHost_Timeout(t *testing.T) {
	var mu sync.Mutex
	var slow *InvokeRecord
	h := startFake(t, fakeApp(t, false), 1, nil, func(o *Options) {
		o.OnInvoke = func(r InvokeRecord) {
			if r.Function == "Slow" {
				mu.Lock()
				slow = &r
				mu.Unlock()
			}
		}
	})
	in := h.Instance("instance-1")
	_, pid := in.State()
	start := time.Now()
	resp, body := get(t, "GET", h.HTTPURL()+"/api/slow", "", nil)
	if resp.StatusCode != 500 {
		t.Fatalf("status = %d, want 500: %s", resp.StatusCode, body)
	}
	if d := time.Since(start); d < 2*time.Second || d > 10*time.Second {
		t.Errorf("answered after %s, want about functionTimeout (2s)", d)
	}
	mu.Lock()
	if slow == nil || !errors.Is(slow.Err, ErrTimeout) {
		t.Errorf("record = %+v, want ErrTimeout", slow)
	}
	mu.Unlock()
	ctx := testCtx(t, 30*time.Second)
	for {
		st, now := in.State()
		if st == StateRunning && now != pid {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("handler not restarted after the timeout: state %s pid %d (was %d)", st, now, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if info := in.Info(); info.Exits != 0 || info.Starts != 2 {
		t.Errorf("after a timeout restart: %+v, want 2 starts and no counted exit", info)
	}
}

// TestHost_KillRestartsThenGivesUp: kill -9 and SIGTERM each restart the handler (both count
// as exits); the third exit within the window gives the instance up; restart revives it.
func TestHost_KillRestartsThenGivesUp(t *testing.T) {
	h := startFake(t, fakeApp(t, false), 1, nil, nil)
	in := h.Instance("instance-1")
	ctx := testCtx(t, time.Minute)
	waitNewPID := func(old int) int {
		t.Helper()
		for {
			st, pid := in.State()
			if st == StateRunning && pid != old && pid != 0 {
				return pid
			}
			if ctx.Err() != nil {
				t.Fatalf("no new running process: state %s pid %d", st, pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	_, pid := in.State()
	for i, action := range []string{ActionKill, ActionTerm} {
		if err := h.Do(ctx, "instance-1", action); err != nil {
			t.Fatal(err)
		}
		pid = waitNewPID(pid)
		i++
		if got := in.Info().Exits; got != i {
			t.Errorf("after kill %d: exits in window = %d", i, got)
		}
	}
	killedPID := pid
	if err := in.Kill(); err != nil {
		t.Fatal(err)
	}
	sigs := h.Signals()
	if len(sigs) != 3 || sigs[2].Instance != "instance-1" || sigs[2].PID != killedPID || sigs[2].Signal != syscall.SIGKILL ||
		sigs[0].Signal != syscall.SIGKILL || sigs[1].Signal != syscall.SIGTERM {
		t.Errorf("signals %+v, want kill, term, then a kill of pid %d", sigs, killedPID)
	}
	if err := in.WaitState(ctx, StateFailed); err != nil {
		t.Fatal(err)
	}
	if resp, _ := get(t, "GET", h.HTTPURL()+"/api/echo/x", "", nil); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("with no live instance: status %d, want 503", resp.StatusCode)
	}
	if err := h.Do(ctx, "instance-1", ActionRestart); err != nil {
		t.Fatal(err)
	}
	waitNewPID(pid)
	if got := in.Info().Exits; got != 0 {
		t.Errorf("after revival: exits in window = %d, want 0", got)
	}
}

// TestHost_PauseRoutesAround: a SIGSTOPped instance gets no new invocations until SIGCONT.
func TestHost_PauseRoutesAround(t *testing.T) {
	h := startFake(t, fakeApp(t, false), 2, nil, nil)
	ctx := testCtx(t, time.Minute)
	if err := h.Do(ctx, "instance-1", ActionStop); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		resp, body := get(t, "GET", h.HTTPURL()+"/api/echo/p", "", nil)
		if got := resp.Header.Get("X-Instance"); got != "instance-2" {
			t.Fatalf("call %d answered by %q (status %d: %s), want instance-2 while instance-1 is paused", i, got, resp.StatusCode, body)
		}
	}
	if st, _ := h.Instance("instance-1").State(); st != StatePaused {
		t.Errorf("state = %s, want paused", st)
	}
	if err := h.Do(ctx, "instance-1", ActionCont); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i := 0; i < 40 && len(seen) < 2; i++ {
		resp, _ := get(t, "GET", h.HTTPURL()+"/api/echo/p", "", nil)
		seen[resp.Header.Get("X-Instance")] = true
	}
	if !seen["instance-1"] {
		t.Errorf("after SIGCONT instance-1 got none of 40 calls: %v", seen)
	}
	if err := h.Do(ctx, "instance-9", ActionKill); err == nil {
		t.Error("chaos on an unknown instance succeeded")
	}
}

// TestHost_TermDrains: an instance sent SIGTERM gets no new invocations while it finishes
// what it has (the Functions host stops a stopping instance's listeners); its next process does.
func TestHost_TermDrains(t *testing.T) {
	h := startFake(t, fakeApp(t, false), 2, map[string]string{"FAKE_TERM_LINGER": "3s"}, nil)
	ctx := testCtx(t, time.Minute)
	in := h.Instance("instance-1")
	_, pid := in.State()
	if err := h.Do(ctx, "instance-1", ActionTerm); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		resp, body := get(t, "GET", h.HTTPURL()+"/api/echo/p", "", nil)
		if got := resp.Header.Get("X-Instance"); got != "instance-2" {
			t.Fatalf("call %d answered by %q (status %d: %s), want instance-2 while instance-1 stops", i, got, resp.StatusCode, body)
		}
	}
	// The calls above came while instance-1's process was still serving (it lingers 3 s).
	if st, p := in.State(); st != StateStopping || p != pid {
		t.Fatalf("after the calls: %s pid %d, want stopping pid %d", st, p, pid)
	}
	if err := in.WaitState(ctx, StateRunning); err != nil {
		t.Fatal(err)
	}
	if _, p := in.State(); p == pid {
		t.Fatalf("running again with the old pid %d", p)
	}
	seen := false
	for i := 0; i < 40 && !seen; i++ {
		resp, _ := get(t, "GET", h.HTTPURL()+"/api/echo/p", "", nil)
		seen = resp.Header.Get("X-Instance") == "instance-1"
	}
	if !seen {
		t.Error("instance-1's new process got none of 40 calls")
	}
}

// TestHost_TimerFiresOnEveryInstance: each occurrence fires on every instance, within the
// skew, with the TimerInfo the host sends.
func TestHost_TimerFiresOnEveryInstance(t *testing.T) {
	var mu sync.Mutex
	var ticks []InvokeRecord
	h := startFake(t, fakeApp(t, false), 3, map[string]string{"FAKE_SCHEDULE": "*/2 * * * * *"}, func(o *Options) {
		o.TimerSkew = DefaultTimerSkew
		o.MaxTimerFires = 2
		o.OnInvoke = func(r InvokeRecord) {
			if r.Function == "Tick" {
				mu.Lock()
				ticks = append(ticks, r)
				mu.Unlock()
			}
		}
	})
	ctx := testCtx(t, 30*time.Second)
	fires, err := h.WaitFires(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	for {
		mu.Lock()
		n := len(ticks)
		mu.Unlock()
		if n >= 6 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%d Tick invocations, want 6 (2 occurrences × 3 instances)", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	per := map[string]map[string]bool{}
	for _, r := range ticks {
		if r.Err != nil {
			t.Errorf("tick on %s failed: %v", r.Instance, r.Err)
		}
		req, err := protocol.DecodeRequest(r.Request)
		if err != nil {
			t.Fatal(err)
		}
		ti, err := protocol.DecodeTimer(req.Data["myTimer"])
		if err != nil {
			t.Fatal(err)
		}
		occ, _ := time.Parse(time.RFC3339, r.Detail)
		now, _ := protocol.ParseTime(req.Sys().UtcNow)
		if ti.ScheduleStatus == nil || !ti.ScheduleStatus.Next.Equal(occ) {
			t.Errorf("ScheduleStatus = %+v, want Next = occurrence %s", ti.ScheduleStatus, occ)
		}
		if d := now.Sub(occ); d < -DefaultTimerSkew-50*time.Millisecond || d > DefaultTimerSkew+time.Second {
			t.Errorf("fired %s from the occurrence, want within the skew", d)
		}
		if ti.IsPastDue || !ti.Schedule.AdjustForDST {
			t.Errorf("TimerInfo = %+v", ti)
		}
		if len(req.Metadata) != 1 || req.Sys().MethodName != "Tick" {
			t.Errorf("Metadata = %v, want only sys", req.Metadata)
		}
		if per[r.Detail] == nil {
			per[r.Detail] = map[string]bool{}
		}
		per[r.Detail][r.Instance] = true
	}
	for _, f := range fires {
		if got := per[f.Occurrence.UTC().Format(time.RFC3339)]; len(got) != 3 {
			t.Errorf("occurrence %s fired on %v, want all 3 instances (all: %v)", f.Occurrence, got, per)
		}
	}
}

// TestHost_StopTimers: StopTimers ends every timer's loop (nothing can fire after it returns)
// and leaves the instances serving.
func TestHost_StopTimers(t *testing.T) {
	h := startFake(t, fakeApp(t, false), 2, map[string]string{"FAKE_SCHEDULE": "* * * * * *"}, nil)
	ctx := testCtx(t, 30*time.Second)
	if _, err := h.WaitFires(ctx, 1); err != nil {
		t.Fatal(err)
	}
	h.StopTimers()
	for _, tt := range h.timers {
		select {
		case <-tt.done:
		default:
			t.Errorf("timer %s still runs after StopTimers", tt.fn.Name)
		}
	}
	if resp, _ := get(t, "GET", h.HTTPURL()+"/api/echo/p", "", nil); resp.StatusCode/100 != 2 {
		t.Errorf("GET /api/echo/p after StopTimers: %d, want the fake's answer", resp.StatusCode)
	}
	h.StopTimers() // twice is harmless
}
