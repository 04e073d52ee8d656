package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/blobstore"
	"github.com/batonfn/baton/internal/tools/azurite"
	"github.com/batonfn/baton/work"
)

// Sizes of BenchmarkThroughput: each end-to-end run, the backlog bound of its wave runs,
// and how many partitions' worth of calls the raw measurement replays at each depth.
const (
	throughputPartitions = 3000
	throughputBacklog    = 1000
	// throughputLive is the backlog these runs actually hold: here the leader's enqueue is
	// slower than the workers, who keep the queue down to about one plan batch.
	throughputLive = 250
	// rawConcurrency is at least what the largest cluster keeps in flight (the leader's sends
	// and 4 instances' 16 deliveries), so the replay saturates Azurite as a run would.
	rawConcurrency = 96
	// rawBundle is the partitions per message the replay sends: the default cap, the size a
	// default plan batch (2,048) goes out in.
	rawBundle = work.DefaultMaxBundle
)

// rawUnits is how many partitions' worth of calls the raw measurement replays: 1,200 bundles
// (about 8,400 calls, enough for a steady CPU per call; 40 under -short).
func rawUnits() int { return sized(1200*rawBundle, 40*rawBundle) }

// rawCallsPerPartition is the critical path of one partition as the raw measurement replays
// it (the call mix an end-to-end run shows at the proxy, BenchmarkScale's table), a bundle of
// rawBundle partitions at a time: the leader's enqueue of the bundle; the host's dequeue (one
// per 16 messages) and delete; the worker's manifest read (one per bundle while planning
// runs), one block of its results, the fold's partial read and conditional write (one fold
// block), and one done append.
const rawCallsPerPartition = (1 + 1.0/16 + 1 + 1 + 1 + 2 + 1) / rawBundle

// rawRate is Azurite's measured rate for that call mix at one queue depth.
type rawRate struct {
	depth        int
	callsPerSec  float64 // every call, conflicts retried included, over the wall time
	callsPerUnit float64 // measured (≥ rawCallsPerPartition when partial writes conflict)
	// cpuPerCall is Azurite's CPU time per call. Azurite runs its JavaScript on one thread, so
	// 1 s ÷ cpuPerCall is the most calls per second it can serve: the raw rate at saturation,
	// whatever else the machine is doing.
	cpuPerCall time.Duration
}

// rawCallsPerSec is the raw rate at saturation: one core of Azurite ÷ its CPU per call (the wall
// rate when the CPU was not read).
func (r rawRate) rawCallsPerSec() float64 {
	if r.cpuPerCall <= 0 {
		return r.callsPerSec
	}
	return float64(time.Second) / float64(r.cpuPerCall)
}

// limit is the partitions per second Azurite could serve: raw rate ÷ calls per partition on
// the critical path.
func (r rawRate) limit() float64 { return r.rawCallsPerSec() / rawCallsPerPartition }

// BenchmarkThroughput sets end-to-end throughput against what the storage allows, in one run:
//
//  1. raw/depth=D: on a fresh Azurite persisted on disk (as the end-to-end runs use), directly
//     (calls counted by an azcore policy), rawConcurrency goroutines replay rawUnits() partitions' worth of
//     the calls the partitions make on the critical path, in bundles of rawBundle
//     (rawCallsPerPartition: per bundle an enqueue, a 16th of a dequeue, a delete, a manifest
//     read, a block of its results, a partial read and ETag write and a done append of all its
//     partitions) with D partitions' worth of bundles kept in the queue: 250, the backlog these runs actually hold
//     (the workers keep up with the leader's enqueue, about one plan batch behind); the wave
//     runs' backlog bound (1,000); and the up-front runs' whole run (3,000). Azurite runs on one thread, so its raw rate is one
//     core ÷ its CPU time per call (read from /proc): what it serves at saturation, however
//     loaded the machine or slow the one client process. limit = raw calls/s ÷ calls per
//     partition on the critical path.
//  2. waves/instances=K, waves250/instances=K and upfront/instances=K: a synthetic no-op run
//     of 3,000 partitions on K = 1, 2, 4 handler instances with BATON_MAX_BACKLOG=1000 (waves),
//     250 (waves of one plan batch, a bound these runs reach) and 0 (everything up front), as
//     BenchmarkScale runs them.
//
// Metrics of the raw steps: azurite-cpu-ms/call, raw-calls/s (at saturation), wall-calls/s (as
// replayed on this machine), calls/partition (as replayed), limit-partitions/s.
// Of the runs: partitions/s, %-of-limit (against the limit at depth 250, what the runs hold),
// %-of-limit-at-bound (against the limit at the backlog bound: 1,000 or 3,000),
// calls/partition (everything the cluster did, at the proxy), and BenchmarkScale's others.
func BenchmarkThroughput(b *testing.B) {
	raws := map[int]rawRate{}
	for _, depth := range sizes(throughputLive, throughputBacklog, throughputPartitions) {
		b.Run(fmt.Sprintf("raw/depth=%d", depth), func(b *testing.B) {
			for b.Loop() {
				r := measureRaw(b, depth)
				raws[depth] = r
				b.ReportMetric(r.callsPerSec, "wall-calls/s")
				b.ReportMetric(float64(r.cpuPerCall.Microseconds())/1000, "azurite-cpu-ms/call")
				b.ReportMetric(r.rawCallsPerSec(), "raw-calls/s")
				b.ReportMetric(r.callsPerUnit, "calls/partition")
				b.ReportMetric(r.limit(), "limit-partitions/s")
			}
		})
	}
	for _, mode := range []struct {
		name    string
		backlog int
		depth   int
	}{
		{"waves", throughputBacklog, throughputBacklog},
		// A bound of one plan batch, which these runs do reach: what the waves themselves cost.
		{"waves250", throughputLive, throughputLive},
		{"upfront", 0, throughputPartitions},
	} {
		for _, k := range sizes(1, 2, 4) {
			b.Run(fmt.Sprintf("%s/instances=%d", mode.name, k), func(b *testing.B) {
				raw, ok := raws[throughputLive]
				bound, okBound := raws[mode.depth]
				if !ok || !okBound {
					b.Skipf("no raw rate at depth %d and %d (run the raw steps first)", throughputLive, mode.depth)
				}
				n := sized(throughputPartitions, 500)
				for b.Loop() {
					r := scaledRun(b, scaleSpec{partitions: n, instances: k, backlog: mode.backlog, timeout: 15 * time.Minute})
					r.report(b, n)
					rate := float64(n) / r.elapsed.Seconds()
					b.ReportMetric(raw.limit(), "limit-partitions/s")
					b.ReportMetric(100*rate/raw.limit(), "%-of-limit")
					b.ReportMetric(100*rate/bound.limit(), "%-of-limit-at-bound")
					misbehaved(b, r)
				}
			})
		}
	}
}

// measureRaw replays rawUnits() partitions' critical-path calls, in bundles of rawBundle, with
// depth partitions' worth of bundles in the queue.
func measureRaw(b *testing.B, depth int) rawRate {
	b.Helper()
	srv := azurite.Private(b, azurite.Options{Dir: b.TempDir()})
	defer srv.Stop()
	// Straight to Azurite, counted by an azcore policy: the replay runs in this one process, and
	// a proxy here would take CPU the emulator's clients in a cluster do not share.
	var calls counter
	// Every goroutine keeps its connection: a pool smaller than the concurrency would open and
	// close connections all along, which costs more than the calls being measured.
	pooled := func() azcore.ClientOptions {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 2*rawConcurrency, 2*rawConcurrency
		return azcore.ClientOptions{Transport: &http.Client{Transport: tr}, PerCallPolicies: []policy.Policy{&calls}}
	}
	conn := srv.Storage()
	blobs, err := azclient.Blob(conn, &azblob.ClientOptions{ClientOptions: pooled()})
	if err != nil {
		b.Fatal(err)
	}
	queues, err := azclient.Queue(conn, &azqueue.ClientOptions{ClientOptions: pooled()})
	if err != nil {
		b.Fatal(err)
	}
	ctx := ctxFor(b, 15*time.Minute)
	store := blobstore.New(blobs.ServiceClient().NewContainerClient("runs"), blobstore.Options{})
	if err := store.EnsureContainer(ctx); err != nil {
		b.Fatal(err)
	}
	q := queues.NewQueueClient("work")
	if _, err := q.Create(ctx, nil); err != nil {
		b.Fatal(err)
	}
	const run = "raw"
	params, _ := json.Marshal(map[string]int{"partitions": rawUnits()})
	m := ledger.Manifest{RunID: run, Trigger: ledger.TriggerManual, Epoch: 1,
		Segments: []ledger.Segment{{Epoch: 1}}, Job: "synthetic", Params: params, State: ledger.StateRunning,
		Partitions: rawUnits(), PlanDone: true, FoldShards: work.DefaultFoldShards, FoldBlock: work.DefaultFoldBlock,
		DoneLayout: ledger.DoneStriped, Created: time.Now().UTC()}
	if err := store.CreateManifest(ctx, &m); err != nil {
		b.Fatal(err)
	}
	msg := func(first int) (string, error) {
		env := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindPartition, Run: run, Epoch: 1,
			Part: first, Count: rawBundle} // Parts 0: the count is not known yet, as while planning
		for i := first; i < first+rawBundle; i++ {
			env.Payloads = append(env.Payloads, json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)))
		}
		body, err := env.Encode()
		return string(body), err
	}
	enqueue := func(first int) error {
		body, err := msg(first)
		if err == nil {
			_, err = q.EnqueueMessage(ctx, body, nil)
		}
		return err
	}
	// Fill the queue to the depth, 16 at a time.
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(max(depth/rawBundle, 1)); i = next.Add(1) {
				// Bundles past the run's end: they are only the backlog.
				if err := enqueue(rawUnits() + int(i)*rawBundle); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		return rawRate{}
	}
	calls.n.Store(0)
	azuriteStats := azuriteProc(b, srv)
	az0 := azuriteStats()

	// One unit is one bundle's critical path; each goroutine dequeues 16 at a time and deletes
	// one message per unit, and every unit enqueues one, so the depth holds.
	next.Store(0)
	errs := make(chan error, rawConcurrency)
	start := time.Now()
	for range rawConcurrency {
		wg.Go(func() {
			var held []*azqueue.DequeuedMessage
			fail := func(err error) { errs <- err }
			for u := int(next.Add(1) - 1); u < rawUnits()/rawBundle; u = int(next.Add(1) - 1) {
				if err := rawBundleCalls(ctx, q, store, &m, u*rawBundle, enqueue, &held); err != nil {
					fail(err)
					return
				}
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	az1 := azuriteStats()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	total := calls.n.Load()
	r := rawRate{depth: depth, callsPerSec: float64(total) / wall.Seconds(), callsPerUnit: float64(total) / float64(rawUnits())}
	if cpu := az1.CPU - az0.CPU; cpu > 0 {
		r.cpuPerCall = cpu / time.Duration(total)
	}
	b.Logf("depth %d: %d partitions' critical-path calls in bundles of %d in %s, %d calls (%.0f/s); Azurite CPU %s per call (%.0f%% of a core)",
		depth, rawUnits(), rawBundle, wall.Round(time.Millisecond), total, r.callsPerSec, r.cpuPerCall, cpuShare(az1.CPU-az0.CPU, wall))
	return r
}

// rawBundleCalls makes one bundle's critical-path calls: enqueue a bundle (the leader), dequeue
// 16 messages when held is empty (the host), read the manifest, create the block of its
// results, fold the bundle into its partial, append its done records (the worker), and delete a message
// (the host).
func rawBundleCalls(ctx context.Context, q *azqueue.QueueClient, store *blobstore.Store, m *ledger.Manifest, first int,
	enqueue func(first int) error, held *[]*azqueue.DequeuedMessage) error {
	if err := enqueue(first); err != nil {
		return err
	}
	if len(*held) == 0 {
		resp, err := q.DequeueMessages(ctx, &azqueue.DequeueMessagesOptions{NumberOfMessages: to.Ptr(int32(16)),
			VisibilityTimeout: to.Ptr(int32(600))})
		if err != nil {
			return err
		}
		*held = resp.Messages
	}
	if _, err := store.ReadManifest(ctx, m.RunID); err != nil {
		return err
	}
	idx := make([]int, rawBundle)
	blk := ledger.Block{Run: m.RunID, Span: ledger.Span{First: first, Size: rawBundle}}
	for k := range idx {
		i := first + k
		idx[k] = i
		out, _ := json.Marshal(map[string]int64{"i": int64(i), "v": int64(i) * int64(i)})
		blk.Results = append(blk.Results, ledger.Result{Run: m.RunID, Index: i, Epoch: 1, OK: true, Attempts: 1, Output: out,
			Finished: time.Now().UTC()})
	}
	if err := store.PutBlock(ctx, blk); err != nil {
		return err
	}
	if err := rawFold(ctx, store, m, idx); err != nil {
		return err
	}
	if _, err := store.AppendDone(ctx, m.RunID, m.DoneLayout, 1, idx...); err != nil {
		return err
	}
	if len(*held) > 0 {
		d := (*held)[0]
		*held = (*held)[1:]
		if _, err := q.DeleteMessage(ctx, *d.MessageID, *d.PopReceipt, nil); err != nil {
			return err
		}
	}
	return nil
}

// rawFold is the fold's storage calls for a bundle (within one fold block): read the partial,
// mark the partitions, write it back with the ETag read, again on a conflict.
func rawFold(ctx context.Context, store *blobstore.Store, m *ledger.Manifest, idx []int) error {
	shard, _ := m.FoldSlot(idx[0])
	for {
		p, etag, err := store.ReadPartial(ctx, m.RunID, shard)
		switch {
		case errors.Is(err, ledger.ErrNotFound):
			p, etag = ledger.Partial{Run: m.RunID, Shard: shard}, ""
		case err != nil:
			return err
		}
		for _, i := range idx {
			_, pos := m.FoldSlot(i)
			p.Mark(pos)
			p.Count++
		}
		p.Aggregate = json.RawMessage(fmt.Sprintf(`{"partitions":%d,"ok":%d}`, rawUnits(), p.Count))
		err = store.WritePartial(ctx, p, etag)
		if err == nil || (!errors.Is(err, ledger.ErrConflict) && !errors.Is(err, ledger.ErrExists)) {
			return err
		}
	}
}
