package servicebus

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/internal/engine/transport/transporttest"
)

// skipNoBroker is the message every broker-backed Service Bus test skips with.
const skipNoBroker = "SERVICEBUS_CONNECTION_STRING not set: the Service Bus contract tests need a broker (e.g. the Service Bus emulator in Docker); see docs/deploy.md"

// brokerEnv returns the broker's connection string and the queue to use
// (SERVICEBUS_QUEUE, default "baton-work"), and skips the test when there is no broker.
func brokerEnv(t *testing.T) (connectionString, queue string) {
	t.Helper()
	connectionString = os.Getenv("SERVICEBUS_CONNECTION_STRING")
	if connectionString == "" {
		t.Skip(skipNoBroker)
	}
	queue = os.Getenv("SERVICEBUS_QUEUE")
	if queue == "" {
		queue = "baton-work"
	}
	return connectionString, queue
}

// TestServiceBusSender_Contract runs the transporttest.Contract against a real Service Bus queue (the
// emulator or Azure) named by SERVICEBUS_QUEUE (default "baton-work"). The queue is shared:
// each case filters by its own token, and receives in ReceiveAndDelete mode, so leftover
// messages from other runs are consumed and ignored.
func TestServiceBusSender_Contract(t *testing.T) {
	cs, queue := brokerEnv(t)
	client, err := azservicebus.NewClientFromConnectionString(cs, nil)
	if err != nil {
		t.Fatalf("service bus client: %v", err)
	}
	t.Cleanup(func() { _ = client.Close(context.Background()) })

	transporttest.RunSenderContract(t, transporttest.Contract{
		MaxBody:   200 * 1024,    // fits the 256 KiB Standard/emulator message limit with headers
		TooLarge:  1024*1024 + 1, // over the largest batch limit (1 MiB, Premium)
		KeepsMeta: true,
		Quiet:     2 * time.Second, // the broker has no "visible now" read; wait a little
	}, func(t *testing.T) (transport.Sender, func(context.Context) []transporttest.Received) {
		raw, err := client.NewSender(queue, nil)
		if err != nil {
			t.Fatalf("sender: %v", err)
		}
		s := NewServiceBusSender(raw, ServiceBusSenderOptions{Queue: queue})
		t.Cleanup(func() { _ = s.Close(context.Background()) })
		rcv, err := client.NewReceiverForQueue(queue, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		if err != nil {
			t.Fatalf("receiver: %v", err)
		}
		t.Cleanup(func() { _ = rcv.Close(context.Background()) })
		return s, func(ctx context.Context) []transporttest.Received {
			t.Helper()
			ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			msgs, err := rcv.ReceiveMessages(ctx, 500, nil)
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("receive: %v", err)
			}
			out := make([]transporttest.Received, 0, len(msgs))
			for _, m := range msgs {
				r := transporttest.Received{ID: m.MessageID, Body: m.Body}
				if len(m.ApplicationProperties) > 0 {
					r.Properties = make(map[string]string, len(m.ApplicationProperties))
					for k, v := range m.ApplicationProperties {
						r.Properties[k] = fmt.Sprint(v)
					}
				}
				if m.ContentType == nil || *m.ContentType != ContentTypeJSON {
					t.Errorf("message %s: ContentType got %v want %q", m.MessageID, m.ContentType, ContentTypeJSON)
				}
				out = append(out, r)
			}
			return out
		}
	})
}
