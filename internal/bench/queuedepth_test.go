package bench

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
)

// queueDepthCycles is the number of dequeue-and-delete cycles measured at each depth.
const queueDepthCycles = 20

// BenchmarkAzuriteQueueDepth explains the end-to-end figures: it measures the Storage-queue
// calls a worker host makes (one EnqueueMessage, one DequeueMessages of 16 as the queue trigger
// asks, DeleteMessage for each) on Azurite in memory with 100 and with 10,000 messages
// waiting. Azurite's queue scans its whole message collection on each dequeue and delete (it
// clears expired messages, then filters and sorts the visible ones), so their cost grows with
// the depth; a Baton leader enqueues a whole run up front, so its workers meet a deep queue.
// One iteration fills a fresh Azurite to each depth in turn.
//
// Metrics per depth D: at-D-enqueue-p50-ns, at-D-dequeue16-p50-ns, at-D-delete-p50-ns.
func BenchmarkAzuriteQueueDepth(b *testing.B) {
	for b.Loop() {
		srv := privateAzurite(b)
		q := queueClient(b, srv, nil, true).NewQueueClient("depth")
		ctx := ctxFor(b, 10*time.Minute)
		if _, err := q.Create(ctx, nil); err != nil {
			b.Fatal(err)
		}
		depth := 0
		for _, want := range sizes(100, 10000) {
			// Fill to the depth, 16 at a time.
			var next atomic.Int64
			next.Store(int64(depth))
			var wg sync.WaitGroup
			for range 16 {
				wg.Go(func() {
					for i := next.Add(1); i <= int64(want); i = next.Add(1) {
						if _, err := q.EnqueueMessage(ctx, fmt.Sprintf(`{"i":%d}`, i), nil); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			depth = want
			var enq, deq, del Samples
			for range queueDepthCycles {
				t0 := time.Now()
				if _, err := q.EnqueueMessage(ctx, `{"i":-1}`, nil); err != nil {
					b.Fatal(err)
				}
				enq.Add(time.Since(t0))
				t0 = time.Now()
				resp, err := q.DequeueMessages(ctx, &azqueue.DequeueMessagesOptions{NumberOfMessages: to.Ptr(int32(16)),
					VisibilityTimeout: to.Ptr(int32(600))})
				if err != nil {
					b.Fatal(err)
				}
				deq.Add(time.Since(t0))
				for _, m := range resp.Messages {
					t0 = time.Now()
					if _, err := q.DeleteMessage(ctx, *m.MessageID, *m.PopReceipt, nil); err != nil {
						b.Fatal(err)
					}
					del.Add(time.Since(t0))
				}
				// Keep the depth: put back what was taken (the enqueue above added one).
				for range len(resp.Messages) - 1 {
					if _, err := q.EnqueueMessage(ctx, `{"i":-2}`, nil); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(enq.Percentile(50)), fmt.Sprintf("at-%d-enqueue-p50-ns", want))
			b.ReportMetric(float64(deq.Percentile(50)), fmt.Sprintf("at-%d-dequeue16-p50-ns", want))
			b.ReportMetric(float64(del.Percentile(50)), fmt.Sprintf("at-%d-delete-p50-ns", want))
		}
		srv.Stop()
	}
}
