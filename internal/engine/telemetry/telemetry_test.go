package telemetry_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/batonfn/baton/internal/engine/telemetry"
)

var run = telemetry.Run{ID: "tick-20260101t000000z", Schedule: "tick", Job: "synthetic", Epoch: 3}

// hotPath is what a worker calls per partition message and partition.
func hotPath(ctx context.Context, tel *telemetry.Telemetry, root, sender string) {
	mctx, span := tel.StartMessage(ctx, root, sender, run, telemetry.Message{First: 32, Count: 16, Delivery: 1})
	for i := range 4 {
		pctx, ps := tel.StartPartition(mctx, 32+i, 1)
		tel.PartitionTried(pctx, run.Job, true, time.Millisecond)
		ps.EndTry(nil)
	}
	tel.PartitionsRecorded(mctx, run.Job, 4, 0)
	_ = tel.Traceparent(mctx)
	span.End(nil)
}

// TestOff_NoAllocation: telemetry off (a nil *Telemetry, as New returns without providers), the
// hot path allocates nothing.
func TestOff_NoAllocation(t *testing.T) {
	tel, err := telemetry.New(nil, nil)
	if err != nil || tel != nil || tel.On() {
		t.Fatalf("New(nil, nil) = %v, %v: want nil (off)", tel, err)
	}
	ctx := context.Background()
	root := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	if n := testing.AllocsPerRun(1000, func() { hotPath(ctx, tel, root, root) }); n != 0 {
		t.Errorf("off: %v allocations per message, want 0", n)
	}
}

func newSDK(t testing.TB) (*telemetry.Telemetry, *tracetest.SpanRecorder, *sdkmetric.ManualReader) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	tel, err := telemetry.New(tp, mp)
	if err != nil {
		t.Fatal(err)
	}
	return tel, rec, reader
}

// TestTraceAcrossMessages: the root's traceparent, carried as a manifest and a message would
// carry it, makes the spans of another process children in the same trace; a retry's message
// span is a child of the root linked to the failed try.
func TestTraceAcrossMessages(t *testing.T) {
	tel, rec, _ := newSDK(t)
	ctx := context.Background()
	hctx, hb := tel.StartHeartbeat(ctx)
	rctx, rs := tel.StartRun(hctx, run, "timer")
	root := tel.Traceparent(rctx)
	rs.End(nil)
	hb.End(nil)
	if len(root) != telemetry.TraceparentLen {
		t.Fatalf("traceparent %q: want %d bytes", root, telemetry.TraceparentLen)
	}
	// Another process: a check continues the run's trace from the manifest's traceparent.
	cctx, cs := tel.StartCheck(context.Background(), root, "", run, 1)
	sctx, ss := tel.StartSlice(cctx, root, run, 0)
	bctx, bs := tel.StartBatch(sctx, run, 0, 0, 16)
	sender := tel.Traceparent(bctx)
	bs.End(nil)
	ss.End(nil)
	cs.End(nil)
	// A third: the bundle the batch sent, its partition, and the partition's retry.
	mctx, ms := tel.StartMessage(context.Background(), root, sender, run, telemetry.Message{First: 0, Count: 16, Delivery: 1})
	pctx, ps := tel.StartPartition(mctx, 3, 1)
	failed := tel.Traceparent(pctx)
	ps.EndTry(errors.New("boom"))
	ms.End(nil)
	rtctx, retry := tel.StartMessage(context.Background(), root, failed, run, telemetry.Message{First: 3, Attempt: 2, Delivery: 1})
	_, second := tel.StartPartition(rtctx, 3, 2)
	second.EndTry(nil)
	retry.End(nil)
	_, fs := tel.StartFinish(context.Background(), root, run)
	fs.End(nil)

	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[s.Name()+s.SpanContext().SpanID().String()] = s
	}
	byName := func(name string) []sdktrace.ReadOnlySpan {
		var out []sdktrace.ReadOnlySpan
		for _, s := range rec.Ended() {
			if s.Name() == name {
				out = append(out, s)
			}
		}
		return out
	}
	hbSpan, runSpan := byName("baton.heartbeat")[0], byName("baton.run.start")[0]
	if runSpan.Parent().IsValid() || runSpan.SpanContext().TraceID() == hbSpan.SpanContext().TraceID() {
		t.Errorf("the run's root must start a trace of its own")
	}
	if l := runSpan.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != hbSpan.SpanContext().SpanID() {
		t.Errorf("the run's root links %v, want the heartbeat", l)
	}
	tid := runSpan.SpanContext().TraceID()
	parentOf := map[string]trace.SpanID{
		"baton.check":             runSpan.SpanContext().SpanID(),
		"baton.plan.slice":        byName("baton.check")[0].SpanContext().SpanID(),
		"baton.enqueue.batch":     byName("baton.plan.slice")[0].SpanContext().SpanID(),
		"baton.bundle":            byName("baton.enqueue.batch")[0].SpanContext().SpanID(),
		"baton.partition":         byName("baton.bundle")[0].SpanContext().SpanID(),
		"baton.partition.message": runSpan.SpanContext().SpanID(), // the retry
		"baton.run.finish":        runSpan.SpanContext().SpanID(),
	}
	for name, want := range parentOf {
		s := byName(name)[0]
		if s.SpanContext().TraceID() != tid || s.Parent().SpanID() != want {
			t.Errorf("%s: trace %s parent %s, want trace %s parent %s", name, s.SpanContext().TraceID(), s.Parent().SpanID(), tid, want)
		}
	}
	retrySpan := byName("baton.partition.message")[0]
	if l := retrySpan.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != byName("baton.partition")[0].SpanContext().SpanID() {
		t.Errorf("the retry links %v, want the failed try", l)
	}
	// The run's attributes are on the message's span; a partition's span carries only its own
	// (it is made per partition: each attribute costs on the hot path and in the export).
	if p := byName("baton.partition"); len(p) != 2 || p[0].Status().Code != codes.Error || p[1].Status().Code != codes.Ok {
		t.Errorf("partition spans %v: want the failed try's (status error) and the retry's (ok)", p)
	} else if p[1].Parent().SpanID() != byName("baton.partition.message")[0].SpanContext().SpanID() {
		t.Errorf("the retry's try: parent %s, want the retry's message", p[1].Parent().SpanID())
	}
	for name, want := range map[string]map[string]string{
		"baton.bundle": {"baton.run.id": run.ID, "baton.job.name": "synthetic", "baton.schedule.name": "tick",
			"baton.run.epoch": "3", "baton.partition.first": "0", "baton.partition.count": "16", "baton.partition.attempt": "1",
			"baton.delivery.count": "1"},
		"baton.partition":   {"baton.partition.index": "3"}, // its first try: no attempt
		"baton.partition#2": {"baton.partition.index": "3", "baton.partition.attempt": "2"},
	} {
		name, n, _ := strings.Cut(name, "#")
		spans := byName(name)
		if n != "" && len(spans) > 0 {
			spans = spans[1:] // the second of the name
		}
		if len(spans) == 0 {
			t.Errorf("no %s span", name)
			continue
		}
		got := map[string]string{}
		for _, kv := range spans[0].Attributes() {
			got[string(kv.Key)] = kv.Value.String()
		}
		if len(got) != len(want) {
			t.Errorf("%s span attributes %v, want %v", name, got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s span attribute %s = %q, want %q", name, k, got[k], v)
			}
		}
	}
}

// TestMetrics: each instrument records under its name and attributes.
func TestMetrics(t *testing.T) {
	tel, _, reader := newSDK(t)
	ctx := context.Background()
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tel.RunStarted(ctx, "tick", "synthetic", "timer")
	tel.RunFinished(ctx, "tick", "synthetic", "succeeded", created, created.Add(90*time.Second))
	tel.OccurrenceLag(ctx, "tick", "synthetic", 2*time.Second)
	tel.PartitionTried(ctx, "synthetic", false, time.Second)
	tel.PartitionsRecorded(ctx, "synthetic", 2, 1)
	tel.PartitionsRecorded(ctx, "synthetic", 0, 0)
	tel.PartitionRetried(ctx, "synthetic")
	tel.PartitionDeadLettered(ctx, "synthetic")
	tel.LeaseAcquired(ctx, telemetry.LeaseRun)
	tel.LeaseLost(ctx, telemetry.LeaseRun)
	tel.LeaseHandedOver(ctx, telemetry.LeaseScheduler)
	tel.HeartbeatDone(ctx, 300*time.Millisecond)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					got[m.Name] += float64(dp.Value)
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					got[m.Name] += dp.Sum
				}
			}
		}
	}
	want := map[string]float64{
		"baton.runs.started": 1, "baton.runs.finished": 1, "baton.run.duration": 90, "baton.occurrence.lag": 2,
		"baton.partition.duration": 1, "baton.partitions.processed": 3, "baton.partitions.failed": 1,
		"baton.partitions.retried": 1, "baton.partitions.dead_lettered": 1, "baton.lease.acquisitions": 1,
		"baton.lease.losses": 1, "baton.lease.handovers": 1, "baton.heartbeat.duration": 0.3,
	}
	for name, v := range want {
		if got[name] != v {
			t.Errorf("%s = %v, want %v", name, got[name], v)
		}
	}
}

// BenchmarkHotPath compares the per-message cost off (nil: the engine before telemetry costs
// the same, a nil check per call) and on (the SDK, every span sampled, no exporter).
func BenchmarkHotPath(b *testing.B) {
	root := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	ctx := context.Background()
	b.Run("off", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			hotPath(ctx, nil, root, root)
		}
	})
	b.Run("on", func(b *testing.B) {
		tel, _, _ := newSDK(b)
		b.ReportAllocs()
		for b.Loop() {
			hotPath(ctx, tel, root, root)
		}
	})
}
