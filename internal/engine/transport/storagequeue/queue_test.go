package storagequeue

import (
	"context"
	"encoding/base64"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue/queueerror"
	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/internal/engine/transport/transporttest"
	"github.com/batonfn/baton/internal/tools/azurite"
)

// newAzuriteQueue returns a client for a queue unique to this test (not created) on the
// shared Azurite, deleted in t.Cleanup.
func newAzuriteQueue(tb testing.TB) *azqueue.QueueClient {
	tb.Helper()
	svc, err := azclient.Queue(azurite.Shared(tb).Storage(), nil)
	if err != nil {
		tb.Fatalf("queue client: %v", err)
	}
	q := svc.NewQueueClient(azurite.UniqueName(tb, "q"))
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = q.Delete(ctx, nil)
	})
	return q
}

// dequeueAll dequeues every visible message (hiding it for 10 minutes) and decodes its text
// as base64, the way the Functions queue trigger does by default. A missing queue is empty.
func dequeueAll(t *testing.T, q *azqueue.QueueClient) func(context.Context) []transporttest.Received {
	return func(ctx context.Context) []transporttest.Received {
		t.Helper()
		var out []transporttest.Received
		for {
			r, err := q.DequeueMessages(ctx, &azqueue.DequeueMessagesOptions{
				NumberOfMessages:  to32(32),
				VisibilityTimeout: to32(600),
			})
			if queueerror.HasCode(err, queueerror.QueueNotFound) {
				return out
			}
			if err != nil {
				t.Fatalf("dequeue: %v", err)
			}
			if len(r.Messages) == 0 {
				return out
			}
			for _, m := range r.Messages {
				body, err := base64.StdEncoding.DecodeString(*m.MessageText)
				if err != nil {
					t.Fatalf("message %s: text is not base64, the queue trigger would poison it: %v", *m.MessageID, err)
				}
				out = append(out, transporttest.Received{Body: body})
			}
		}
	}
}

func to32(v int32) *int32 { return &v }

func TestQueueSender_Contract(t *testing.T) {
	transporttest.RunSenderContract(t, transporttest.Contract{MaxBody: MaxQueueBody, TooLarge: MaxQueueBody + 1},
		func(t *testing.T) (transport.Sender, func(context.Context) []transporttest.Received) {
			q := newAzuriteQueue(t)
			return NewQueueSender(q, QueueSenderOptions{}), dequeueAll(t, q)
		})
}

func TestQueueSender_CreatesMissingQueue(t *testing.T) {
	q := newAzuriteQueue(t)
	if _, err := q.GetProperties(t.Context(), nil); !queueerror.HasCode(err, queueerror.QueueNotFound) {
		t.Fatalf("before Send: got %v want QueueNotFound", err)
	}
	s := NewQueueSender(q, QueueSenderOptions{})
	if err := s.Send(t.Context(), []transport.Message{{ID: "r/0", Body: []byte(`{}`)}}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if _, err := q.GetProperties(t.Context(), nil); err != nil {
		t.Fatalf("after Send: GetProperties: %v", err)
	}
}

func TestQueueSender_RecreatesDeletedQueue(t *testing.T) {
	q := newAzuriteQueue(t)
	s := NewQueueSender(q, QueueSenderOptions{})
	msg := []transport.Message{{ID: "r/0", Body: []byte(`{}`)}}
	if err := s.Send(t.Context(), msg); err != nil {
		t.Fatalf("first Send: %v", err)
	}
	if _, err := q.Delete(t.Context(), nil); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	err := s.Send(t.Context(), msg)
	if !transport.IsTransient(err) || !queueerror.HasCode(err, queueerror.QueueNotFound) {
		t.Fatalf("Send to the deleted queue: got %v want a transient QueueNotFound", err)
	}
	if err := s.Send(t.Context(), msg); err != nil {
		t.Fatalf("re-send: got %v want nil (queue created again)", err)
	}
}

func TestQueueSender_NoCreate_MissingQueueIsPermanent(t *testing.T) {
	q := newAzuriteQueue(t)
	s := NewQueueSender(q, QueueSenderOptions{NoCreate: true})
	err := s.Send(t.Context(), []transport.Message{{ID: "r/0", Body: []byte(`{}`)}})
	if !queueerror.HasCode(err, queueerror.QueueNotFound) {
		t.Fatalf("got %v want QueueNotFound", err)
	}
	if transport.IsTransient(err) {
		t.Errorf("IsTransient: got true want false (NoCreate: nothing will create it)")
	}
}

// The visibility timeout and TTL reach the service as computed: TimeNextVisible and
// ExpirationTime relative to InsertionTime.
func TestQueueSender_VisibilityAndTTLOnTheWire(t *testing.T) {
	q := newAzuriteQueue(t)
	now := time.Now()
	s := NewQueueSender(q, QueueSenderOptions{Now: func() time.Time { return now }})
	m := transport.Message{ID: "r/check", Body: []byte(`{"kind":"check"}`), NotBefore: now.Add(1500 * time.Millisecond), TTL: time.Hour}
	if err := s.Send(t.Context(), []transport.Message{m}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	// Peek does not see invisible messages, so wait for it and then read the times.
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := q.PeekMessages(t.Context(), &azqueue.PeekMessagesOptions{NumberOfMessages: to32(1)})
		if err != nil {
			t.Fatalf("peek: %v", err)
		}
		if len(r.Messages) == 1 {
			pm := r.Messages[0]
			if got, want := pm.ExpirationTime.Sub(*pm.InsertionTime), 2*time.Second+time.Hour; got != want {
				t.Errorf("expiration − insertion: got %v want %v (visibility 2 s + TTL 1 h)", got, want)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("message never became visible")
		}
		select {
		case <-t.Context().Done():
			t.Fatal("test context done")
		case <-time.After(50 * time.Millisecond):
		}
	}
}
