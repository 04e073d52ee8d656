package otlpenv_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/batonfn/baton/internal/engine/telemetry"
	"github.com/batonfn/baton/internal/engine/telemetry/otlpenv"
)

// grpcReceiver is an OTLP/gRPC receiver: it keeps the names of the spans and metrics exported to
// it and the resource's service name.
type grpcReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu       sync.Mutex
	spans    []string
	metrics  map[string]bool
	services map[string]bool
}

func (r *grpcReceiver) Export(ctx context.Context, in *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range in.GetResourceSpans() {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				r.services[kv.GetValue().GetStringValue()] = true
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, s.GetName())
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

type metricsService struct {
	colmetricspb.UnimplementedMetricsServiceServer
	r *grpcReceiver
}

func (m metricsService) Export(ctx context.Context, in *colmetricspb.ExportMetricsServiceRequest) (*colmetricspb.ExportMetricsServiceResponse, error) {
	m.r.mu.Lock()
	defer m.r.mu.Unlock()
	for _, rm := range in.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, mt := range sm.GetMetrics() {
				m.r.metrics[mt.GetName()] = true
			}
		}
	}
	return &colmetricspb.ExportMetricsServiceResponse{}, nil
}

// TestFromEnv_ExportsOverGRPC: with OTEL_EXPORTER_OTLP_PROTOCOL=grpc the providers export spans
// and metrics to a real OTLP/gRPC receiver, under OTEL_SERVICE_NAME, when shut down (the
// handler's flush).
func TestFromEnv_ExportsOverGRPC(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := &grpcReceiver{metrics: map[string]bool{}, services: map[string]bool{}}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, rec)
	colmetricspb.RegisterMetricsServiceServer(srv, metricsService{r: rec})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	// The SDK's exporters read the process environment themselves.
	settings := map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + ln.Addr().String(),
		"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_EXPORTER_OTLP_INSECURE": "true",
		"OTEL_SERVICE_NAME":           "baton-grpc-test",
	}
	for k, v := range settings {
		t.Setenv(k, v)
	}
	ctx := context.Background()
	p, err := otlpenv.FromEnv(ctx, env(settings), otlpenv.Identity{Service: "app", Instance: "i1"})
	if err != nil || p.Tracer == nil || p.Meter == nil {
		t.Fatalf("FromEnv: %+v, %v", p, err)
	}
	tel, err := telemetry.New(p.Tracer, p.Meter)
	if err != nil {
		t.Fatal(err)
	}
	_, span := tel.StartRun(ctx, telemetry.Run{ID: "r1", Job: "synthetic"}, "manual")
	span.End(nil)
	tel.RunStarted(ctx, "", "synthetic", "manual")
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := p.Shutdown(sctx); err != nil {
		t.Fatalf("shutdown (flush): %v", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.spans) != 1 || rec.spans[0] != "baton.run.start" || !rec.services["baton-grpc-test"] {
		t.Errorf("received spans %v from services %v, want baton.run.start from baton-grpc-test", rec.spans, rec.services)
	}
	if !rec.metrics["baton.runs.started"] {
		t.Errorf("received metrics %v, want baton.runs.started", rec.metrics)
	}
}
