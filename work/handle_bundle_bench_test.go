package work_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/ledgertest"
	"github.com/batonfn/baton/internal/engine/telemetry"
	"github.com/batonfn/baton/internal/engine/telemetry/otlpenv"
	"github.com/batonfn/baton/internal/engine/telemetry/otlptest"
	"github.com/batonfn/baton/internal/enginejob"
	"github.com/batonfn/baton/work"
	"github.com/batonfn/baton/work/synthetic"
)

// BenchmarkHandleBundle delivers b.N bundles of DefaultMaxBundle no-op synthetic partitions
// to a worker over an in-memory ledger, telemetry off and on (the providers otlpenv builds from
// the OTEL_* settings, every span sampled, exported over OTLP/HTTP to a receiver in this
// process that keeps the bodies and decodes them after the timer). cpu-us/partition is the
// process's CPU time (the exporter's goroutines included, the final flush too) per partition;
// spans/partition what the export carried.
func BenchmarkHandleBundle(b *testing.B) {
	b.Run("telemetry=off", func(b *testing.B) { benchBundle(b, nil) })
	b.Run("telemetry=otlp", func(b *testing.B) {
		rcv := &bodyKeeper{}
		srv := httptest.NewServer(rcv)
		defer srv.Close()
		for k, v := range map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL,
			"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
			"OTEL_TRACES_SAMPLER":         "always_on",
			"OTEL_BSP_MAX_QUEUE_SIZE":     "16384", // as BenchmarkEndToEndTelemetry's; the benchmark counts what arrived
			"OTEL_BSP_SCHEDULE_DELAY":     "100",
		} {
			b.Setenv(k, v)
		}
		p, err := otlpenv.FromEnv(context.Background(), os.Getenv, otlpenv.Identity{Service: "bench", Instance: "i1"})
		if err != nil {
			b.Fatal(err)
		}
		tel, err := telemetry.New(p.Tracer, p.Meter)
		if err != nil {
			b.Fatal(err)
		}
		partitions := benchBundle(b, tel, p.Shutdown)
		spans, parts := rcv.count(b)
		if parts != partitions {
			b.Fatalf("%d partition spans arrived, want %d", parts, partitions)
		}
		b.ReportMetric(float64(spans)/float64(partitions), "spans/partition")
	})
}

// benchBundle runs the benchmark's bundles through a worker with tel, calling flush (when not
// nil) before the timer stops; it returns the partitions processed. Every bundlesPerStore
// bundles it starts again on a new ledger (and worker), so that the live heap stays that of a
// handler's run of 10,240 partitions instead of growing with b.N.
func benchBundle(b *testing.B, tel *telemetry.Telemetry, flush ...func(context.Context) error) int {
	const (
		size            = work.DefaultMaxBundle
		bundlesPerStore = 40
		planned         = synthetic.MaxPartitions / size * size // the run never finishes
	)
	ctx := context.Background()
	jobs := work.NewRegistry()
	jobs.Register(synthetic.Name, enginejob.Of(synthetic.New()))
	params, _ := json.Marshal(synthetic.Params{Partitions: planned})
	const run = "bench-bundle"
	fresh := func() *work.Worker {
		fake := ledgertest.NewFake(ledgertest.Options{})
		w, err := work.NewWorker(work.WorkerConfig{Store: fake, Jobs: jobs, Holder: ledger.Holder{App: "b", Instance: "i", PID: 1},
			MaxDeliveries: 5, Telemetry: tel})
		if err != nil {
			b.Fatal(err)
		}
		m := &ledger.Manifest{RunID: run, Trigger: ledger.TriggerManual, Epoch: 1, Segments: []ledger.Segment{{Epoch: 1}},
			Job: synthetic.Name, Params: params, State: ledger.StateRunning, Partitions: planned, PlanDone: true,
			BatchSize: 2048, Checkpoint: ledger.Checkpoint{Batches: 1, Next: planned}, FoldShards: work.DefaultFoldShards,
			FoldBlock: work.DefaultFoldBlock, DoneLayout: ledger.DoneStriped, Deadline: time.Now().Add(time.Hour),
			Expires: time.Now().Add(2 * time.Hour), Trace: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
		if err := fake.CreateManifest(ctx, m); err != nil {
			b.Fatal(err)
		}
		return w
	}
	sender := "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"
	var w *work.Worker
	cpu0 := cpuTime()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i%bundlesPerStore == 0 {
			w = fresh()
		}
		first := i % bundlesPerStore * size
		env := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindPartition, Run: run, Epoch: 1, Part: first, Count: size,
			Block: size, Parts: planned, Trace: sender, Payloads: make([]json.RawMessage, size)}
		for k := range env.Payloads {
			env.Payloads[k] = fmt.Appendf(nil, `{"i":%d}`, first+k)
		}
		if err := w.HandlePartition(ctx, env, work.Delivery{MessageID: env.MessageID(), Count: 1, Try: 1}); err != nil {
			b.Fatal(err)
		}
	}
	for _, f := range flush {
		if err := f(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	n := b.N * size
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Microsecond)/float64(n), "cpu-us/partition")
	return n
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// bodyKeeper is an OTLP/HTTP receiver that keeps the trace export bodies, decoded later.
type bodyKeeper struct {
	mu     sync.Mutex
	bodies [][]byte
	gzip   []bool
}

func (k *bodyKeeper) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	if req.URL.Path == "/v1/traces" {
		k.mu.Lock()
		k.bodies = append(k.bodies, body)
		k.gzip = append(k.gzip, req.Header.Get("Content-Encoding") == "gzip")
		k.mu.Unlock()
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
}

// count decodes the kept bodies: every span, and the partitions' (baton.partition).
func (k *bodyKeeper) count(b *testing.B) (spans, parts int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i, body := range k.bodies {
		var in coltracepb.ExportTraceServiceRequest
		if k.gzip[i] {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, "/v1/traces", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/x-protobuf")
			req.Header.Set("Content-Encoding", "gzip")
			if !otlptest.Decode(rec, req, &in) {
				b.Fatalf("export %d: %s", i, rec.Body)
			}
		} else if err := proto.Unmarshal(body, &in); err != nil {
			b.Fatalf("export %d: %v", i, err)
		}
		for _, rs := range in.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					spans++
					if sp.GetName() == "baton.partition" {
						parts++
					}
				}
			}
		}
	}
	return spans, parts
}
