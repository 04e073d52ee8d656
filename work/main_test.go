package work_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/enginejob"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/blobstore"
	"github.com/batonfn/baton/internal/tools/azurite"
	"github.com/batonfn/baton/work"
	"github.com/batonfn/baton/work/synthetic"
)

// TestMain stops the package's shared Azurite after the tests.
func TestMain(m *testing.M) { os.Exit(azurite.Main(m)) }

// countPolicy counts the storage calls made through a client.
type countPolicy struct{ n atomic.Int64 }

func (p *countPolicy) Do(req *policy.Request) (*http.Response, error) {
	p.n.Add(1)
	return req.Next()
}

// countingClient returns a blob client for the shared Azurite whose calls are counted.
func countingClient(tb testing.TB) (*azblob.Client, *countPolicy) {
	tb.Helper()
	calls := &countPolicy{}
	client, err := azclient.Blob(azurite.Shared(tb).Storage(), &azblob.ClientOptions{
		ClientOptions: azcore.ClientOptions{PerCallPolicies: []policy.Policy{calls}},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return client, calls
}

// countingJob wraps a job, counting calls and letting a test hook into Process and Aggregate.
type countingJob struct {
	work.Job
	processCalls, aggregateCalls atomic.Int64
	// beforeProcess runs before the wrapped Process; an error it returns is Process's.
	beforeProcess func(ctx context.Context, p work.Partition) error
	// beforeAggregate runs before the wrapped Aggregate with its context and the call's number
	// (1-based); an error it returns is Aggregate's.
	beforeAggregate func(ctx context.Context, call int64) error
}

func (j *countingJob) Process(ctx context.Context, p work.Partition) (json.RawMessage, error) {
	j.processCalls.Add(1)
	if j.beforeProcess != nil {
		if err := j.beforeProcess(ctx, p); err != nil {
			return nil, err
		}
	}
	return j.Job.Process(ctx, p)
}

func (j *countingJob) Aggregate(ctx context.Context, run work.RunInfo, results iter.Seq2[ledger.Result, error]) (json.RawMessage, error) {
	n := j.aggregateCalls.Add(1)
	if j.beforeAggregate != nil {
		if err := j.beforeAggregate(ctx, n); err != nil {
			return nil, err
		}
	}
	return j.Job.Aggregate(ctx, run, results)
}

// logCounter is a slog handler that counts records by message.
type logCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *logCounter) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logCounter) WithGroup(string) slog.Handler            { return h }
func (h *logCounter) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n[r.Message]++
	return nil
}
func (h *logCounter) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[msg]
}

// fixture is a worker over a fresh runs container, with the synthetic job wrapped in a
// countingJob and registered as "synthetic".
type fixture struct {
	t     testing.TB
	ctx   context.Context
	store *blobstore.Store
	cc    *container.Client
	calls *countPolicy
	job   *countingJob
	w     *work.Worker
	cfg   work.WorkerConfig
	logs  *logCounter
	clock atomic.Pointer[time.Time] // nil: real time
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	client, calls := countingClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	cc := client.ServiceClient().NewContainerClient(azurite.UniqueName(t, "runs"))
	store := blobstore.New(cc, blobstore.Options{})
	if err := store.EnsureContainer(ctx); err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, ctx: ctx, store: store, cc: cc, calls: calls, job: &countingJob{Job: enginejob.Of(synthetic.New())},
		logs: &logCounter{n: map[string]int{}}}
	jobs := work.NewRegistry()
	jobs.Register(synthetic.Name, f.job)
	f.cfg = work.WorkerConfig{Store: store, Jobs: jobs, Holder: ledger.Holder{App: "test", Instance: t.Name(), PID: 1},
		MaxDeliveries: 3, Logger: slog.New(f.logs), Now: f.now}
	f.w = f.newWorker(f.cfg)
	return f
}

func (f *fixture) now() time.Time {
	if c := f.clock.Load(); c != nil {
		return *c
	}
	return time.Now()
}

func (f *fixture) setClock(c time.Time) { f.clock.Store(&c) }

// createRun writes a running, fully planned manifest for a synthetic run of n partitions.
// doneRecords sums the completion records of every done shard of a run.
func (f *fixture) doneRecords(run string) (int64, error) {
	m := f.manifest(run)
	return ledger.CountDone(f.ctx, f.store, run, m.DoneLayout, m.Partitions, 0)
}

func (f *fixture) createRun(run string, p synthetic.Params, mutate ...func(*ledger.Manifest)) {
	f.t.Helper()
	params, err := json.Marshal(p)
	if err != nil {
		f.t.Fatal(err)
	}
	m := &ledger.Manifest{RunID: run, Trigger: ledger.TriggerManual, Epoch: 1,
		Segments: []ledger.Segment{{Epoch: 1, From: 0}}, Job: synthetic.Name, Params: params,
		State: ledger.StateRunning, Partitions: p.Partitions, PlanDone: true, BatchSize: 100,
		Checkpoint: ledger.Checkpoint{Batches: (p.Partitions + 99) / 100, Next: p.Partitions}, DoneLayout: ledger.DoneStriped}
	for _, fn := range mutate {
		fn(m)
	}
	if err := f.store.CreateManifest(f.ctx, m); err != nil {
		f.t.Fatal(err)
	}
}

// envelope is partition i's message as the leader of epoch would send it.
func envelope(run string, i int, epoch int64) work.Envelope {
	return work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindPartition, Run: run, Epoch: epoch, Part: i,
		Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
}

// deliver hands partition i (epoch 1) to the worker as delivery number count.
func (f *fixture) deliver(run string, i, count int) error {
	env := envelope(run, i, 1)
	return f.w.HandlePartition(f.ctx, env, work.Delivery{MessageID: env.MessageID(), Count: count})
}

// mustDeliver delivers and fails the test on an error.
func (f *fixture) mustDeliver(run string, i, count int) {
	f.t.Helper()
	if err := f.deliver(run, i, count); err != nil {
		f.t.Fatalf("deliver %s/%d (count %d): %v", run, i, count, err)
	}
}

func (f *fixture) manifest(run string) ledger.Manifest {
	f.t.Helper()
	m, err := f.store.ReadManifest(f.ctx, run)
	if err != nil {
		f.t.Fatal(err)
	}
	return m
}

// report reads the run's report and its synthetic summary.
func (f *fixture) report(run string) (ledger.Report, synthetic.Summary) {
	f.t.Helper()
	rep, _, err := f.store.ReadReport(f.ctx, run)
	if err != nil {
		f.t.Fatalf("read report: %v", err)
	}
	var s synthetic.Summary
	if len(rep.Aggregate) > 0 {
		if err := json.Unmarshal(rep.Aggregate, &s); err != nil {
			f.t.Fatalf("report aggregate %s: %v", rep.Aggregate, err)
		}
	}
	return rep, s
}

// results lists the run's result indexes.
func (f *fixture) results(run string) []int {
	f.t.Helper()
	var got []int
	if err := f.store.ListResults(f.ctx, run, func(r ledger.ResultRef) error { got = append(got, r.Index); return nil }); err != nil {
		f.t.Fatal(err)
	}
	return got
}

func (f *fixture) noReport(run string) {
	f.t.Helper()
	if _, _, err := f.store.ReadReport(f.ctx, run); !errors.Is(err, ledger.ErrNotFound) {
		f.t.Errorf("report of %s: got %v, want none yet", run, err)
	}
}

// sumSquares is the synthetic aggregate's sumV over the indexes 0..n-1 except skip.
func sumSquares(n int, skip ...int) int64 {
	var s int64
	for i := range n {
		skipped := false
		for _, k := range skip {
			skipped = skipped || k == i
		}
		if !skipped {
			s += int64(i) * int64(i)
		}
	}
	return s
}

// newWorker builds a worker or fails the test.
func (f *fixture) newWorker(cfg work.WorkerConfig) *work.Worker {
	f.t.Helper()
	w, err := work.NewWorker(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	return w
}
