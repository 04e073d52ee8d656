package app

import (
	"net/http"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/telemetry/otlptest"
)

// TestNewApp_AppsProviders: the providers an app hands the handler (Options, as
// baton.WithTelemetry sets them) receive the spans and metrics of the production wiring: a
// manual request's run starts its trace there, linked to the request's traceparent, and is
// counted; the manifest keeps the root's trace context, and GET /api/runs/{id} answers its trace
// with its BATON_TRACE_URL address.
func TestNewApp_AppsProviders(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	p := newProdApp(t, map[string]string{config.SettingManualJobs: syntheticName, config.SettingTraceURL: "https://traces.test/t/{trace}"},
		builtinJobs(), nil, func(o *Options) {
			o.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			o.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		})
	const caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	out := invokeHTTP(t, p.hs.URL, fnRuns, goldenHTTP(t, "http-runs-post.json", withBody(`{"job":"synthetic","params":{"partitions":2}}`),
		withKey("otel-1"), func(req map[string]any) { req["Headers"].(map[string]any)["traceparent"] = []any{caller} }))
	v := out.json(t)
	if out.Status != http.StatusAccepted {
		t.Fatalf("POST /api/runs: %d %v", out.Status, v)
	}
	run := v["run"].(string)
	m, err := p.store.ReadManifest(testCtx(t), run)
	if err != nil {
		t.Fatal(err)
	}
	var root sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "baton.run.start" {
			root = s
		}
	}
	if root == nil || m.Trace == "" || m.Trace[36:52] != root.SpanContext().SpanID().String() {
		t.Fatalf("manifest trace %q, root span %v: want the root's context in the manifest", m.Trace, root)
	}
	if l := root.Links(); len(l) != 1 || l[0].SpanContext.SpanID().String() != caller[36:52] {
		t.Errorf("root links %v, want the caller's span %s", l, caller[36:52])
	}
	if started := otlptest.Sums(t, reader)["baton.runs.started/"]; started != 1 {
		t.Errorf("baton.runs.started = %d, want 1", started)
	}
	get := invokeHTTP(t, p.hs.URL, fnRuns, goldenHTTP(t, "http-runs-get.json", withID(run)))
	g := get.json(t)
	if want := "https://traces.test/t/" + m.Trace[3:35]; g["traceUrl"] != want {
		t.Errorf("GET /api/runs/%s: traceUrl %v, want %s", run, g["traceUrl"], want)
	}
}
