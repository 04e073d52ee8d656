package devhost

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/batonfn/baton/internal/engine/protocol"
	"github.com/batonfn/baton/internal/tools/azurite"
)

// delivered is one invocation of the fake app's queue function (Queue or SB) as the handler saw
// it.
type delivered struct {
	rec   InvokeRecord
	body  string
	count int64 // DequeueCount, or DeliveryCount with Service Bus
}

// deliveryLog collects the queue function's invocations and wakes waiters on each.
type deliveryLog struct {
	mu      sync.Mutex
	got     []delivered
	changed chan struct{}
}

func newDeliveryLog() *deliveryLog { return &deliveryLog{changed: make(chan struct{})} }

func (d *deliveryLog) add(t *testing.T, r InvokeRecord) {
	if r.Function != "Queue" && r.Function != "SB" {
		return
	}
	req, err := protocol.DecodeRequest(r.Request)
	if err != nil {
		t.Errorf("decode: %v", err)
		return
	}
	body, _ := protocol.DecodeMessage(req.Data["msg"])
	one := delivered{rec: r, body: string(body)}
	if r.Function == "SB" {
		md, _ := protocol.DecodeServiceBusMetadata(req.Metadata)
		one.count = md.DeliveryCount
	} else {
		md, _ := protocol.DecodeQueueMetadata(req.Metadata)
		one.count = md.DequeueCount
	}
	d.mu.Lock()
	d.got = append(d.got, one)
	close(d.changed)
	d.changed = make(chan struct{})
	d.mu.Unlock()
}

// of returns the deliveries of body so far.
func (d *deliveryLog) of(body string) []delivered {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []delivered
	for _, g := range d.got {
		if g.body == body {
			out = append(out, g)
		}
	}
	return out
}

// waitFor blocks until body has n deliveries and returns them.
func (d *deliveryLog) waitFor(ctx context.Context, t *testing.T, body string, n int) []delivered {
	t.Helper()
	for {
		d.mu.Lock()
		ch := d.changed
		d.mu.Unlock()
		if got := d.of(body); len(got) >= n {
			return got
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%q: %d deliveries, want %d: %v", body, len(d.of(body)), n, ctx.Err())
		case <-ch:
		}
	}
}

// faultHost starts two fake instances with the queue function on a fresh queue in delivery
// mode d: the Storage queue's (maxDequeueCount 3, visibilityTimeout 1s, functionTimeout 2s) or
// Service Bus's (lock 2s, maxAutoLockRenewalDuration 1 minute). The listeners' message lease is
// 3s, so a message its host never settles comes back within a test.
func faultHost(t *testing.T, ctx context.Context, d Delivery, tweak func(*Options)) (*Host, *azqueue.QueueClient, string, *deliveryLog) {
	t.Helper()
	srv := azurite.Shared(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	queue := "qfault" + hex.EncodeToString(b[:])
	svc, err := azqueue.NewServiceClientFromConnectionString(srv.ConnectionString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	q := svc.NewQueueClient(queue)
	if _, err := q.Create(ctx, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = q.Delete(context.Background(), nil) })
	log := newDeliveryLog()
	root := fakeApp(t, true)
	settings := map[string]string{"FAKE_QUEUE": queue, "FakeStorage": srv.ConnectionString()}
	if d == DeliveryServiceBus {
		root = fakeServiceBusApp(t, "00:01:00")
		settings["AzureWebJobsStorage"] = srv.ConnectionString()
	}
	h := startFake(t, root, 2, settings, func(o *Options) {
		o.Delivery = d
		o.LockDuration = 2 * time.Second
		o.MessageLease = 3 * time.Second
		o.OnInvoke = func(r InvokeRecord) { log.add(t, r) }
		if tweak != nil {
			tweak(o)
		}
	})
	return h, q, queue, log
}

func send(ctx context.Context, t *testing.T, q *azqueue.QueueClient, body string) {
	t.Helper()
	if _, err := q.EnqueueMessage(ctx, base64.StdEncoding.EncodeToString([]byte(body)), nil); err != nil {
		t.Fatal(err)
	}
}

// waitEmpty waits until the queue holds no message, visible or not.
func waitEmpty(ctx context.Context, t *testing.T, q *azqueue.QueueClient) {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		props, err := q.GetProperties(ctx, nil)
		if err == nil && props.ApproximateMessagesCount != nil && *props.ApproximateMessagesCount == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the queue still holds messages: %v", ctx.Err())
		case <-tick.C:
		}
	}
}

// TestHost_FaultLost: a lost message is never delivered and leaves the queue, in both delivery
// modes; the fault hits only the message its filter picks, and the next one is delivered.
func TestHost_FaultLost(t *testing.T) {
	for _, d := range Deliveries {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t, time.Minute)
			h, q, queue, log := faultHost(t, ctx, d, nil)
			a, err := h.InjectFault(MessageFault{Kind: FaultLost, Queue: queue, Match: func(b string) bool { return strings.Contains(b, "lose") }})
			if err != nil {
				t.Fatal(err)
			}
			send(ctx, t, q, "keep me 1")
			send(ctx, t, q, "lose me")
			send(ctx, t, q, "keep me 2")
			strikes, err := a.Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			log.waitFor(ctx, t, "keep me 1", 1)
			log.waitFor(ctx, t, "keep me 2", 1)
			waitEmpty(ctx, t, q)
			if got := log.of("lose me"); len(got) != 0 {
				t.Errorf("the lost message was delivered %d times", len(got))
			}
			if len(strikes) != 1 || strikes[0].Body != "lose me" || strikes[0].Kind != FaultLost || strikes[0].Queue != queue {
				t.Errorf("strikes %+v, want one, the lost message", strikes)
			}
			if all := h.Strikes(); len(all) != 1 {
				t.Errorf("host strikes %+v, want 1", all)
			}
		})
	}
}

// TestHost_FaultAnswerLost: a receive whose answer was lost leaves the message invisible for
// the listener's message lease (Storage queue) or the lock (Service Bus); then it is delivered
// again, its first delivery counted although no handler saw it.
func TestHost_FaultAnswerLost(t *testing.T) {
	for _, d := range Deliveries {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t, time.Minute)
			h, q, queue, log := faultHost(t, ctx, d, nil)
			a, err := h.InjectFault(MessageFault{Kind: FaultAnswerLost, Queue: queue})
			if err != nil {
				t.Fatal(err)
			}
			send(ctx, t, q, "answer lost")
			strikes, err := a.Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			log.waitFor(ctx, t, "answer lost", 1)
			waitEmpty(ctx, t, q)
			got := log.of("answer lost")
			// Storage: hidden 3 s from the dequeue; Service Bus: locked 2 s from the receive.
			want := map[Delivery]time.Duration{DeliveryQueue: 2 * time.Second, DeliveryServiceBus: 1500 * time.Millisecond}[d]
			if len(got) != 1 || got[0].count != 2 || got[0].rec.Err != nil {
				t.Fatalf("deliveries %+v, want one, the second (count 2), a success", got)
			}
			if gap := got[0].rec.Started.Sub(strikes[0].At); gap < want {
				t.Errorf("delivered %s after the lost answer, want after the lease or lock (at least %s)", gap, want)
			}
			if s := strikes[0]; s.Again.IsZero() || s.Count != 1 {
				t.Errorf("strike %+v: want the delivery it took (1) and when the message comes back", s)
			}
		})
	}
}

// TestHost_FaultCrash: an instance that crashes while it handles a message (its handler killed
// mid-invocation) settles nothing, so the message comes back only when its lease (Storage
// queue: 3 s here, not visibilityTimeout's 1 s) or its lock (Service Bus: 2 s, not at once as
// an abandon) lapses; the handler is restarted.
func TestHost_FaultCrash(t *testing.T) {
	for _, d := range Deliveries {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t, time.Minute)
			h, q, queue, log := faultHost(t, ctx, d, nil)
			a, err := h.InjectFault(MessageFault{Kind: FaultCrash, Queue: queue, CrashAfter: 300 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			send(ctx, t, q, "hold then crash")
			strikes, err := a.Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			s := strikes[0]
			got := log.waitFor(ctx, t, "hold then crash", 2)
			if first := got[0]; first.rec.Err == nil || first.count != 1 || first.rec.Instance != s.Instance || first.rec.PID != s.PID {
				t.Errorf("first delivery %+v, want a failure (count 1) on the crashed %s/%d", first, s.Instance, s.PID)
			}
			want := map[Delivery]time.Duration{DeliveryQueue: 2 * time.Second, DeliveryServiceBus: 1200 * time.Millisecond}[d]
			if again := got[1]; again.count != 2 || again.rec.Started.Sub(s.At) < want {
				t.Errorf("delivered again %s after the crash with count %d, want count 2 after the lease or lock (at least %s)",
					again.rec.Started.Sub(s.At), again.count, want)
			}
			killed := false
			for _, sig := range h.Signals() {
				killed = killed || sig.Instance == s.Instance && sig.PID == s.PID && sig.Signal == syscall.SIGKILL
			}
			if !killed || s.Instance == "" {
				t.Errorf("strike %+v, signals %+v: want the handler killed", s, h.Signals())
			}
			in := h.Instance(s.Instance)
			for {
				in.mu.Lock()
				st, pid, ch := in.state, in.pid, in.changed
				in.mu.Unlock()
				if st == StateRunning && pid != s.PID {
					break
				}
				select {
				case <-ctx.Done():
					t.Fatalf("%s not restarted after its crash", s.Instance)
				case <-ch:
				}
			}
		})
	}
}

// TestHost_FaultControlEndpoint: POST /queues/{queue}/faults/{kind} arms a fault and answers
// what it hit; GET /faults lists it; a bad kind is refused, and a fault that finds no message
// within its wait is disarmed with 504.
func TestHost_FaultControlEndpoint(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	h, q, queue, log := faultHost(t, ctx, DeliveryQueue, func(o *Options) { o.ControlAddr = "127.0.0.1:0" })
	post := func(path string) (int, []byte) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.ControlURL()+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	type reply struct {
		code int
		body []byte
	}
	done := make(chan reply, 1)
	go func() {
		code, b := post("/queues/" + queue + "/faults/lost?match=via-http&wait=40s")
		done <- reply{code, b}
	}()
	// The fault must be armed before the message is sent.
	armed := func() int {
		h.queues[0].fmu.Lock()
		defer h.queues[0].fmu.Unlock()
		return len(h.queues[0].faults)
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for armed() == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the fault was never armed")
		case <-tick.C:
		}
	}
	send(ctx, t, q, "lost via-http")
	send(ctx, t, q, "kept")
	r := <-done
	var s Strike
	if err := json.Unmarshal(r.body, &s); r.code != http.StatusOK || err != nil || s.Body != "lost via-http" || s.Kind != FaultLost {
		t.Fatalf("POST: %d %s, want 200 and the strike of the lost message", r.code, r.body)
	}
	log.waitFor(ctx, t, "kept", 1)
	if n := len(log.of("lost via-http")); n != 0 {
		t.Errorf("the lost message was delivered %d times", n)
	}
	resp, err := http.Get(h.ControlURL() + "/faults")
	if err != nil {
		t.Fatal(err)
	}
	var all []Strike
	_ = json.NewDecoder(resp.Body).Decode(&all)
	resp.Body.Close()
	if len(all) != 1 || all[0].Body != "lost via-http" {
		t.Errorf("GET /faults: %+v, want the one strike", all)
	}
	if code, b := post("/queues/" + queue + "/faults/vanish"); code != http.StatusBadRequest {
		t.Errorf("an unknown fault: %d %s, want 400", code, b)
	}
	if code, b := post("/queues/" + queue + "/faults/crash?match=nothing-sends-this&wait=200ms"); code != http.StatusGatewayTimeout {
		t.Errorf("no matching message: %d %s, want 504", code, b)
	}
	if n := armed(); n != 0 {
		t.Errorf("%d faults still armed after the 504, want 0", n)
	}
}
