package app

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/internal/engine/transport/servicebus"
)

// busyNamespace is an azservicebus sender on a namespace that throttles: every call fails the
// way azservicebus returns server-busy once its own retries are spent, as a raw *amqp.Error.
type busyNamespace struct{ calls atomic.Int32 }

func (b *busyNamespace) NewMessageBatch(context.Context, *azservicebus.MessageBatchOptions) (*azservicebus.MessageBatch, error) {
	b.calls.Add(1)
	return nil, &amqp.Error{Condition: "com.microsoft:server-busy",
		Description: "The request was terminated because the namespace is being throttled. Please wait 2 seconds and try again."}
}

func (b *busyNamespace) SendMessageBatch(context.Context, *azservicebus.MessageBatch, *azservicebus.SendMessageBatchOptions) error {
	return nil
}

func (b *busyNamespace) Close(context.Context) error { return nil }

// A check whose send meets a throttling namespace keeps its message: the invocation waits the
// outage out and succeeds once the namespace accepts again, instead of failing at once and
// spending one of the check's deliveries (five throttled deliveries in a row would
// dead-letter it).
func TestWaitOutOutage_ServiceBusThrottlingKeepsTheMessage(t *testing.T) {
	busy := &busyNamespace{}
	sender := servicebus.NewServiceBusSender(busy, servicebus.ServiceBusSenderOptions{Queue: "baton-control"})
	msgs := []transport.Message{{ID: "run-1/check/e1/r2", Body: []byte(`{}`)}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tries := 0
	err := waitOutOutage(ctx, slog.New(slog.DiscardHandler), func(ctx context.Context, _ int) error {
		tries++
		if tries == 1 {
			return sender.Send(ctx, msgs) // the namespace is busy
		}
		return nil // the namespace has credits again
	})
	if err != nil || tries != 2 {
		t.Fatalf("throttled check: err %v after %d tries, want success on the 2nd (the message kept)", err, tries)
	}
	if busy.calls.Load() != 1 {
		t.Errorf("the busy namespace saw %d calls, want 1 (the test proves nothing otherwise)", busy.calls.Load())
	}
}
