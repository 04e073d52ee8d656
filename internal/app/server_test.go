package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/api"
	"github.com/batonfn/baton/internal/engine/protocol"
)

// syncBuffer collects log output written from server goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newTestServer(t *testing.T) (*server, *httptest.Server, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := newServer(logger, 5*time.Second, func() string { return "generated-id" })
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return s, hs, logs
}

func post(t *testing.T, url, invocationID string, body []byte) (*http.Response, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if invocationID != "" {
		req.Header.Set(protocol.HeaderInvocationID, invocationID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json (the host cannot read anything else)", ct)
	}
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("reply is not JSON: %q", raw)
	}
	return resp, v
}

func golden(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func errorCode(v map[string]any) string {
	e, _ := v["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

func TestServer_Readiness(t *testing.T) {
	_, hs, _ := newTestServer(t)
	resp, err := http.Get(hs.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET / = %d, want 200", resp.StatusCode)
	}
}

func TestServer_UnknownFunction_404JSON(t *testing.T) {
	_, hs, _ := newTestServer(t)
	resp, v := post(t, hs.URL+"/Nope", "", golden(t, "timer.json"))
	if resp.StatusCode != http.StatusNotFound || errorCode(v) != "function_not_found" {
		t.Fatalf("got %d %v, want 404 function_not_found", resp.StatusCode, v)
	}
}

func TestServer_WrongMethod_405(t *testing.T) {
	s, hs, _ := newTestServer(t)
	s.addTrigger("Tick", func(context.Context, *invocation) error { return nil })
	resp, err := http.Get(hs.URL + "/Tick")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /Tick = %d, want 405", resp.StatusCode)
	}
}

func TestServer_MalformedBody_400AndLogged(t *testing.T) {
	s, hs, logs := newTestServer(t)
	called := false
	s.addTrigger("Tick", func(context.Context, *invocation) error { called = true; return nil })
	for _, body := range []string{``, `{`, `[]`, `{"Metadata":{}}`, `{"Data":"x"}`} {
		resp, v := post(t, hs.URL+"/Tick", "inv-bad", []byte(body))
		if resp.StatusCode != http.StatusBadRequest || errorCode(v) != "bad_request" {
			t.Errorf("body %q: got %d %v, want 400 bad_request", body, resp.StatusCode, v)
		}
	}
	if called {
		t.Error("function ran on a malformed request")
	}
	if !strings.Contains(logs.String(), `"invocation":"inv-bad"`) || !strings.Contains(logs.String(), "malformed") {
		t.Errorf("no log line naming the invocation and the problem; logs:\n%s", logs)
	}
}

func TestServer_Panic_500AndKeepsServing(t *testing.T) {
	s, hs, logs := newTestServer(t)
	s.addTrigger("Boom", func(context.Context, *invocation) error { panic("kaboom") })
	s.addTrigger("Fine", func(context.Context, *invocation) error { return nil })
	resp, v := post(t, hs.URL+"/Boom", "inv-panic", golden(t, "timer.json"))
	if resp.StatusCode != http.StatusInternalServerError || errorCode(v) != "panic" {
		t.Fatalf("got %d %v, want 500 panic", resp.StatusCode, v)
	}
	if !strings.Contains(logs.String(), "kaboom") || !strings.Contains(logs.String(), "goroutine") {
		t.Errorf("panic and stack not logged:\n%s", logs)
	}
	resp, v = post(t, hs.URL+"/Fine", "", golden(t, "timer.json"))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("after a panic: got %d %v, want 200", resp.StatusCode, v)
	}
	if _, ok := v["Outputs"]; !ok {
		t.Errorf("success reply lacks Outputs: %v", v)
	}
}

func TestServer_TriggerErrors_MapToStatus(t *testing.T) {
	s, hs, _ := newTestServer(t)
	cases := []struct {
		err  error
		want int
		code string
	}{
		{badInput(errors.New("bad envelope")), 400, "bad_request"},
		{context.DeadlineExceeded, 504, "timeout"},
		{errors.New("storage down"), 500, "failed"},
	}
	for i, c := range cases {
		name := fmt.Sprintf("F%d", i)
		s.addTrigger(name, func(context.Context, *invocation) error { return c.err })
		resp, v := post(t, hs.URL+"/"+name, "", golden(t, "queue.json"))
		if resp.StatusCode != c.want || errorCode(v) != c.code {
			t.Errorf("%v: got %d %v, want %d %s", c.err, resp.StatusCode, v, c.want, c.code)
		}
	}
}

func TestServer_InvocationIDAndDeadline(t *testing.T) {
	s, hs, logs := newTestServer(t)
	var gotID string
	var hasDeadline bool
	s.addTrigger("Tick", func(ctx context.Context, inv *invocation) error {
		gotID = inv.ID
		_, hasDeadline = ctx.Deadline()
		inv.Logger.Info("hello from the function")
		return nil
	})
	post(t, hs.URL+"/Tick", "inv-123", golden(t, "timer.json"))
	if gotID != "inv-123" || !hasDeadline {
		t.Errorf("ID = %q, deadline = %v; want inv-123 and a deadline", gotID, hasDeadline)
	}
	line := ""
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "hello from the function") {
			line = l
		}
	}
	if !strings.Contains(line, `"function":"Tick"`) || !strings.Contains(line, `"invocation":"inv-123"`) {
		t.Errorf("function log line lacks function/invocation: %s", line)
	}
	post(t, hs.URL+"/Tick", "", golden(t, "timer.json"))
	if gotID != "generated-id" {
		t.Errorf("without the header ID = %q, want a generated one", gotID)
	}
}

func TestServer_HTTPFunction_ResOutput(t *testing.T) {
	s, hs, _ := newTestServer(t)
	s.addHTTP("Runs", bindingRequest, func(ctx context.Context, inv *invocation, req *protocol.HTTPRequest) api.Reply {
		if req.Param("id") == "" {
			return errorReply(http.StatusBadRequest, "missing_id", "id is required")
		}
		return api.Reply{Status: http.StatusOK, JSON: map[string]string{"id": req.Param("id")}}
	})
	resp, v := post(t, hs.URL+"/Runs", "", golden(t, "http-get.json"))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	res := v["Outputs"].(map[string]any)["res"].(map[string]any)
	if res["statusCode"] != float64(200) || res["headers"].(map[string]any)["Content-Type"] != "application/json" {
		t.Errorf("res = %v", res)
	}
	if res["body"] != `{"id":"tick-20261121t020000z"}` {
		t.Errorf("res.body = %v", res["body"])
	}

	_, v = post(t, hs.URL+"/Runs", "", golden(t, "http-post.json"))
	res = v["Outputs"].(map[string]any)["res"].(map[string]any)
	if res["statusCode"] != float64(400) || !strings.Contains(res["body"].(string), `"code":"missing_id"`) {
		t.Errorf("error res = %v", res)
	}

	resp, v = post(t, hs.URL+"/Runs", "", golden(t, "timer.json"))
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("timer payload to an HTTP function: %d %v, want 400", resp.StatusCode, v)
	}
}

func TestServer_HTTPFunction_NoStoreNoSniff(t *testing.T) {
	s, hs, _ := newTestServer(t)
	s.addHTTP("Runs", bindingRequest, func(ctx context.Context, inv *invocation, req *protocol.HTTPRequest) api.Reply {
		if req.Param("id") != "" {
			return api.Reply{Status: http.StatusOK, JSON: map[string]string{"id": req.Param("id")}}
		}
		// A function's own choice wins, whatever the case of its header name.
		return api.Reply{Status: http.StatusOK, Headers: map[string]string{"cache-control": "max-age=60"}, JSON: map[string]string{}}
	})
	for _, tc := range []struct {
		name, golden, header, want string
	}{
		{"a JSON reply is not stored", "http-get.json", "Cache-Control", "no-store"},
		{"a JSON reply is not sniffed", "http-get.json", "X-Content-Type-Options", "nosniff"},
		{"the function's own Cache-Control is kept", "http-post.json", "cache-control", "max-age=60"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, v := post(t, hs.URL+"/Runs", "", golden(t, tc.golden))
			headers := v["Outputs"].(map[string]any)["res"].(map[string]any)["headers"].(map[string]any)
			if got := headers[tc.header]; got != tc.want {
				t.Errorf("res.headers[%s] = %v, want %q (all: %v)", tc.header, got, tc.want, headers)
			}
			if tc.header == "cache-control" && headers["Cache-Control"] != nil {
				t.Errorf("res.headers has both cache-control and Cache-Control: %v", headers)
			}
		})
	}
}

func TestServer_HTTPFunction_BodyTooLarge_413(t *testing.T) {
	s, hs, logs := newTestServer(t)
	called := false
	s.addHTTP("Runs", bindingRequest, func(ctx context.Context, inv *invocation, req *protocol.HTTPRequest) api.Reply {
		called = true
		return api.Reply{Status: http.StatusOK}
	})
	big := strings.Repeat("x", protocol.MaxRequestBytes)
	payload, err := json.Marshal(map[string]any{"Data": map[string]any{bindingRequest: map[string]any{"Method": "POST", "Body": big}}})
	if err != nil {
		t.Fatal(err)
	}
	resp, v := post(t, hs.URL+"/Runs", "", payload)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("invocation status %d %v, want 200 carrying the 413 in res", resp.StatusCode, v)
	}
	res := v["Outputs"].(map[string]any)["res"].(map[string]any)
	if res["statusCode"] != float64(http.StatusRequestEntityTooLarge) {
		t.Errorf("res.statusCode = %v, want 413", res["statusCode"])
	}
	var body api.ErrorBody
	if err := json.Unmarshal([]byte(res["body"].(string)), &body); err != nil || body.Error.Code != api.CodeTooLarge {
		t.Errorf("res.body = %v (%v), want a JSON error with code %s", res["body"], err, api.CodeTooLarge)
	}
	if called {
		t.Error("the function ran on a truncated request")
	}
	if !strings.Contains(logs.String(), "http request too large") {
		t.Errorf("no log line for the refused request: %s", logs)
	}
}
