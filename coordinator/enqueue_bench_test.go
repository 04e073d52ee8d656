package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/batonfn/baton/election"
	"github.com/batonfn/baton/election/bloblease"
	"github.com/batonfn/baton/internal/azclient"
	"github.com/batonfn/baton/internal/azurite"
	"github.com/batonfn/baton/ledger"
	"github.com/batonfn/baton/ledger/blobstore"
	"github.com/batonfn/baton/transport/storagequeue"
	"github.com/batonfn/baton/work"
)

// countPolicy counts the requests a client sends.
type countPolicy struct{ n atomic.Int64 }

func (p *countPolicy) Do(req *policy.Request) (*http.Response, error) {
	p.n.Add(1)
	return req.Next()
}

// BenchmarkTick_Enqueue10000 measures a leader planning and enqueueing 10,000 partitions to the
// Azurite Storage queue, and the leader's blob calls per partition (lease, manifest, plan
// batches, checkpoints) — the queue sends are counted separately: the Storage queue has no
// batch API, so they are one per partition by construction.
func BenchmarkTick_Enqueue10000(b *testing.B) {
	const n = 10000
	srv := azurite.Shared(b)
	blobCalls, queueCalls := &countPolicy{}, &countPolicy{}
	blobs, err := azclient.Blob(srv.Storage(), &azblob.ClientOptions{ClientOptions: policy.ClientOptions{PerCallPolicies: []policy.Policy{blobCalls}}})
	if err != nil {
		b.Fatal(err)
	}
	qs, err := azclient.Queue(srv.Storage(), &azqueue.ClientOptions{ClientOptions: policy.ClientOptions{PerCallPolicies: []policy.Policy{queueCalls}}})
	if err != nil {
		b.Fatal(err)
	}
	var totalBlob, totalQueue int64
	var elapsed time.Duration
	for i := 0; b.Loop(); i++ {
		leases := blobs.ServiceClient().NewContainerClient(azurite.UniqueName(b, "blease"))
		runs := blobs.ServiceClient().NewContainerClient(azurite.UniqueName(b, "bruns"))
		q := qs.NewQueueClient(azurite.UniqueName(b, "bwork"))
		jobs := work.NewRegistry()
		jobs.Register("count", &countJob{})
		lock, err := bloblease.NewBlobLock(leases, "leader", bloblease.BlobLockOptions{Duration: 30 * time.Second, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		id := ledger.Holder{App: "bench", Instance: "i", PID: 1}
		ld, err := election.NewLeader(election.LeaderConfig{Lock: lock, Identity: id, LeaseDuration: 30 * time.Second, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		c, err := New(Config{Leader: ld, Store: blobstore.New(runs, blobstore.Options{}),
			Sender: storagequeue.NewQueueSender(q, storagequeue.QueueSenderOptions{Parallelism: 32}), Jobs: jobs, Identity: id,
			Job: "count", Params: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)), Schedule: mustScheduleB(b, "0 */5 * * * *"),
			BatchSize: 500, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		blobCalls.n.Store(0)
		queueCalls.n.Store(0)
		start := time.Now()
		out, err := c.Tick(context.Background(), TickInput{Now: time.Date(2026, 11, 21, 10, 5, 0, 0, time.UTC).Add(time.Duration(i) * 5 * time.Minute)})
		if err != nil || out.Status != StatusStarted {
			b.Fatalf("tick: %+v, %v", out, err)
		}
		elapsed += time.Since(start)
		totalBlob += blobCalls.n.Load()
		totalQueue += queueCalls.n.Load()
		ctx := context.Background()
		_, _ = leases.Delete(ctx, nil)
		_, _ = runs.Delete(ctx, nil)
		_, _ = q.Delete(ctx, nil)
	}
	runs := float64(b.N)
	b.ReportMetric(float64(n)*runs/elapsed.Seconds(), "partitions/s")
	b.ReportMetric(float64(totalBlob)/(runs*n), "leader-blob-calls/partition")
	b.ReportMetric(float64(totalQueue)/(runs*n), "queue-calls/partition")
}

func mustScheduleB(b *testing.B, expr string) Schedule {
	s, err := ParseSchedule(expr, nil)
	if err != nil {
		b.Fatal(err)
	}
	return s
}
