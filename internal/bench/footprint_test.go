package bench

import (
	"bytes"

	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/protocol"
	"github.com/batonfn/baton/internal/tools/azurite"
)

// startTrials is the number of handler starts per iteration of BenchmarkHandlerStart.
const startTrials = 20

// invokeRequests is the number of requests per iteration of a BenchmarkHandlerInvoke case.
const invokeRequests = 10000

// BenchmarkHandlerBinary reports the size of the handler binary: stripped (go build -trimpath
// -ldflags='-s -w'), and as `make build` builds it (-trimpath).
func BenchmarkHandlerBinary(b *testing.B) {
	for b.Loop() {
		stripped, plain := handlerBinaries(b)
		for _, f := range []struct{ path, unit string }{{stripped, "stripped-MiB"}, {plain, "make-build-MiB"}} {
			st, err := os.Stat(f.path)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(st.Size())/(1<<20), f.unit)
		}
	}
}

// BenchmarkHandlerStart starts the stripped handler startTrials times and measures exec →
// first answer to the host's readiness probe (GET /, polled every 0.5 ms); then lets one
// instance sit idle for 3 s and reads its memory. The handler builds its SDK clients at
// start-up but makes no storage call until invoked.
//
// Metrics: ready-p50-ms / ready-max-ms, rss-at-ready-MiB (median), idle-rss-MiB and
// idle-peak-rss-MiB (VmRSS and VmHWM after 3 s idle), idle-cpu-ms (CPU time used by then).
func BenchmarkHandlerStart(b *testing.B) {
	exe, _ := handlerBinaries(b)
	var ready Samples
	var rssAtReady []time.Duration // bytes, kept as Durations to reuse Percentile
	for b.Loop() {
		for range startTrials {
			h := spawnHandler(b, exe)
			ready.Add(h.ready)
			if st, err := ReadProc(h.cmd.Process.Pid); err == nil {
				rssAtReady = append(rssAtReady, time.Duration(st.RSS))
			}
			h.stop()
		}
		h := spawnHandler(b, exe)
		time.Sleep(3 * time.Second) // idle on purpose: this is the measurement
		st, err := ReadProc(h.cmd.Process.Pid)
		h.stop()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(st.RSS)/(1<<20), "idle-rss-MiB")
		b.ReportMetric(float64(st.PeakRSS)/(1<<20), "idle-peak-rss-MiB")
		b.ReportMetric(float64(st.CPU.Milliseconds()), "idle-cpu-ms")
	}
	b.ReportMetric(float64(ready.Percentile(50).Microseconds())/1000, "ready-p50-ms")
	b.ReportMetric(float64(ready.Percentile(100).Microseconds())/1000, "ready-max-ms")
	b.ReportMetric(float64(Percentile(rssAtReady, 50))/(1<<20), "rss-at-ready-MiB")
}

// BenchmarkHandlerInvoke drives one handler process from this process with C concurrent
// HTTP clients sending invokeRequests host-shaped invocations, and measures each request:
//
//   - fn=Dashboard: a real HTTP function that touches no storage (the dashboard page, 10 KiB
//     of HTML in the `res` output): request decoding, routing, the api call, reply encoding.
//   - fn=Runs-405: the Runs function asked with a method it refuses: the smallest invocation.
//   - probe: GET / (the host's readiness probe): the HTTP floor, not an invocation.
//
// Metrics: req/s, p50-us and p99-us per request, handler-cpu-us/req (the handler's CPU time
// over the requests) and handler-peak-rss-MiB afterwards. The load generator shares the two
// cores with the handler.
func BenchmarkHandlerInvoke(b *testing.B) {
	exe, _ := handlerBinaries(b)
	cases := []struct {
		name    string
		clients []int
		req     func(url string) (*http.Request, error)
		check   func(status int, body []byte) error
	}{
		{"fn=Dashboard", []int{1, 4, 16, 64}, invocation("Dashboard", "GET", "dashboard"), wantHTTPOutput(http.StatusOK)},
		{"fn=Runs-405", []int{16}, invocation("Runs", "PUT", "runs"), wantHTTPOutput(http.StatusMethodNotAllowed)},
		{"probe", []int{16}, func(url string) (*http.Request, error) { return http.NewRequest(http.MethodGet, url+"/", nil) },
			func(status int, _ []byte) error {
				if status != http.StatusOK {
					return fmt.Errorf("status %d", status)
				}
				return nil
			}},
	}
	for _, c := range cases {
		for _, clients := range c.clients {
			b.Run(fmt.Sprintf("%s/clients=%d", c.name, clients), func(b *testing.B) {
				for b.Loop() {
					h := spawnHandler(b, exe)
					load(b, h, clients, c.req, c.check)
					h.stop()
				}
			})
		}
	}
}

// load sends invokeRequests requests from clients goroutines and reports the metrics.
func load(b *testing.B, h *handlerProc, clients int, mk func(string) (*http.Request, error), check func(int, []byte) error) {
	b.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	do := func() (time.Duration, error) {
		req, err := mk(h.url)
		if err != nil {
			return 0, err
		}
		t0 := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(t0)
		if err != nil {
			return 0, err
		}
		return took, check(resp.StatusCode, body)
	}
	// Warm up every connection (and check the reply) before measuring.
	for range clients {
		if _, err := do(); err != nil {
			b.Fatal(err)
		}
	}
	pid := h.cmd.Process.Pid
	before, err := ReadProc(pid)
	if err != nil {
		b.Fatal(err)
	}
	var lat Samples
	var next atomic.Int64
	var failed atomic.Pointer[error]
	start := time.Now()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for next.Add(1) <= invokeRequests && failed.Load() == nil {
				d, err := do()
				if err != nil {
					failed.Store(&err)
					return
				}
				lat.Add(d)
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	after, err := ReadProc(pid)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(invokeRequests)/wall.Seconds(), "req/s")
	b.ReportMetric(float64(lat.Percentile(50).Nanoseconds())/1000, "p50-us")
	b.ReportMetric(float64(lat.Percentile(99).Nanoseconds())/1000, "p99-us")
	b.ReportMetric(float64((after.CPU-before.CPU).Microseconds())/invokeRequests, "handler-cpu-us/req")
	b.ReportMetric(float64(after.PeakRSS)/(1<<20), "handler-peak-rss-MiB")
}

// invocation builds a host-shaped httpTrigger invocation of fn (binding "req") for method and
// route, as POST /<fn>.
func invocation(fn, method, route string) func(url string) (*http.Request, error) {
	return func(url string) (*http.Request, error) {
		hdr := map[string][]string{"Accept": {"*/*"}, "Host": {"127.0.0.1:7071"}, "User-Agent": {"bench"}}
		req := protocol.HTTPRequest{URL: "http://127.0.0.1:7071/api/" + route, Method: method, Query: map[string]string{},
			Headers: hdr, Params: map[string]*string{}, Identities: json.RawMessage("[]")}
		data, err := json.Marshal(req)
		if err != nil {
			return nil, err
		}
		single, _ := json.Marshal(map[string]string{"Accept": "*/*", "Host": "127.0.0.1:7071", "User-Agent": "bench"})
		body, err := json.Marshal(protocol.InvokeRequest{
			Data: map[string]json.RawMessage{"req": data},
			Metadata: map[string]json.RawMessage{"Query": json.RawMessage("{}"), "Headers": single,
				"sys": protocol.SysMeta(fn, time.Now(), uuid.NewString())},
		})
		if err != nil {
			return nil, err
		}
		r, err := http.NewRequest(http.MethodPost, url+"/"+fn, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set(protocol.HeaderInvocationID, uuid.NewString())
		return r, nil
	}
}

// wantHTTPOutput checks a successful invocation whose `res` output has the given status.
func wantHTTPOutput(status int) func(int, []byte) error {
	return func(code int, body []byte) error {
		if code != http.StatusOK {
			return fmt.Errorf("invocation answered %d: %s", code, firstBytes(body, 200))
		}
		var out struct {
			Outputs struct {
				Res struct {
					StatusCode json.Number `json:"statusCode"`
				} `json:"res"`
			} `json:"Outputs"`
		}
		if err := json.Unmarshal(body, &out); err != nil {
			return fmt.Errorf("invocation reply: %w: %s", err, firstBytes(body, 200))
		}
		if got, _ := out.Outputs.Res.StatusCode.Int64(); int(got) != status {
			return fmt.Errorf("res.statusCode = %s, want %d: %s", out.Outputs.Res.StatusCode, status, firstBytes(body, 200))
		}
		return nil
	}
}

func firstBytes(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// handlerProc is one handler process started by the benchmark.
type handlerProc struct {
	cmd    *exec.Cmd
	url    string
	ready  time.Duration // exec → first answer to GET /
	exited chan struct{}
}

// spawnHandler starts the handler on a free port with a valid configuration (the shared
// Azurite as its storage; nothing is called at start-up) and waits until GET / answers.
func spawnHandler(b *testing.B, exe string) *handlerProc {
	b.Helper()
	port, err := freeTCPPort()
	if err != nil {
		b.Fatal(err)
	}
	srv := azurite.Shared(b)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(),
		config.SettingPort+"="+strconv.Itoa(port),
		config.SettingHostStorage+"="+srv.ConnectionString(),
		config.SettingTransport+"="+string(config.TransportQueue),
		config.SettingHeartbeat+"=0 * * * * *",
		config.SettingSchedule+"=0 0 0 1 1 *",
		config.SettingJob+"=synthetic",
		config.SettingJobParams+`={"partitions":10}`,
		config.SettingLeaseContainer+"="+shortName("lease"),
		config.SettingRunsContainer+"="+shortName("runs"),
		config.SettingLogLevel+"=warn",
	)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	h := &handlerProc{cmd: cmd, url: fmt.Sprintf("http://127.0.0.1:%d", port), exited: make(chan struct{})}
	probe := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Second}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(h.exited) }()
	b.Cleanup(h.stop)
	deadline := start.Add(30 * time.Second)
	for {
		resp, err := probe.Get(h.url + "/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				h.ready = time.Since(start)
				return h
			}
		}
		select {
		case <-h.exited:
			b.Fatalf("handler exited before it was ready: %v", cmd.ProcessState)
		case <-time.After(500 * time.Microsecond):
		}
		if time.Now().After(deadline) {
			b.Fatal("handler not ready within 30s")
		}
	}
}

// stop ends the process (SIGTERM, SIGKILL after 5 s); safe to call more than once.
func (h *handlerProc) stop() {
	select {
	case <-h.exited:
		return
	default:
	}
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.exited:
	case <-time.After(5 * time.Second):
		_ = h.cmd.Process.Kill()
		<-h.exited
	}
}

func freeTCPPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
