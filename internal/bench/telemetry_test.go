package bench

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/telemetry/otlptest"
	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// BenchmarkEndToEndTelemetry is BenchmarkEndToEnd on 4 instances with telemetry off and on,
// side by side in one run: on, every handler exports its spans and metrics over OTLP/HTTP (the
// standard OTEL_* settings, every span sampled, the span queue large enough to drop none) to a
// receiver in this process that keeps each request and decodes it once the run is final, and
// the handlers' CPU is read once every partition's span has arrived. The figure to compare is
// handler-cpu-us/partition; spans/partition says what the export carried.
func BenchmarkEndToEndTelemetry(b *testing.B) {
	const instances = 4
	b.Run("telemetry=off", func(b *testing.B) {
		for b.Loop() {
			endToEndWith(b, instances, nil, nil)
		}
	})
	b.Run("telemetry=otlp", func(b *testing.B) {
		for b.Loop() {
			r := startSpanCounter(b)
			extra := map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT": r.srv.URL,
				"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
				"OTEL_TRACES_SAMPLER":         "always_on",
				// More than the run's spans, so none can drop; not larger: the GC scans the whole
				// queue (a channel's buffer) in every cycle.
				"OTEL_BSP_MAX_QUEUE_SIZE": "16384",
				"OTEL_BSP_SCHEDULE_DELAY": "100", // ms: the spans are there soon after the run, the handlers idle little meanwhile
			}
			endToEndWith(b, instances, extra, func(b *testing.B, partitions int) {
				// The batch span processor exports every 5 s: wait for every partition's span.
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				if !r.await(ctx, partitions) {
					b.Fatalf("%d partition spans of %d arrived (%d spans, %d requests, decode error %v)", r.partitionSpans(), partitions, r.total(), r.requestCount(), r.decodeErr)
				}
				b.ReportMetric(float64(r.total())/float64(partitions), "spans/partition")
			})
		}
	})
}

// spanCounter is an OTLP/HTTP receiver that keeps every trace export request and, once asked
// (after the run: decoding while the handlers run would compete with them for this machine's
// cores, a collector's work that is not theirs), decodes them and counts the spans, the
// partitions' (baton.partition) apart.
type spanCounter struct {
	srv *httptest.Server

	mu         sync.Mutex
	changed    chan struct{} // closed and replaced on every request
	pending    [][]byte      // trace requests not decoded yet
	decodeErr  error
	spans      int
	partitions int
	requests   int
}

func startSpanCounter(b *testing.B) *spanCounter {
	r := &spanCounter{changed: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, req *http.Request) {
		if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" || req.Header.Get("Content-Encoding") != "" {
			http.Error(w, "want uncompressed application/x-protobuf", http.StatusUnsupportedMediaType)
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.pending, r.requests = append(r.pending, body), r.requests+1
		close(r.changed)
		r.changed = make(chan struct{})
		r.mu.Unlock()
		otlptest.Reply(w, &coltracepb.ExportTraceServiceResponse{})
	})
	mux.HandleFunc("POST /v1/metrics", func(w http.ResponseWriter, req *http.Request) {
		var in colmetricspb.ExportMetricsServiceRequest
		if !otlptest.Decode(w, req, &in) {
			return
		}
		otlptest.Reply(w, &colmetricspb.ExportMetricsServiceResponse{})
	})
	r.srv = httptest.NewServer(mux)
	b.Cleanup(r.srv.Close)
	return r
}

// decode decodes the requests kept so far and counts their spans. r.mu is held.
func (r *spanCounter) decode() {
	for _, body := range r.pending {
		var in coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &in); err != nil {
			r.decodeErr = err
			continue
		}
		for _, rs := range in.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					r.spans++
					if sp.GetName() == "baton.partition" {
						r.partitions++
					}
				}
			}
		}
	}
	r.pending = nil
}

// await waits until n partition spans have arrived; false if ctx ended first or a request did
// not decode.
func (r *spanCounter) await(ctx context.Context, n int) bool {
	for {
		r.mu.Lock()
		r.decode()
		got, changed, err := r.partitions, r.changed, r.decodeErr
		r.mu.Unlock()
		if err != nil {
			return false
		}
		if got >= n {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		}
	}
}

func (r *spanCounter) total() int          { r.mu.Lock(); defer r.mu.Unlock(); return r.spans }
func (r *spanCounter) partitionSpans() int { r.mu.Lock(); defer r.mu.Unlock(); return r.partitions }
func (r *spanCounter) requestCount() int   { r.mu.Lock(); defer r.mu.Unlock(); return r.requests }
