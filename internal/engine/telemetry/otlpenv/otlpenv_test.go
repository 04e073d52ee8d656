package otlpenv_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/telemetry/otlpenv"
)

func env(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

// TestFromEnv: which signals the OTEL_* settings turn on, over which protocol.
func TestFromEnv(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name            string
		env             map[string]string
		traces, metrics bool
		err             string
	}{
		{name: "unset: off", env: nil},
		{name: "disabled wins", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_SDK_DISABLED": "true"}},
		{name: "endpoint: both over http", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, traces: true, metrics: true},
		{name: "grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, traces: true, metrics: true},
		{name: "traces only", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:1/v1/traces"}, traces: true},
		{name: "metrics exporter none", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_METRICS_EXPORTER": "none"}, traces: true},
		{name: "SDK enabled explicitly: the SDK's default endpoint", env: map[string]string{"OTEL_SDK_DISABLED": "false"}, traces: true, metrics: true},
		{name: "bad protocol", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"},
			err: `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/json": want grpc or http/protobuf`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := otlpenv.FromEnv(ctx, env(tc.env), otlpenv.Identity{Service: "app", Instance: "i1"})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				// Nothing listens there: the final export fails, and is not waited for long.
				sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
				defer cancel()
				_ = p.Shutdown(sctx)
			}()
			if (p.Tracer != nil) != tc.traces || (p.Meter != nil) != tc.metrics {
				t.Errorf("tracer %v meter %v, want traces %v metrics %v", p.Tracer != nil, p.Meter != nil, tc.traces, tc.metrics)
			}
		})
	}
}
