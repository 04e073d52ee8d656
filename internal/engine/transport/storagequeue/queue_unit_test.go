package storagequeue

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/internal/engine/transport/transporttest"
)

func TestNewQueueRequest(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	week := int32(7 * 24 * 3600)
	tests := []struct {
		name           string
		m              transport.Message
		defaultTTL     time.Duration
		wantVis        int32
		wantTTL        int32
		wantErr        error
		wantErrContain string
	}{
		{name: "deliver now, default TTL 7 days", m: transport.Message{ID: "r/1"}, wantVis: 0, wantTTL: week},
		{name: "NotBefore 1.2 s away rounds up to 2 s, TTL counts from then", m: transport.Message{ID: "r/1", NotBefore: now.Add(1200 * time.Millisecond)}, wantVis: 2, wantTTL: week + 2},
		{name: "NotBefore exactly 2 s away is 2 s", m: transport.Message{ID: "r/1", NotBefore: now.Add(2 * time.Second)}, wantVis: 2, wantTTL: week + 2},
		{name: "NotBefore 1 ns away is 1 s", m: transport.Message{ID: "r/1", NotBefore: now.Add(1)}, wantVis: 1, wantTTL: week + 1},
		{name: "NotBefore in the past is now", m: transport.Message{ID: "r/1", NotBefore: now.Add(-time.Hour)}, wantVis: 0, wantTTL: week},
		{name: "NotBefore 30 days away is capped at 7 days − 1 s", m: transport.Message{ID: "r/1", NotBefore: now.Add(30 * 24 * time.Hour)}, wantVis: week - 1, wantTTL: 2*week - 1},
		{name: "message TTL 1 h with visibility 5 s is 1 h + 5 s", m: transport.Message{ID: "r/1", NotBefore: now.Add(5 * time.Second), TTL: time.Hour}, wantVis: 5, wantTTL: 3605},
		{name: "TTL shorter than visibility still outlives it", m: transport.Message{ID: "r/1", NotBefore: now.Add(100 * time.Second), TTL: 50 * time.Second}, wantVis: 100, wantTTL: 150},
		{name: "fractional TTL rounds up", m: transport.Message{ID: "r/1", TTL: 1500 * time.Millisecond}, wantVis: 0, wantTTL: 2},
		{name: "sender default TTL applies when the message has none", m: transport.Message{ID: "r/1"}, defaultTTL: 10 * time.Minute, wantVis: 0, wantTTL: 600},
		{name: "message TTL wins over the sender default", m: transport.Message{ID: "r/1", TTL: time.Minute}, defaultTTL: 10 * time.Minute, wantVis: 0, wantTTL: 60},
		{name: "TTL beyond int32 seconds never expires", m: transport.Message{ID: "r/1", TTL: 100 * 365 * 24 * time.Hour}, wantVis: 0, wantTTL: -1},
		{name: "body of exactly 48 KiB fits", m: transport.Message{ID: "r/1", Body: make([]byte, MaxQueueBody)}, wantVis: 0, wantTTL: week},
		{name: "body of 48 KiB + 1 is too large", m: transport.Message{ID: "r/1", Body: make([]byte, MaxQueueBody+1)}, wantErr: transport.ErrTooLarge, wantErrContain: "49153 bytes"},
		{name: "empty ID is invalid", m: transport.Message{}, wantErr: transport.ErrInvalid},
		{name: "ID over 128 bytes is invalid", m: transport.Message{ID: strings.Repeat("a", 129)}, wantErr: transport.ErrInvalid},
		{name: "ID of 128 bytes is fine", m: transport.Message{ID: strings.Repeat("a", 128)}, wantVis: 0, wantTTL: week},
		{name: "negative TTL is invalid", m: transport.Message{ID: "r/1", TTL: -time.Second}, wantErr: transport.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := newQueueRequest(7, tc.m, now, tc.defaultTTL)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("got %v want an error wrapping %v", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), "message 7") || !strings.Contains(err.Error(), tc.wantErrContain) {
					t.Errorf("error %q does not name message 7 and %q", err, tc.wantErrContain)
				}
				return
			}
			if err != nil {
				t.Fatalf("got %v want nil", err)
			}
			if r.visibility != tc.wantVis || r.ttl != tc.wantTTL {
				t.Errorf("visibility, ttl: got %d, %d want %d, %d", r.visibility, r.ttl, tc.wantVis, tc.wantTTL)
			}
			if r.ttl != -1 && r.ttl <= r.visibility {
				t.Errorf("ttl %d ≤ visibility %d: the service rejects that", r.ttl, r.visibility)
			}
			if want := base64.StdEncoding.EncodeToString(tc.m.Body); r.text != want {
				t.Errorf("text: got %q want base64 of the body %q", r.text, want)
			}
		})
	}
}

// Base64 of the largest body is exactly the queue's 65,536-character message limit.
func TestMaxQueueBody_FillsTheMessageLimit(t *testing.T) {
	if got := base64.StdEncoding.EncodedLen(MaxQueueBody); got != 65536 {
		t.Fatalf("base64 length of MaxQueueBody: got %d want 65536", got)
	}
	if got := base64.StdEncoding.EncodedLen(MaxQueueBody + 1); got <= 65536 {
		t.Fatalf("base64 length of MaxQueueBody+1: got %d want > 65536", got)
	}
}

// fakeQueue is an in-memory queueAPI. enqueue, when set, decides each call's outcome; call
// numbers start at 1.
type fakeQueue struct {
	mu       sync.Mutex
	creates  int
	texts    []string
	opts     []azqueue.EnqueueMessageOptions
	calls    atomic.Int64
	createFn func(n int) error
	enqueue  func(ctx context.Context, call int64) error
}

func (f *fakeQueue) Create(ctx context.Context, _ *azqueue.CreateOptions) (azqueue.CreateResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creates++
	if f.createFn != nil {
		return azqueue.CreateResponse{}, f.createFn(f.creates)
	}
	return azqueue.CreateResponse{}, nil
}

func (f *fakeQueue) EnqueueMessage(ctx context.Context, content string, o *azqueue.EnqueueMessageOptions) (azqueue.EnqueueMessagesResponse, error) {
	n := f.calls.Add(1)
	if f.enqueue != nil {
		if err := f.enqueue(ctx, n); err != nil {
			return azqueue.EnqueueMessagesResponse{}, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.texts = append(f.texts, content)
	f.opts = append(f.opts, *o)
	return azqueue.EnqueueMessagesResponse{}, nil
}

func fakeMessages(n int) []transport.Message {
	msgs := make([]transport.Message, n)
	for i := range msgs {
		msgs[i] = transport.Message{ID: fmt.Sprintf("r/%d", i), Body: fmt.Appendf(nil, `{"i":%d}`, i)}
	}
	return msgs
}

func responseError(status int, code string) error {
	return &azcore.ResponseError{StatusCode: status, ErrorCode: code}
}

// gate holds each call until want of them are in flight at once (a sender with less
// parallelism than want times out there) and counts the peak in flight.
type gate struct {
	inFlight, peak atomic.Int64
	want           int64
	reached        chan struct{}
	once           sync.Once
}

func newGate(want int) *gate { return &gate{want: int64(want), reached: make(chan struct{})} }

// pass is one call: counted, and held when hold is set.
func (g *gate) pass(hold bool) error {
	n := g.inFlight.Add(1)
	defer g.inFlight.Add(-1)
	for p := g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
	}
	if !hold {
		return nil
	}
	if n == g.want {
		g.once.Do(func() { close(g.reached) })
	}
	select {
	case <-g.reached:
		return nil
	case <-time.After(20 * time.Second):
		return fmt.Errorf("%d calls never in flight at once", g.want)
	}
}

func TestQueueSender_Send_BoundedParallelism(t *testing.T) {
	for _, par := range []int{1, 4, 16} {
		t.Run(fmt.Sprintf("parallelism %d", par), func(t *testing.T) {
			g := newGate(par)
			f := &fakeQueue{enqueue: func(context.Context, int64) error { return g.pass(true) }}
			s := newQueueSender(f, "work", QueueSenderOptions{Parallelism: par})
			if err := s.Send(t.Context(), fakeMessages(200)); err != nil {
				t.Fatalf("Send: %v", err)
			}
			if got := g.peak.Load(); got != int64(par) {
				t.Errorf("peak calls in flight: got %d want %d", got, par)
			}
			if got := len(f.texts); got != 200 {
				t.Errorf("messages enqueued: got %d want 200", got)
			}
		})
	}
}

func TestQueueSender_Send_DefaultParallelism(t *testing.T) {
	s := newQueueSender(&fakeQueue{}, "work", QueueSenderOptions{})
	if s.win == nil || s.parallelism() != DefaultParallelism {
		t.Fatalf("default parallelism: adaptive %v, starting at %d; want adaptive from %d", s.win != nil, s.parallelism(), DefaultParallelism)
	}
	if s := newQueueSender(&fakeQueue{}, "work", QueueSenderOptions{Parallelism: 5}); s.win != nil || s.parallelism() != 5 {
		t.Fatalf("Parallelism 5: adaptive %v, %d in flight; want fixed at 5", s.win != nil, s.parallelism())
	}
}

// An adaptive sender whose calls keep their latency opens its window to MaxParallelism, and
// then keeps that many calls in flight; when the calls' latency then rises (the store is
// loaded by others) it closes the window again.
func TestQueueSender_Send_AdaptsParallelismToLatency(t *testing.T) {
	var held atomic.Bool
	g := newGate(MaxParallelism)
	f := &fakeQueue{enqueue: func(context.Context, int64) error { return g.pass(held.Load()) }}
	s := newQueueSender(f, "work", QueueSenderOptions{})
	var lat atomic.Int64
	lat.Store(int64(time.Millisecond))
	s.since = func(time.Time) time.Duration { return time.Duration(lat.Load()) }
	for i := 0; s.parallelism() < MaxParallelism; i++ {
		if i == 40 {
			t.Fatalf("window at %d after %d sends of steady latency, want %d", s.parallelism(), i, MaxParallelism)
		}
		if err := s.Send(t.Context(), fakeMessages(200)); err != nil {
			t.Fatal(err)
		}
	}
	held.Store(true)
	g.peak.Store(0)
	if err := s.Send(t.Context(), fakeMessages(200)); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if got := g.peak.Load(); got != MaxParallelism {
		t.Errorf("peak calls in flight: got %d want %d", got, MaxParallelism)
	}
	held.Store(false)
	lat.Store(int64(4 * time.Millisecond))
	for range 5 {
		if err := s.Send(t.Context(), fakeMessages(200)); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.parallelism(); got > MaxParallelism/4 {
		t.Errorf("window %d after five sends at four times the latency, want at most %d", got, MaxParallelism/4)
	}
}

func TestQueueSender_Send_StopsAtFirstError(t *testing.T) {
	f := &fakeQueue{enqueue: func(_ context.Context, n int64) error {
		if n == 5 {
			return responseError(http.StatusForbidden, "AuthorizationFailure")
		}
		return nil
	}}
	s := newQueueSender(f, "work", QueueSenderOptions{Parallelism: 1})
	err := s.Send(t.Context(), fakeMessages(20))
	if err == nil {
		t.Fatal("got nil want an error")
	}
	for _, want := range []string{"send 20 to queue work", "message 4 (id r/4)", "4 of 20 accepted", "AuthorizationFailure"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if transport.IsTransient(err) {
		t.Errorf("IsTransient: got true want false (403)")
	}
	if got := f.calls.Load(); got != 5 {
		t.Errorf("enqueue calls: got %d want 5 (none after the failure)", got)
	}
}

func TestQueueSender_Send_ContextCancelledMidway(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	f := &fakeQueue{enqueue: func(ctx context.Context, n int64) error {
		if n == 3 {
			cancel()
			return ctx.Err() // what the SDK returns for a cancelled request
		}
		return nil
	}}
	s := newQueueSender(f, "work", QueueSenderOptions{Parallelism: 1})
	err := s.Send(ctx, fakeMessages(50))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v want an error wrapping context.Canceled", err)
	}
	if transport.IsTransient(err) {
		t.Errorf("IsTransient: got true want false (cancellation is the caller's decision)")
	}
	if got := f.calls.Load(); got != 3 {
		t.Errorf("enqueue calls: got %d want 3", got)
	}
}

func TestQueueSender_Send_ValidatesBeforeSending(t *testing.T) {
	f := &fakeQueue{}
	s := newQueueSender(f, "work", QueueSenderOptions{})
	msgs := fakeMessages(10)
	msgs[9].Body = make([]byte, MaxQueueBody+1)
	if err := s.Send(t.Context(), msgs); !errors.Is(err, transport.ErrTooLarge) {
		t.Fatalf("got %v want ErrTooLarge", err)
	}
	if f.calls.Load() != 0 || f.creates != 0 {
		t.Errorf("calls: got %d enqueues and %d creates want none", f.calls.Load(), f.creates)
	}
}

func TestQueueSender_Send_MapsEachMessage(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	f := &fakeQueue{}
	s := newQueueSender(f, "work", QueueSenderOptions{Parallelism: 1, Now: func() time.Time { return now }})
	m := transport.Message{ID: "r/check", Body: []byte(`{"kind":"check"}`), NotBefore: now.Add(90 * time.Second), TTL: time.Minute}
	if err := s.Send(t.Context(), []transport.Message{m}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if got, want := f.texts[0], base64.StdEncoding.EncodeToString(m.Body); got != want {
		t.Errorf("text: got %q want %q", got, want)
	}
	if got := f.opts[0]; *got.VisibilityTimeout != 90 || *got.TimeToLive != 150 {
		t.Errorf("visibility, ttl: got %d, %d want 90, 150", *got.VisibilityTimeout, *got.TimeToLive)
	}
}

func TestQueueSender_CreatesOnceUnderConcurrency(t *testing.T) {
	f := &fakeQueue{}
	s := newQueueSender(f, "work", QueueSenderOptions{})
	var wg sync.WaitGroup
	errs := make([]error, 10)
	for g := range errs {
		wg.Go(func() { errs[g] = s.Send(t.Context(), fakeMessages(5)) })
	}
	wg.Wait()
	for g, err := range errs {
		if err != nil {
			t.Errorf("goroutine %d: %v", g, err)
		}
	}
	if f.creates != 1 {
		t.Errorf("Create calls: got %d want 1", f.creates)
	}
}

func TestQueueSender_CreateFailureIsRetriedNextSend(t *testing.T) {
	f := &fakeQueue{createFn: func(n int) error {
		if n == 1 {
			return responseError(http.StatusServiceUnavailable, "ServerBusy")
		}
		return nil
	}}
	s := newQueueSender(f, "work", QueueSenderOptions{})
	err := s.Send(t.Context(), fakeMessages(3))
	if !transport.IsTransient(err) || !strings.Contains(err.Error(), "create queue") {
		t.Fatalf("first Send: got %v want a transient create-queue error", err)
	}
	if f.calls.Load() != 0 {
		t.Errorf("enqueues after a failed create: got %d want 0", f.calls.Load())
	}
	if err := s.Send(t.Context(), fakeMessages(3)); err != nil {
		t.Fatalf("second Send: %v", err)
	}
	if f.creates != 2 {
		t.Errorf("Create calls: got %d want 2", f.creates)
	}
}

func TestQueueSender_QueueAlreadyExistsIsFine(t *testing.T) {
	f := &fakeQueue{createFn: func(int) error { return responseError(http.StatusConflict, "QueueAlreadyExists") }}
	s := newQueueSender(f, "work", QueueSenderOptions{})
	if err := s.Send(t.Context(), fakeMessages(2)); err != nil {
		t.Fatalf("Send: %v", err)
	}
}

func TestQueueSender_NoCreate(t *testing.T) {
	f := &fakeQueue{}
	s := newQueueSender(f, "work", QueueSenderOptions{NoCreate: true})
	if err := s.Send(t.Context(), fakeMessages(2)); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if f.creates != 0 {
		t.Errorf("Create calls: got %d want 0", f.creates)
	}
}

func TestTranslateQueueError(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want transporttest.Class
	}{
		{"nil", nil, ""},
		{"server busy", responseError(503, "ServerBusy"), transporttest.Throttled},
		{"503 without a code", responseError(503, ""), transporttest.Throttled},
		{"429 without a code", responseError(429, ""), transporttest.Throttled},
		{"operation timed out", responseError(500, "OperationTimedOut"), transporttest.Transient},
		{"internal error", responseError(500, "InternalError"), transporttest.Transient},
		{"queue being deleted", responseError(409, "QueueBeingDeleted"), transporttest.Transient},
		{"502", responseError(502, ""), transporttest.Transient},
		{"408", responseError(408, ""), transporttest.Transient},
		{"403 auth", responseError(403, "AuthorizationPermissionMismatch"), transporttest.Permanent},
		{"404 queue not found", responseError(404, "QueueNotFound"), transporttest.Permanent},
		{"400 out of range", responseError(400, "OutOfRangeQueryParameterValue"), transporttest.Permanent},
		{"413 body too large", responseError(413, "RequestBodyTooLarge"), transporttest.TooLarge},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, transporttest.Transient},
		{"connection reset", fmt.Errorf("read: %w", syscall.ECONNRESET), transporttest.Transient},
		{"context cancelled", fmt.Errorf("do: %w", context.Canceled), transporttest.Permanent},
		{"deadline exceeded", context.DeadlineExceeded, transporttest.Permanent},
		{"unknown", errors.New("boom"), transporttest.Permanent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := translateQueueError(tc.err)
			transporttest.CheckTranslated(t, tc.err, got, tc.want)
			if tc.err != nil && got.Error() != tc.err.Error() && tc.want != transporttest.TooLarge {
				t.Errorf("message changed: got %q want %q", got, tc.err)
			}
		})
	}
}
