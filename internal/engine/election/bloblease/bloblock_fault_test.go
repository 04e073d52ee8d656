package bloblease

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Faults a testFaultTransport can inject.
const (
	faultNone  = 0
	faultReset = -1 // connection reset by peer
	faultHang  = -2 // no answer until the request's context ends
	faultLost  = -3 // the request reaches storage but the response is lost (reset)
	faultSlow  = -4 // storage serves the request, but its answer arrives only after slowBy
	// any value >= 500 answers with that status and code ServerBusy/InternalError
)

// testFaultTransport is an azcore policy.Transporter that forwards requests to a real HTTP
// client unless its rule injects a fault. It counts renew requests that got through.
type testFaultTransport struct {
	client *http.Client
	slowBy time.Duration // the latency of a faultSlow request

	mu   sync.Mutex
	rule func(req *http.Request) int

	faults        atomic.Int64
	renewsPassed  atomic.Int64
	lastRenewPass atomic.Int64 // unix nanos when the last forwarded renewal was sent
}

func newTestFaultTransport() *testFaultTransport {
	return &testFaultTransport{client: &http.Client{}}
}

func (f *testFaultTransport) setRule(rule func(req *http.Request) int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rule = rule
}

func (f *testFaultTransport) Do(req *http.Request) (*http.Response, error) {
	f.mu.Lock()
	rule := f.rule
	f.mu.Unlock()
	kind := faultNone
	if rule != nil {
		kind = rule(req)
	}
	switch {
	case kind == faultReset:
		f.faults.Add(1)
		return nil, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	case kind == faultHang:
		f.faults.Add(1)
		<-req.Context().Done()
		return nil, req.Context().Err()
	case kind == faultLost:
		f.faults.Add(1)
		if resp, err := f.client.Do(req); err == nil {
			resp.Body.Close()
		}
		return nil, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	case kind == faultSlow:
		// A saturated store: the request is served (as the emulator serves a request whose
		// client gave up), and the answer comes late.
		f.faults.Add(1)
		sent := time.Now()
		resp, err := f.client.Do(req.WithContext(context.WithoutCancel(req.Context())))
		if err != nil {
			return nil, err
		}
		t := time.NewTimer(time.Until(sent.Add(f.slowBy)))
		defer t.Stop()
		select {
		case <-req.Context().Done():
			resp.Body.Close()
			return nil, req.Context().Err()
		case <-t.C:
		}
		if isTestRenewRequest(req) {
			f.renewsPassed.Add(1)
		}
		return resp, nil
	case kind >= 500:
		f.faults.Add(1)
		code := "InternalError"
		if kind == http.StatusServiceUnavailable {
			code = "ServerBusy"
		}
		return &http.Response{
			StatusCode: kind,
			Status:     strconv.Itoa(kind) + " " + http.StatusText(kind),
			Header:     http.Header{"X-Ms-Error-Code": {code}, "Content-Type": {"application/xml"}},
			Body:       io.NopCloser(strings.NewReader("")),
			Request:    req,
		}, nil
	}
	if isTestRenewRequest(req) {
		f.lastRenewPass.Store(time.Now().UnixNano())
		defer f.renewsPassed.Add(1)
	}
	return f.client.Do(req)
}

// isTestRenewRequest reports whether req is a lease renewal.
func isTestRenewRequest(req *http.Request) bool { return testLeaseAction(req) == "renew" }

// testLeaseAction is req's x-ms-lease-action (acquire, renew, release, ...), or "". The SDK
// sets its x-ms-* headers in lower case, bypassing http.Header's canonical keys, so look at
// every key.
func testLeaseAction(req *http.Request) string {
	for k, v := range req.Header {
		if strings.EqualFold(k, "x-ms-lease-action") && len(v) > 0 {
			return strings.ToLower(v[0])
		}
	}
	return ""
}

// failFirstRenewals returns a rule that injects faults, in order, into the first renewals.
func failFirstRenewals(faults ...int) func(*http.Request) int {
	var mu sync.Mutex
	return func(req *http.Request) int {
		if !isTestRenewRequest(req) {
			return faultNone
		}
		mu.Lock()
		defer mu.Unlock()
		if len(faults) == 0 {
			return faultNone
		}
		k := faults[0]
		faults = faults[1:]
		return k
	}
}
