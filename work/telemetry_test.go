package work_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/telemetry"
	"github.com/batonfn/baton/internal/engine/telemetry/otlptest"
	"github.com/batonfn/baton/work"
	"github.com/batonfn/baton/work/synthetic"
)

// TestWorker_TelemetryRetriesAreLinked: a bundle's delivery continues the trace of the batch
// that sent it, each partition's try is a span under it, a failed try's retry carries that
// try's trace context and its delivery is a child of the run's root linked to it; the run's
// finish is under the root; and the counters count what was recorded.
func TestWorker_TelemetryRetriesAreLinked(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	tel, err := telemetry.New(tp, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		t.Fatal(err)
	}
	e := newBundleEnv(t, true, func(c *work.WorkerConfig) { c.Telemetry = tel })
	ctx := context.Background()

	// The run's root and the batch that sends the bundle, as the coordinator makes them.
	rctx, root := tel.StartRun(ctx, telemetry.Run{ID: "traced", Job: synthetic.Name}, "manual")
	rootTP := tel.Traceparent(rctx)
	bctx, batch := tel.StartBatch(rctx, telemetry.Run{ID: "traced", Job: synthetic.Name, Epoch: 1}, 0, 0, 4)
	batchTP := tel.Traceparent(bctx)
	batch.End(nil)
	root.End(nil)
	e.run("traced", synthetic.Params{Partitions: 4, FailAlways: []int{2}}, func(m *ledger.Manifest) { m.Trace = rootTP })

	env := bundle("traced", 0, 4)
	env.Trace = batchTP
	if err := e.deliver(env, 1); err != nil {
		t.Fatal(err)
	}
	sent := e.sender.Sent()
	if len(sent) != 1 {
		t.Fatalf("sent %d messages, want the retry of partition 2", len(sent))
	}
	retry, err := work.DecodeEnvelope(sent[0].Body)
	if err != nil {
		t.Fatal(err)
	}
	var failedTry sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "baton.partition" && s.Status().Code != 0 && s.Status().Description != "" {
			failedTry = s
		}
	}
	if failedTry == nil || retry.Trace == "" || retry.Trace[36:52] != failedTry.SpanContext().SpanID().String() {
		t.Fatalf("retry's trace %q: want the failed try's span (%v)", retry.Trace, failedTry)
	}
	// The retry's deliveries fail to its last try, then the run finishes partial.
	for retry.Attempt > 0 {
		err := e.deliver(retry, 1)
		if err != nil && !errors.Is(err, work.ErrGaveUp) {
			t.Fatal(err)
		}
		next := e.sender.Sent()
		if len(next) == len(sent) {
			break
		}
		sent = next
		if retry, err = work.DecodeEnvelope(sent[len(sent)-1].Body); err != nil {
			t.Fatal(err)
		}
	}
	// The delivery that recorded the last outcome finished the run.

	batchID := batchTP[36:52]
	var bundles, retries, finishes, tryOK, tryFailed int
	for _, s := range rec.Ended() {
		switch s.Name() {
		case "baton.partition": // a try's outcome is its status
			switch s.Status().Code {
			case codes.Ok:
				tryOK++
			case codes.Error:
				tryFailed++
			default:
				t.Errorf("partition %v's span has status %v, want ok or error", s.Attributes(), s.Status())
			}
		case "baton.bundle":
			bundles++
			if s.Parent().SpanID().String() != batchID {
				t.Errorf("bundle's parent %s, want the batch %s", s.Parent().SpanID(), batchID)
			}
		case "baton.partition.message":
			retries++
			if s.Parent().SpanID().String() != rootTP[36:52] || len(s.Links()) != 1 {
				t.Errorf("retry's parent %s links %v: want the root %s, linked to the failed try", s.Parent().SpanID(), s.Links(), rootTP[36:52])
			}
		case "baton.run.finish":
			finishes++
			if s.Parent().SpanID().String() != rootTP[36:52] {
				t.Errorf("finish's parent %s, want the root", s.Parent().SpanID())
			}
		}
		if s.SpanContext().TraceID().String() != rootTP[3:35] {
			t.Errorf("%s is in trace %s, want the run's %s", s.Name(), s.SpanContext().TraceID(), rootTP[3:35])
		}
	}
	if bundles != 1 || retries == 0 || finishes != 1 {
		t.Errorf("%d bundle, %d retry deliveries, %d finishes: want 1, some, 1", bundles, retries, finishes)
	}
	if tryOK != 3 || tryFailed != 1+retries {
		t.Errorf("%d tries ok, %d failed: want 3 and %d (partition 2's first and each retry)", tryOK, tryFailed, 1+retries)
	}

	got := otlptest.Sums(t, reader, telemetry.KeyState, telemetry.KeyOutcome)
	m, err := e.fake.ReadManifest(ctx, "traced")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"baton.partitions.processed/succeeded": 3, "baton.partitions.processed/failed": 1,
		"baton.partitions.failed/": 1, "baton.partitions.retried/": int64(len(sent)), "baton.runs.finished/partial": 1}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d (all %v)", k, got[k], v, got)
		}
	}
	if m.State != ledger.StatePartial || m.Failed != 1 || m.Succeeded != 3 {
		t.Errorf("run %s: %d succeeded %d failed; want partial 3/1", m.State, m.Succeeded, m.Failed)
	}
}
