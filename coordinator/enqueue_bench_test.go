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
	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/election/bloblease"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/blobstore"
	"github.com/batonfn/baton/internal/engine/transport/storagequeue"
	"github.com/batonfn/baton/internal/tools/azurite"
	"github.com/batonfn/baton/work"
)

// countPolicy counts the requests a client sends.
type countPolicy struct{ n atomic.Int64 }

func (p *countPolicy) Do(req *policy.Request) (*http.Response, error) {
	p.n.Add(1)
	return req.Next()
}

// BenchmarkPlan_Enqueue10000 measures one run's planning and enqueue of 10,000 partitions to
// the Azurite Storage queue: the run is created (an ad-hoc run, StartManual) and its start
// check delivered, which takes the run's own lease and plans and sends every partition. It
// reports the blob calls per partition of both (run record, lease, plan batches, checkpoints)
// — the queue sends are counted separately: the Storage queue has no batch API, so they are
// one per partition by construction (plus the start check and the chain's next check).
func BenchmarkPlan_Enqueue10000(b *testing.B) {
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
		opts := bloblease.BlobLockOptions{Duration: 30 * time.Second, Logger: slog.New(slog.DiscardHandler)}
		lock, err := bloblease.NewBlobLock(leases, "leader", opts)
		if err != nil {
			b.Fatal(err)
		}
		id := ledger.Holder{App: "bench", Instance: "i", PID: 1}
		ld, err := election.NewLeader(election.LeaderConfig{Lock: lock, Identity: id, LeaseDuration: 30 * time.Second,
			Locks:  func(name string) (election.Lock, error) { return bloblease.NewBlobLock(leases, name, opts) },
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		c, err := New(Config{Leader: ld, Store: blobstore.New(runs, blobstore.Options{}),
			Sender: storagequeue.NewQueueSender(q, storagequeue.QueueSenderOptions{Parallelism: 32}), Jobs: jobs, Identity: id,
			BatchSize: 500, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		blobCalls.n.Store(0)
		queueCalls.n.Store(0)
		start := time.Now()
		out, err := c.StartManual(ctx, ManualRequest{Job: "count", Params: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)), IdempotencyKey: fmt.Sprint(i)})
		if err != nil || out.Status != StatusStarted {
			b.Fatalf("start: %+v, %v", out, err)
		}
		check := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindCheck, Run: out.Run, Round: 1}
		if err := c.Check(ctx, check, work.Delivery{Count: 1}); err != nil {
			b.Fatalf("start check: %v", err)
		}
		elapsed += time.Since(start)
		totalBlob += blobCalls.n.Load()
		totalQueue += queueCalls.n.Load()
		if m, err := c.cfg.Store.ReadManifest(ctx, out.Run); err != nil || !m.PlanDone || m.Partitions != n {
			b.Fatalf("run after its start check: %+v, %v", m, err)
		}
		_, _ = leases.Delete(ctx, nil)
		_, _ = runs.Delete(ctx, nil)
		_, _ = q.Delete(ctx, nil)
	}
	runs := float64(b.N)
	b.ReportMetric(float64(n)*runs/elapsed.Seconds(), "partitions/s")
	b.ReportMetric(float64(totalBlob)/(runs*n), "leader-blob-calls/partition")
	b.ReportMetric(float64(totalQueue)/(runs*n), "queue-calls/partition")
}
