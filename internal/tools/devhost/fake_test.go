package devhost

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/batonfn/baton/internal/engine/protocol"
	"github.com/batonfn/baton/internal/tools/azurite"
)

// TestMain doubles as a fake custom handler: the host tests start this test binary with
// DEVHOST_FAKE_HANDLER=1, so they exercise real processes, ports and signals without Baton.
func TestMain(m *testing.M) {
	if os.Getenv("DEVHOST_FAKE_HANDLER") == "1" {
		fakeHandler()
		return
	}
	os.Exit(azurite.Main(m))
}

// fakeHandler answers GET / and these functions:
//
//	Echo   http output whose body is the invocation request it received
//	Slow   never answers (until the devhost gives up)
//	Plain  2xx with text/plain (a reply the host must reject)
//	Fail   500
//	Tick   200 with empty Outputs
//	Queue  200, or 500 when the message body contains "fail"
//	SB     as Queue, with the Service Bus metadata required (else 400); a body that contains
//	       "slow" is answered after FAKE_SLOW (a duration, default 4 s) on its first delivery
//
// Either queue function answers a body that contains "hold" after 1.5 s (an invocation still in
// flight when something happens to its instance).
func fakeHandler() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	inst := os.Getenv("BATON_INSTANCE_ID")
	reply := func(w http.ResponseWriter, v any) {
		b, _ := json.Marshal(v)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ready") })
	mux.HandleFunc("POST /Echo", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		reply(w, map[string]any{"Outputs": map[string]any{"res": map[string]any{
			"statusCode": "201", "body": string(body),
			"headers": map[string]any{"Content-Type": "application/json", "X-Instance": inst,
				"X-Invocation": r.Header.Get(protocol.HeaderInvocationID), "X-UA": r.Header.Get("User-Agent")},
		}}, "Logs": []string{"echoed"}})
	})
	mux.HandleFunc("POST /Slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Minute):
		}
	})
	mux.HandleFunc("POST /Plain", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, `{"Outputs":{}}`)
	})
	mux.HandleFunc("POST /Fail", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, `{"error":"boom"}`)
	})
	mux.HandleFunc("POST /Tick", func(w http.ResponseWriter, r *http.Request) { reply(w, map[string]any{"Outputs": map[string]any{}}) })
	// queueFn is Queue, or SB when serviceBus is set.
	queueFn := func(serviceBus bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			req, err := protocol.DecodeRequest(body)
			var md protocol.ServiceBusMetadata
			if err == nil && serviceBus {
				md, err = protocol.DecodeServiceBusMetadata(req.Metadata)
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			msg, _ := protocol.DecodeMessage(req.Data["msg"])
			if strings.Contains(string(msg), "fail") {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = io.WriteString(w, `{"error":"asked to fail"}`)
				return
			}
			if strings.Contains(string(msg), "hold") {
				select {
				case <-r.Context().Done():
					return
				case <-time.After(1500 * time.Millisecond):
				}
			}
			if serviceBus && strings.Contains(string(msg), "slow") && md.DeliveryCount == 1 {
				slow, err := time.ParseDuration(os.Getenv("FAKE_SLOW"))
				if err != nil {
					slow = 4 * time.Second
				}
				select {
				case <-r.Context().Done():
					return
				case <-time.After(slow):
				}
			}
			reply(w, map[string]any{"Outputs": map[string]any{}})
		}
	}
	mux.HandleFunc("POST /Queue", queueFn(false))
	mux.HandleFunc("POST /SB", queueFn(true))
	srv := &http.Server{Addr: "127.0.0.1:" + os.Getenv("FUNCTIONS_CUSTOMHANDLER_PORT"), Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		// FAKE_TERM_LINGER: keep serving that long after SIGTERM, as a handler handing over does.
		if d, err := time.ParseDuration(os.Getenv("FAKE_TERM_LINGER")); err == nil {
			time.Sleep(d)
		}
		c, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(c)
	}()
	_ = srv.ListenAndServe()
}

// fakeApp writes a function app for the fake handler into a temp dir and returns its root.
// queueConn, when set, adds the Queue function on %FAKE_QUEUE% with that connection setting.
func fakeApp(t *testing.T, queue bool) string {
	t.Helper()
	root := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	host := map[string]any{
		"version":         "2.0",
		"functionTimeout": "00:00:02",
		"customHandler":   map[string]any{"description": map[string]any{"defaultExecutablePath": exe}},
		"extensions": map[string]any{"http": map[string]any{"routePrefix": "api"},
			"queues": map[string]any{"batchSize": 4, "newBatchThreshold": 2, "maxDequeueCount": 3,
				"visibilityTimeout": "00:00:01", "maxPollingInterval": "00:00:00.5", "messageEncoding": "base64"}},
	}
	write := func(path string, v any) { writeJSONFile(t, path, v) }
	write(filepath.Join(root, "host.json"), host)
	httpFn := func(route string, methods ...string) map[string]any {
		return map[string]any{"bindings": []map[string]any{
			{"name": "req", "type": "httpTrigger", "direction": "in", "authLevel": "function", "methods": methods, "route": route},
			{"name": "res", "type": "http", "direction": "out"},
		}}
	}
	write(filepath.Join(root, "Echo", "function.json"), httpFn("echo/{id?}", "get", "post"))
	write(filepath.Join(root, "Slow", "function.json"), httpFn("slow", "get"))
	write(filepath.Join(root, "Plain", "function.json"), httpFn("plain", "get"))
	write(filepath.Join(root, "Fail", "function.json"), httpFn("fail", "get"))
	write(filepath.Join(root, "Tick", "function.json"), map[string]any{"bindings": []map[string]any{
		{"name": "myTimer", "type": "timerTrigger", "direction": "in", "schedule": "%FAKE_SCHEDULE%"}}})
	if queue {
		write(filepath.Join(root, "Queue", "function.json"), map[string]any{"bindings": []map[string]any{
			{"name": "msg", "type": "queueTrigger", "direction": "in", "queueName": "%FAKE_QUEUE%", "connection": "FakeStorage"}}})
	}
	return root
}

// writeJSONFile writes v, indented, to path, creating its folder.
func writeJSONFile(t *testing.T, path string, v any) {
	t.Helper()
	b, _ := json.MarshalIndent(v, "", "  ")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// testQueue creates a fresh queue on the shared Azurite and returns it with its name.
func testQueue(t *testing.T, ctx context.Context) (*azurite.Server, *azqueue.ServiceClient, *azqueue.QueueClient, string) {
	t.Helper()
	srv := azurite.Shared(t)
	// Short enough for its poison queue's name too (63 at most), its random end kept.
	name := azurite.UniqueName(t, "q")
	head, tail := name[:len(name)-len("-01234567")], name[len(name)-len("-01234567"):]
	queue := strings.TrimRight(head[:min(len(head), 40)], "-") + tail
	svc, err := azqueue.NewServiceClientFromConnectionString(srv.ConnectionString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	q := svc.NewQueueClient(queue)
	if _, err := q.Create(ctx, nil); err != nil {
		t.Fatal(err)
	}
	return srv, svc, q, queue
}

// neverSchedule is a schedule that does not fire during a test.
const neverSchedule = "0 0 0 1 1 *"

// startFake starts a Host over fakeApp with n instances.
func startFake(t *testing.T, root string, n int, settings map[string]string, tweak func(*Options)) *Host {
	t.Helper()
	s := map[string]string{"DEVHOST_FAKE_HANDLER": "1", "FAKE_SCHEDULE": neverSchedule}
	for k, v := range settings {
		s[k] = v
	}
	opts := Options{AppRoot: root, Instances: n, Settings: s, HTTPAddr: "127.0.0.1:0", SkipConfigCheck: true,
		Out: testWriter{t}, TimerSkew: -1}
	if tweak != nil {
		tweak(&opts)
	}
	h, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := h.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return h
}

// testWriter sends the host's output to the test log (shown with -v or on failure).
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
