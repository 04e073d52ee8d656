package work_test

import (
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/batonfn/baton/internal/engine/telemetry"
	"github.com/batonfn/baton/work"
)

// BenchmarkHandlePartition_On is BenchmarkHandlePartition_Off with the SDK's providers (every
// span sampled, no exporter): what telemetry on adds per message.
func BenchmarkHandlePartition_On(b *testing.B) {
	tp := sdktrace.NewTracerProvider()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tel, err := telemetry.New(tp, mp)
	if err != nil {
		b.Fatal(err)
	}
	w, run := benchWorker(b, func(c *work.WorkerConfig) { c.Telemetry = tel })
	benchHandle(b, w, run)
}
