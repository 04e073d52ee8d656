// Package otlpenv builds the trace and meter providers that the standard OpenTelemetry
// environment variables ask for: OTLP export (OTEL_EXPORTER_OTLP_ENDPOINT and its per-signal
// forms, _PROTOCOL grpc or http/protobuf, _HEADERS, ...), OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER, OTEL_METRIC_EXPORT_INTERVAL. The SDK's
// exporters and providers read the variables themselves; this package only decides which
// signals are on and over which protocol. With no endpoint set (and OTEL_SDK_DISABLED not
// "false") nothing is built: telemetry is off.
package otlpenv

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Setting names this package reads (beside those the SDK reads itself).
const (
	SettingDisabled        = "OTEL_SDK_DISABLED"
	SettingEndpoint        = "OTEL_EXPORTER_OTLP_ENDPOINT"
	SettingTracesEndpoint  = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	SettingMetricsEndpoint = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
	SettingProtocol        = "OTEL_EXPORTER_OTLP_PROTOCOL"
	SettingTracesProtocol  = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	SettingMetricsProtocol = "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"
	SettingTracesExporter  = "OTEL_TRACES_EXPORTER"
	SettingMetricsExporter = "OTEL_METRICS_EXPORTER"
)

// Identity names the process in the resource, under what OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES do not set: service.name (the app) and service.instance.id.
type Identity struct {
	Service, Instance string
}

// Providers are the providers built from the environment; a nil one is a signal left off.
type Providers struct {
	Tracer trace.TracerProvider
	Meter  metric.MeterProvider
	// Shutdown flushes and stops what was built (nil-safe: a no-op when nothing was).
	Shutdown func(ctx context.Context) error
}

// FromEnv builds the providers getenv's OTEL_* variables ask for (the SDK reads the rest from
// the process environment). Both nil when telemetry is off. A protocol other than grpc or
// http/protobuf is an error naming the setting.
func FromEnv(ctx context.Context, getenv func(string) string, id Identity) (Providers, error) {
	out := Providers{Shutdown: func(context.Context) error { return nil }}
	disabled := strings.TrimSpace(strings.ToLower(getenv(SettingDisabled)))
	if disabled == "true" {
		return out, nil
	}
	anyEndpoint := getenv(SettingEndpoint) != ""
	forced := disabled == "false"
	traces := (anyEndpoint || getenv(SettingTracesEndpoint) != "" || forced) && getenv(SettingTracesExporter) != "none"
	metrics := (anyEndpoint || getenv(SettingMetricsEndpoint) != "" || forced) && getenv(SettingMetricsExporter) != "none"
	if !traces && !metrics {
		return out, nil
	}
	res, err := newResource(ctx, id)
	if err != nil {
		return out, err
	}
	var shutdowns []func(context.Context) error
	if traces {
		proto, err := protocol(getenv, SettingTracesProtocol)
		if err != nil {
			return out, err
		}
		var exp sdktrace.SpanExporter
		if proto == "grpc" {
			exp, err = otlptracegrpc.New(ctx)
		} else {
			exp, err = otlptracehttp.New(ctx)
		}
		if err != nil {
			return out, fmt.Errorf("%s: trace exporter: %w", SettingEndpoint, err)
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		out.Tracer = tp
		shutdowns = append(shutdowns, tp.Shutdown)
	}
	if metrics {
		proto, err := protocol(getenv, SettingMetricsProtocol)
		if err != nil {
			return out, err
		}
		var exp sdkmetric.Exporter
		if proto == "grpc" {
			exp, err = otlpmetricgrpc.New(ctx)
		} else {
			exp, err = otlpmetrichttp.New(ctx)
		}
		if err != nil {
			return out, fmt.Errorf("%s: metric exporter: %w", SettingEndpoint, err)
		}
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)), sdkmetric.WithResource(res))
		out.Meter = mp
		shutdowns = append(shutdowns, mp.Shutdown)
	}
	out.Shutdown = func(ctx context.Context) error {
		var errs []error
		for _, fn := range shutdowns {
			errs = append(errs, fn(ctx))
		}
		return errors.Join(errs...)
	}
	return out, nil
}

// protocol is the signal's OTLP protocol: its own setting, else OTEL_EXPORTER_OTLP_PROTOCOL,
// else http/protobuf.
func protocol(getenv func(string) string, signal string) (string, error) {
	name, v := signal, getenv(signal)
	if v == "" {
		name, v = SettingProtocol, getenv(SettingProtocol)
	}
	switch v {
	case "", "http/protobuf":
		return "http/protobuf", nil
	case "grpc":
		return "grpc", nil
	}
	return "", fmt.Errorf("%s=%q: want grpc or http/protobuf", name, v)
}

func newResource(ctx context.Context, id Identity) (*resource.Resource, error) {
	var attrs []attribute.KeyValue
	if id.Service != "" {
		attrs = append(attrs, attribute.String("service.name", id.Service))
	}
	if id.Instance != "" {
		attrs = append(attrs, attribute.String("service.instance.id", id.Instance))
	}
	// Later options win: the environment's service name and attributes over the defaults.
	res, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithAttributes(attrs...), resource.WithFromEnv())
	if err != nil && res == nil {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return res, nil
}
