package servicebus

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/google/go-cmp/cmp"
)

// fakeDLQ is a dead-letter subqueue: PeekMessages honours FromSequenceNumber and the count;
// ReceiveMessages deletes from the front and, when there is nothing, waits for ctx as the SDK
// does. receiveErr fails the receive numbered failReceive (1-based).
type fakeDLQ struct {
	mu          sync.Mutex
	msgs        []*azservicebus.ReceivedMessage
	peeks       []int // the count asked by each peek
	receives    int
	failReceive int
	receiveErr  error
	closed      bool
}

func newFakeDLQ(n int) *fakeDLQ {
	f := &fakeDLQ{}
	for i := range n {
		seq := int64(100 + 3*i) // sequence numbers keep their gaps in the subqueue
		f.msgs = append(f.msgs, &azservicebus.ReceivedMessage{MessageID: fmt.Sprintf("r1/%d/e1", i), SequenceNumber: &seq,
			Body: []byte(fmt.Sprintf(`{"part":%d}`, i))})
	}
	return f
}

func (f *fakeDLQ) PeekMessages(ctx context.Context, n int, o *azservicebus.PeekMessagesOptions) ([]*azservicebus.ReceivedMessage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.peeks = append(f.peeks, n)
	var out []*azservicebus.ReceivedMessage
	for _, m := range f.msgs {
		if len(out) < n && *m.SequenceNumber >= *o.FromSequenceNumber {
			out = append(out, m)
		}
	}
	return out, nil
}

func (f *fakeDLQ) ReceiveMessages(ctx context.Context, n int, _ *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error) {
	f.mu.Lock()
	f.receives++
	if f.receives == f.failReceive {
		f.mu.Unlock()
		return nil, f.receiveErr
	}
	k := min(n, len(f.msgs))
	out := f.msgs[:k]
	f.msgs = f.msgs[k:]
	f.mu.Unlock()
	if k == 0 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return out, nil
}

func (f *fakeDLQ) Close(context.Context) error { f.closed = true; return nil }

func TestDeadLetterQueue_Count(t *testing.T) {
	tests := []struct {
		name      string
		n, max    int
		want      transport.DeadLetterCount
		wantPeeks []int
	}{
		{"empty", 0, 0, transport.DeadLetterCount{Queue: "work"}, []int{101}},
		{"a few", 7, 0, transport.DeadLetterCount{Queue: "work", Count: 7}, []int{101, 94}},
		{"a few under the default limit", 60, 0, transport.DeadLetterCount{Queue: "work", Count: 60}, []int{101, 41}},
		{"exactly the limit", 5, 5, transport.DeadLetterCount{Queue: "work", Count: 5}, []int{6, 1}},
		{"over the limit", 9, 5, transport.DeadLetterCount{Queue: "work", Count: 5, AtLeast: true}, []int{6}},
		{"over the default limit", 1200, 0, transport.DeadLetterCount{Queue: "work", Count: 100, AtLeast: true}, []int{101}},
		{"several pages under a high limit", 1200, 2000, transport.DeadLetterCount{Queue: "work", Count: 1200}, []int{250, 250, 250, 250, 250, 250}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeDLQ(tc.n)
			d := NewDeadLetterQueueFrom(f, "work", DeadLetterQueueOptions{MaxCount: tc.max})
			got, err := d.Count(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("count: got %+v want %+v", got, tc.want)
			}
			if d := cmp.Diff(tc.wantPeeks, f.peeks); d != "" {
				t.Errorf("peeks asked (-want +got):\n%s", d)
			}
			if len(f.msgs) != tc.n {
				t.Errorf("messages left: got %d want %d (counting removes nothing)", len(f.msgs), tc.n)
			}
		})
	}
}

// A peeked dead letter keeps what the broker recorded: the reason and description, the
// delivery count it reached, the time it was enqueued.
func TestDeadLetterQueue_PeekMapsTheBrokersRecord(t *testing.T) {
	f := newFakeDLQ(5)
	enq := time.Date(2026, 11, 21, 10, 5, 3, 0, time.FixedZone("CET", 3600))
	f.msgs[0].DeadLetterReason = ptr("MaxDeliveryCountExceeded")
	f.msgs[0].DeadLetterErrorDescription = ptr("Message could not be consumed after 5 delivery attempts.")
	f.msgs[0].DeliveryCount = 5
	f.msgs[0].EnqueuedTime = &enq
	d := NewDeadLetterQueueFrom(f, "work", DeadLetterQueueOptions{})
	got, err := d.Peek(t.Context(), 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []transport.DeadLetter{
		{ID: "r1/0/e1", Body: []byte(`{"part":0}`), Reason: "MaxDeliveryCountExceeded",
			Description: "Message could not be consumed after 5 delivery attempts.", DeliveryCount: 5, Enqueued: enq.UTC()},
		{ID: "r1/1/e1", Body: []byte(`{"part":1}`)},
		{ID: "r1/2/e1", Body: []byte(`{"part":2}`)},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("peeked (-want +got):\n%s", d)
	}
	if got[0].Enqueued.Location() != time.UTC {
		t.Errorf("Enqueued location: got %v want UTC", got[0].Enqueued.Location())
	}
}

func TestDeadLetterQueue_PurgeDeletesEverything(t *testing.T) {
	f := newFakeDLQ(600)
	d := NewDeadLetterQueueFrom(f, "work", DeadLetterQueueOptions{PurgeWait: 10 * time.Millisecond})
	n, err := d.Purge(t.Context())
	if err != nil || n != 600 {
		t.Fatalf("Purge: got %d, %v want 600", n, err)
	}
	if len(f.msgs) != 0 || f.receives != 4 {
		t.Errorf("after Purge: %d left after %d receives, want 0 after 4 (3 pages and an empty wait)", len(f.msgs), f.receives)
	}
	if err := d.Close(t.Context()); err != nil || !f.closed {
		t.Errorf("Close: %v, closed %v", err, f.closed)
	}
}

// A purge the namespace throttles stops with what it deleted so far and a throttled error.
func TestDeadLetterQueue_PurgeThrottled(t *testing.T) {
	f := newFakeDLQ(600)
	f.failReceive, f.receiveErr = 2, cond("com.microsoft:server-busy", "throttled")
	d := NewDeadLetterQueueFrom(f, "work", DeadLetterQueueOptions{PurgeWait: 10 * time.Millisecond})
	n, err := d.Purge(t.Context())
	if n != 250 || !transport.IsThrottled(err) {
		t.Fatalf("Purge: got %d, %v want 250 and a throttled error", n, err)
	}
}

// Against a real broker: a message dead-lettered with a reason is counted, peeked with that
// reason, and purged.
func TestDeadLetterQueue_Broker(t *testing.T) {
	cs, queue := brokerEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	client, err := azservicebus.NewClientFromConnectionString(cs, nil)
	if err != nil {
		t.Fatalf("service bus client: %v", err)
	}
	t.Cleanup(func() { _ = client.Close(context.Background()) })
	d, err := NewDeadLetterQueue(client, queue, DeadLetterQueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close(context.Background()) })
	if _, err := d.Purge(ctx); err != nil {
		t.Fatalf("purge before the test: %v", err)
	}
	raw, err := client.NewSender(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close(context.Background()) })
	id := fmt.Sprintf("dlq-test/%d", time.Now().UnixNano())
	if err := raw.SendMessage(ctx, &azservicebus.Message{MessageID: &id, Body: []byte(`{}`)}, nil); err != nil {
		t.Fatalf("send: %v", err)
	}
	rcv, err := client.NewReceiverForQueue(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rcv.Close(context.Background()) })
	var mine *azservicebus.ReceivedMessage
	for mine == nil && ctx.Err() == nil {
		msgs, err := rcv.ReceiveMessages(ctx, 50, nil)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		for _, m := range msgs {
			if m.MessageID == id {
				mine = m
				continue
			}
			_ = rcv.AbandonMessage(ctx, m, nil)
		}
	}
	if err := rcv.DeadLetterMessage(ctx, mine, &azservicebus.DeadLetterOptions{Reason: ptr("BatonTest"), ErrorDescription: ptr("dead-lettered by the test")}); err != nil {
		t.Fatalf("dead-letter: %v", err)
	}
	c, err := d.Count(ctx)
	if err != nil || c.Count < 1 {
		t.Fatalf("Count: got %+v, %v want at least 1", c, err)
	}
	peeked, err := d.Peek(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range peeked {
		if p.ID == id {
			found = p.Reason == "BatonTest" && p.Description == "dead-lettered by the test"
		}
	}
	if !found {
		t.Errorf("Peek: %+v does not hold %s with the reason BatonTest", peeked, id)
	}
	if n, err := d.Purge(ctx); err != nil || n < 1 {
		t.Errorf("Purge: got %d, %v want at least 1", n, err)
	}
	if c, err := d.Count(ctx); err != nil || c.Count != 0 {
		t.Errorf("Count after Purge: got %+v, %v want 0", c, err)
	}
}
