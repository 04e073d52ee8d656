package coordinator

import (
	"encoding/json"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/telemetry"
	"github.com/batonfn/baton/internal/engine/telemetry/otlptest"
	"github.com/batonfn/baton/work"
)

// TestTelemetry_RunAndRedriveInOneTrace: an ad-hoc run's root is recorded in its manifest and
// its check, planning slice, enqueue batch, partitions and finish join that trace; a redrive of
// it later is a child of the same root and its partitions' deliveries are linked to it; the
// counters count one run started and its two ends.
func TestTelemetry_RunAndRedriveInOneTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	tel, err := telemetry.New(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)),
		sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		t.Fatal(err)
	}
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	w, err := work.NewWorker(work.WorkerConfig{Store: e.store, Jobs: e.jobs, MaxDeliveries: 5, Now: e.clock.Now, CopyTTL: 15 * time.Second,
		Holder: ledger.Holder{App: "sched", Instance: "a", PID: 2}, Telemetry: tel})
	if err != nil {
		t.Fatal(err)
	}
	c := e.instanceWith("a", func(cfg *Config) { cfg.Finisher, cfg.Telemetry = w, tel })
	se := &stopEnv{schedEnv: e, c: c}
	job := &flakyJob{}
	job.down.Store(true)
	e.jobs.Register("flaky", job)
	out, err := c.StartManual(testCtx(t), ManualRequest{Job: "flaky", Params: json.RawMessage(`{"n":6}`)})
	if err != nil {
		t.Fatal(err)
	}
	e.deliverChecks(c)
	se.deliverAll(t, w, out.Run, 0)
	m := e.manifest(out.Run)
	if m.State != ledger.StatePartial || len(m.Trace) != telemetry.TraceparentLen {
		t.Fatalf("run %s trace %q: want partial, with its root's traceparent", m.State, m.Trace)
	}
	job.down.Store(false)
	if _, err := c.Redrive(testCtx(t), out.Run, "k1", "test"); err != nil {
		t.Fatal(err)
	}
	if n := se.deliverAll(t, w, out.Run, 1); n != 3 {
		t.Fatalf("redrove %d partitions, want the 3 failed", n)
	}
	if m = e.manifest(out.Run); m.State != ledger.StateSucceeded {
		t.Fatalf("after the redrive: %s, want succeeded", m.State)
	}

	rootTrace, rootSpan := m.Trace[3:35], m.Trace[36:52]
	names := map[string]int{}
	var redriveSpan string
	for _, s := range rec.Ended() {
		if s.Name() == "baton.redrive" {
			redriveSpan = s.SpanContext().SpanID().String()
		}
	}
	for _, s := range rec.Ended() {
		names[s.Name()]++
		if s.SpanContext().TraceID().String() != rootTrace {
			t.Errorf("%s is in trace %s, want the run's %s", s.Name(), s.SpanContext().TraceID(), rootTrace)
		}
		parent := s.Parent().SpanID().String()
		switch s.Name() {
		case "baton.check", "baton.run.finish", "baton.redrive":
			if parent != rootSpan {
				t.Errorf("%s's parent %s, want the root %s", s.Name(), parent, rootSpan)
			}
		case "baton.partition.message":
			redriven := false
			for _, kv := range s.Attributes() {
				redriven = redriven || kv.Key == telemetry.KeyRedrive
			}
			if !redriven {
				if s.Parent().SpanID().String() == rootSpan {
					t.Errorf("a first-round partition's delivery is a child of the root, want of its batch")
				}
				continue
			}
			names["redriven"]++
			if s.Parent().SpanID().String() != rootSpan || len(s.Links()) != 1 || s.Links()[0].SpanContext.SpanID().String() != redriveSpan {
				t.Errorf("redriven partition: parent %s links %v, want the root, linked to the redrive %s", parent, s.Links(), redriveSpan)
			}
		}
	}
	for name, n := range map[string]int{"baton.run.start": 1, "baton.check": 1, "baton.plan.slice": 1, "baton.enqueue.batch": 1,
		"baton.redrive": 1, "redriven": 3, "baton.run.finish": 2} {
		if names[name] < n {
			t.Errorf("%d %s spans, want at least %d (all %v)", names[name], name, n, names)
		}
	}

	got := otlptest.Sums(t, reader, telemetry.KeyState)
	for k, v := range map[string]int64{"baton.runs.started/": 1, "baton.runs.finished/partial": 1, "baton.runs.finished/succeeded": 1} {
		if got[k] != v {
			t.Errorf("%s = %d, want %d (all %v)", k, got[k], v, got)
		}
	}
}
