package otlptest

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Sums collects reader's integer counters: each data point's value added under its
// instrument's name, "/", and the values of keys on the point run together (empty when
// absent), e.g. "baton.runs.finished/succeeded".
func Sums(t testing.TB, reader *sdkmetric.ManualReader, keys ...attribute.Key) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				name := m.Name + "/"
				for _, k := range keys {
					v, _ := dp.Attributes.Value(k)
					name += v.AsString()
				}
				out[name] += dp.Value
			}
		}
	}
	return out
}
