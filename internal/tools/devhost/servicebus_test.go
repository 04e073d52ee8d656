package devhost

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/batonfn/baton/internal/engine/protocol"
)

// fakeServiceBusApp is fakeApp with the SB function (serviceBusTrigger) on the Queue function's
// queue, functionTimeout 10s, the queues' visibilityTimeout 5s (so that Storage-queue
// redelivery would be slow) and maxAutoLockRenewalDuration renewFor ("00:00:01").
func fakeServiceBusApp(t *testing.T, renewFor string) string {
	t.Helper()
	root := fakeApp(t, true)
	var host map[string]any
	b, err := os.ReadFile(filepath.Join(root, "host.json"))
	if err != nil || json.Unmarshal(b, &host) != nil {
		t.Fatalf("read host.json: %v", err)
	}
	host["functionTimeout"] = "00:00:10"
	ext := host["extensions"].(map[string]any)
	ext["queues"].(map[string]any)["visibilityTimeout"] = "00:00:05"
	ext["serviceBus"] = map[string]any{"maxAutoLockRenewalDuration": renewFor, "maxConcurrentCalls": 8}
	writeJSONFile(t, filepath.Join(root, "host.json"), host)
	writeJSONFile(t, filepath.Join(root, "SB", "function.json"), map[string]any{"bindings": []map[string]any{
		{"name": "msg", "type": "serviceBusTrigger", "direction": "in", "queueName": "%FAKE_QUEUE%", "connection": "ServiceBusConnection"}}})
	return root
}

// sbDelivered is one delivery the SB function saw.
type sbDelivered struct {
	rec  InvokeRecord
	md   protocol.ServiceBusMetadata
	raw  map[string]json.RawMessage
	body string
}

// TestHost_ServiceBusDelivery runs the Service Bus delivery mode against Azurite and the fake
// handler (two instances, lock 5s, maxAutoLockRenewalDuration 1s, maxDeliveryCount 3,
// visibilityTimeout 5s), one semantic per message:
//
//   - a plain Storage message (as Baton's sender writes) is delivered once to the
//     serviceBusTrigger function, with DeliveryCount "1" and the Service Bus metadata, and
//     completed; the queueTrigger function on the same queue is never invoked;
//   - a failing one is redelivered at once (well before its lock or visibilityTimeout would
//     bring it back) with DeliveryCount 1, 2, 3 and then dead-lettered to <queue>-poison with
//     its text as sent;
//   - one whose first invocation (8s) outlives its lock is delivered again (DeliveryCount 2)
//     while the first still runs;
//   - a second message with a MessageId already seen is dropped;
//   - scheduled messages are never delivered before their ScheduledEnqueueTime.
func TestHost_ServiceBusDelivery(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	srv, svc, q, queue := testQueue(t, ctx)
	var (
		mu        sync.Mutex
		delivered = map[string][]sbDelivered{} // by message body
		queueFn   int
		changed   = make(chan struct{}, 1)
	)
	// The lock is long enough that only the slow message, whose first invocation outlives
	// it, ever comes back by its lapse: every other redelivery is the host's own.
	const lock, slowFor = 5 * time.Second, 8 * time.Second
	env := map[string]string{"FAKE_QUEUE": queue, "AzureWebJobsStorage": srv.ConnectionString(), "FAKE_SLOW": slowFor.String()}
	h := startFake(t, fakeServiceBusApp(t, "00:00:01"), 2, env, func(o *Options) {
		o.Delivery = DeliveryServiceBus
		o.LockDuration = lock
		o.OnInvoke = func(r InvokeRecord) {
			mu.Lock()
			defer mu.Unlock()
			defer func() {
				select {
				case changed <- struct{}{}:
				default:
				}
			}()
			if r.Function == "Queue" {
				queueFn++
				return
			}
			if r.Function != "SB" {
				return
			}
			req, err := protocol.DecodeRequest(r.Request)
			if err != nil {
				t.Errorf("decode: %v", err)
				return
			}
			md, err := protocol.DecodeServiceBusMetadata(req.Metadata)
			if err != nil {
				t.Errorf("Service Bus metadata: %v", err)
			}
			body, _ := protocol.DecodeMessage(req.Data["msg"])
			delivered[string(body)] = append(delivered[string(body)], sbDelivered{rec: r, md: md, raw: req.Metadata, body: string(body)})
		}
	})
	waitUntil := func(what string, done func() bool) {
		t.Helper()
		for {
			mu.Lock()
			ok := done()
			mu.Unlock()
			if ok {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("timed out waiting for %s", what)
			case <-changed:
			case <-time.After(100 * time.Millisecond): // settlements and poison moves do not signal
			}
		}
	}

	enc := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	good, bad, slow := `{"kind":"good","n":7}`, "please fail", "slow once"
	storageID := map[string]string{}
	for _, body := range []string{good, bad, slow} {
		r, err := q.EnqueueMessage(ctx, enc(body), nil)
		if err != nil {
			t.Fatal(err)
		}
		storageID[body] = *r.Messages[0].MessageID
	}
	now := time.Now()
	soon, later := now.Add(700*time.Millisecond), now.Add(3300*time.Millisecond)
	for _, m := range []ServiceBusMessage{
		{MessageID: "dup-1", Body: "dup first"},
		{MessageID: "dup-1", Body: "dup second"},
		{MessageID: "other", Body: "other id", Properties: map[string]string{"kind": "test"}},
		{MessageID: "sched-soon", Body: "scheduled soon", ScheduledEnqueueTime: soon},
		{MessageID: "sched-later", Body: "scheduled later", ScheduledEnqueueTime: later},
	} {
		if err := SendServiceBus(ctx, q, m, now); err != nil {
			t.Fatal(err)
		}
	}

	waitUntil("every message settled", func() bool {
		return len(delivered[good]) == 1 && len(delivered[bad]) == 3 && len(delivered[slow]) == 2 &&
			len(delivered["dup first"])+len(delivered["dup second"]) == 1 && len(delivered["other id"]) == 1 &&
			len(delivered["scheduled soon"]) == 1 && len(delivered["scheduled later"]) == 1
	})
	waitUntil("the failing message dead-lettered", func() bool { return len(h.Poisoned()) == 1 })
	// The slow message's first invocation ends slowFor after it started; then the queue is empty.
	waitUntil("the queue empty", func() bool {
		p, err := q.PeekMessages(ctx, nil)
		return err == nil && len(p.Messages) == 0 && len(delivered[slow]) == 2 && !delivered[slow][0].rec.End.IsZero()
	})

	mu.Lock()
	defer mu.Unlock()
	if queueFn != 0 {
		t.Errorf("the queueTrigger function on the queue was invoked %d times, want 0 (replaced by the Service Bus one)", queueFn)
	}

	// Completed once, with the Service Bus trigger's metadata.
	g := delivered[good][0]
	if g.rec.Err != nil || g.md.DeliveryCount != 1 || g.md.MessageID != storageID[good] || g.md.SequenceNumber < 1 {
		t.Errorf("plain message: err %v DeliveryCount %d MessageId %q SequenceNumber %d, want success, 1, the Storage message ID %q, >= 1",
			g.rec.Err, g.md.DeliveryCount, g.md.MessageID, g.md.SequenceNumber, storageID[good])
	}
	for key, want := range map[string]string{"DeliveryCount": `"1"`, "kind": `"\"good\""`, "n": `"7"`, "ApplicationProperties": `{}`, "MessageActions": `{}`} {
		if got := string(g.raw[key]); got != want {
			t.Errorf("Metadata.%s = %s, want %s", key, got, want)
		}
	}
	for _, key := range []string{"LockToken", "SequenceNumber", "EnqueuedTimeUtc", "EnqueuedTime", "ExpiresAtUtc", "ExpiresAt", "UserProperties", "Client", "sys"} {
		if _, ok := g.raw[key]; !ok {
			t.Errorf("Metadata.%s missing", key)
		}
	}
	for _, key := range []string{"DequeueCount", "PopReceipt", "Id"} {
		if _, ok := g.raw[key]; ok {
			t.Errorf("Metadata.%s present: a Storage-queue key in a Service Bus invocation", key)
		}
	}
	if got := string(delivered["other id"][0].raw["ApplicationProperties"]); got != `{"kind":"test"}` {
		t.Errorf("ApplicationProperties = %s, want the sender's {\"kind\":\"test\"}", got)
	}

	// Immediate redelivery after a 500, DeliveryCount 1..3, then the dead-letter queue.
	for i, d := range delivered[bad] {
		if d.rec.Err == nil || d.md.DeliveryCount != int64(i+1) || d.md.MessageID != storageID[bad] {
			t.Errorf("failing message, delivery %d: err %v DeliveryCount %d MessageId %q, want a failure, %d, %q",
				i+1, d.rec.Err, d.md.DeliveryCount, d.md.MessageID, i+1, storageID[bad])
		}
		if i > 0 {
			// At once: a loaded machine takes a while, but not the lock's 5s.
			if gap := d.rec.Started.Sub(delivered[bad][i-1].rec.End); gap > lock/2 {
				t.Errorf("delivery %d came %s after the failure, want at once (within %s; the lock and visibilityTimeout are %s)", i+1, gap, lock/2, lock)
			}
		}
	}
	poison, err := svc.NewQueueClient(queue+PoisonSuffix).PeekMessages(ctx, &azqueue.PeekMessagesOptions{NumberOfMessages: to.Ptr(int32(32))})
	if err != nil {
		t.Fatal(err)
	}
	if len(poison.Messages) != 1 || *poison.Messages[0].MessageText != enc(bad) {
		t.Errorf("dead-letter queue holds %d messages, want exactly the failing one with its text as sent", len(poison.Messages))
	}

	// Lock expiry: delivered again while the first invocation still ran.
	s1, s2 := delivered[slow][0], delivered[slow][1] // recorded as they ended
	if s2.rec.Started.Before(s1.rec.Started) {
		s1, s2 = s2, s1
	}
	if s1.md.DeliveryCount != 1 || s2.md.DeliveryCount != 2 {
		t.Errorf("slow message: DeliveryCounts %d, %d, want 1, 2", s1.md.DeliveryCount, s2.md.DeliveryCount)
	}
	if !s2.rec.Started.Before(s1.rec.End) {
		t.Errorf("slow message: second delivery started %s, after the first ended %s; want it delivered again once the lock lapsed", s2.rec.Started, s1.rec.End)
	}
	// The lock was taken a moment before the first invocation started, and Azurite times it
	// in whole seconds.
	if lapse := s2.rec.Started.Sub(s1.rec.Started); lapse < lock-time.Second {
		t.Errorf("slow message redelivered %s after the first delivery, want about the lock duration (%s)", lapse, lock)
	}

	// Duplicate detection.
	dups := h.Duplicates()
	if len(dups) != 1 || dups[0] != queue+"/dup-1" {
		t.Errorf("duplicates dropped %v, want [%s/dup-1]", dups, queue)
	}
	for _, body := range []string{"dup first", "dup second"} {
		for _, d := range delivered[body] {
			if d.md.MessageID != "dup-1" || d.md.DeliveryCount != 1 {
				t.Errorf("%s: MessageId %q DeliveryCount %d, want dup-1, 1", body, d.md.MessageID, d.md.DeliveryCount)
			}
		}
	}

	// Scheduled messages: never early, whether held at once or hidden first. Never early is
	// the behaviour that needs the hold: the Storage queue's visibility timeout has whole
	// seconds, and the host hides a message due later only until about a second before its
	// time, so without the hold both would come early. How late is the machine's speed (a
	// loaded one starts an invocation seconds late); the bound only says it was not stuck.
	for body, at := range map[string]time.Time{"scheduled soon": soon, "scheduled later": later} {
		d := delivered[body][0]
		if late := d.rec.Started.Sub(at); late < 0 || late > 10*time.Second {
			t.Errorf("%s: delivered %s after its ScheduledEnqueueTime, want at or after it (and not stuck: within 10s)", body, late)
		}
		if got, want := string(d.raw["EnqueuedTimeUtc"]), string(protocol.DateTimeMeta(at)); got != want {
			t.Errorf("%s: EnqueuedTimeUtc %s, want the scheduled time %s", body, got, want)
		}
	}
}

// TestHost_ServiceBusPausedLockLapses: an instance paused (SIGSTOP, a frozen VM) while it holds
// a message renews nothing, so the lock (1s) lapses although maxAutoLockRenewalDuration (1
// minute) would keep it, and the other instance gets the message with DeliveryCount 2 long
// before functionTimeout would have failed the frozen invocation.
func TestHost_ServiceBusPausedLockLapses(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	srv, _, q, queue := testQueue(t, ctx)
	second := make(chan InvokeRecord, 1)
	h := startFake(t, fakeServiceBusApp(t, "00:01:00"), 2, map[string]string{"FAKE_QUEUE": queue, "AzureWebJobsStorage": srv.ConnectionString()}, func(o *Options) {
		o.Delivery = DeliveryServiceBus
		o.LockDuration = time.Second
		o.OnInvoke = func(r InvokeRecord) {
			req, err := protocol.DecodeRequest(r.Request)
			if err != nil || r.Function != "SB" {
				return
			}
			if md, err := protocol.DecodeServiceBusMetadata(req.Metadata); err == nil && md.DeliveryCount == 2 {
				second <- r
			}
		}
	})
	if err := SendServiceBus(ctx, q, ServiceBusMessage{MessageID: "slow-1", Body: "slow while paused"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	var holder Invocation
	for holder.Instance == "" {
		for _, inv := range h.InFlight() {
			if inv.Function == "SB" {
				holder = inv
			}
		}
		select {
		case <-ctx.Done():
			t.Fatal("the message was never delivered")
		case <-time.After(20 * time.Millisecond):
		}
	}
	in := h.Instance(holder.Instance)
	if err := in.Pause(); err != nil {
		t.Fatal(err)
	}
	pausedAt := time.Now()
	defer func() { _ = in.Resume() }()
	select {
	case <-ctx.Done():
		t.Fatal("the message held by the paused instance was not delivered again")
	case r := <-second:
		if r.Instance == holder.Instance {
			t.Errorf("delivered again to the paused instance %s", r.Instance)
		}
		if r.Err != nil {
			t.Errorf("second delivery failed: %v", r.Err)
		}
		// Not the functionTimeout (10s) failing the frozen invocation: the lapsed lock.
		if after := r.Started.Sub(pausedAt); after > 5*time.Second {
			t.Errorf("delivered again %s after the pause, want about the lock duration (1s), well before functionTimeout (10s)", after)
		}
		t.Logf("delivered again on %s %s after the pause", r.Instance, r.Started.Sub(pausedAt).Round(time.Millisecond))
	}
}

// TestParseDelivery: the modes, case-insensitively; "" is the Storage queue's.
func TestParseDelivery(t *testing.T) {
	for in, want := range map[string]Delivery{"": DeliveryQueue, "queue": DeliveryQueue, " ServiceBus ": DeliveryServiceBus} {
		if got, err := ParseDelivery(in); err != nil || got != want {
			t.Errorf("ParseDelivery(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseDelivery("amqp"); err == nil {
		t.Error("ParseDelivery(amqp) accepted")
	}
}
