package storagequeue

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/internal/tools/azurite"
)

// BenchmarkQueueSender_Send1000 measures one Send of 1,000 small envelopes to a Storage queue
// on Azurite (in memory) with the default options and client: msgs/s is the figure.
func BenchmarkQueueSender_Send1000(b *testing.B) {
	benchSend1000(b, newAzuriteQueue(b), QueueSenderOptions{})
}

// BenchmarkQueueSender_Send1000_Parallelism varies Parallelism, with a client that keeps
// enough idle connections (azcore's default keeps 10 per host). On a 2-core box Azurite (one
// Node process) is CPU-bound and 1, 16 and 64 measured about the same; parallelism is for
// services where each call waits on network latency instead.
func BenchmarkQueueSender_Send1000_Parallelism(b *testing.B) {
	for _, par := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("par=%d", par), func(b *testing.B) {
			tr := http.DefaultTransport.(*http.Transport).Clone()
			tr.MaxIdleConnsPerHost = par
			svc, err := azclient.Queue(azurite.Shared(b).Storage(), &azqueue.ClientOptions{
				ClientOptions: azcore.ClientOptions{Transport: &http.Client{Transport: tr}},
			})
			if err != nil {
				b.Fatal(err)
			}
			q := svc.NewQueueClient(azurite.UniqueName(b, "q"))
			b.Cleanup(func() { _, _ = q.Delete(b.Context(), nil) })
			benchSend1000(b, q, QueueSenderOptions{Parallelism: par})
		})
	}
}

func benchSend1000(b *testing.B, q *azqueue.QueueClient, opts QueueSenderOptions) {
	b.Helper()
	s := NewQueueSender(q, opts)
	msgs := make([]transport.Message, 1000)
	for i := range msgs {
		msgs[i] = transport.Message{
			ID:         fmt.Sprintf("bench/%d", i),
			Body:       fmt.Appendf(nil, `{"v":1,"kind":"partition","run":"bench","epoch":1,"index":%d,"count":1000}`, i),
			Properties: map[string]string{"run": "bench", "kind": "partition"},
		}
	}
	if err := s.Send(b.Context(), msgs[:1]); err != nil { // create the queue outside the timer
		b.Fatalf("warm-up Send: %v", err)
	}
	for b.Loop() {
		// Start each Send on an empty queue so Azurite's memory stays bounded (queue length
		// up to 12,000 did not change the send time in a probe).
		b.StopTimer()
		if _, err := q.ClearMessages(b.Context(), nil); err != nil {
			b.Fatalf("clear: %v", err)
		}
		b.StartTimer()
		if err := s.Send(b.Context(), msgs); err != nil {
			b.Fatalf("Send: %v", err)
		}
	}
	b.ReportMetric(float64(len(msgs)*b.N)/b.Elapsed().Seconds(), "msgs/s")
}
