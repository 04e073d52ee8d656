// Package telemetry holds Baton's OpenTelemetry tracer and instruments: the spans that make one
// trace of a run and the counters and histograms of runs, partitions, leases and heartbeats
// (names in docs/configuration.md). A nil *Telemetry is off: every method returns at once,
// without allocating, so the engine calls them unconditionally.
package telemetry

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of Baton's tracer and meter.
const ScopeName = "github.com/batonfn/baton"

// Attribute keys, in the semantic-convention style.
const (
	KeyRun       = attribute.Key("baton.run.id")
	KeySchedule  = attribute.Key("baton.schedule.name")
	KeyJob       = attribute.Key("baton.job.name")
	KeyTrigger   = attribute.Key("baton.run.trigger")
	KeyEpoch     = attribute.Key("baton.run.epoch")
	KeyState     = attribute.Key("baton.run.state")
	KeyPart      = attribute.Key("baton.partition.index")
	KeyFirst     = attribute.Key("baton.partition.first")
	KeyCount     = attribute.Key("baton.partition.count")
	KeyAttempt   = attribute.Key("baton.partition.attempt")
	KeyOutcome   = attribute.Key("baton.partition.outcome")
	KeyBatch     = attribute.Key("baton.plan.batch")
	KeyRound     = attribute.Key("baton.check.round")
	KeyRedrive   = attribute.Key("baton.redrive.round")
	KeyDelivery  = attribute.Key("baton.delivery.count")
	KeyLeaseKind = attribute.Key("baton.lease.kind")
	KeyQueue     = attribute.Key("baton.queue.name")
)

// Partition outcomes (KeyOutcome).
const (
	OutcomeSucceeded = "succeeded"
	OutcomeFailed    = "failed"
)

// Lease kinds (KeyLeaseKind): the scheduler's lease, or a run's planning lease.
const (
	LeaseScheduler = "scheduler"
	LeaseRun       = "run"
)

// Telemetry is Baton's tracer and instruments (see the package doc). Build it with New.
type Telemetry struct {
	tracer trace.Tracer

	runsStarted, runsFinished                     metric.Int64Counter
	partsProcessed, partsFailed, partsRetried     metric.Int64Counter
	partsDeadLettered                             metric.Int64Counter
	leaseAcquired, leaseLost, leaseHandedOver     metric.Int64Counter
	runDuration, occurrenceLag, partitionDuration metric.Float64Histogram
	heartbeatDuration                             metric.Float64Histogram

	jobs sync.Map // job name → *jobAttrs
}

// New returns the telemetry of tp and mp; nil (off) when both are nil. A nil provider turns its
// signal off.
func New(tp trace.TracerProvider, mp metric.MeterProvider) (*Telemetry, error) {
	if tp == nil && mp == nil {
		return nil, nil
	}
	t := &Telemetry{}
	if tp != nil {
		t.tracer = tp.Tracer(ScopeName)
	}
	if mp == nil {
		return t, nil
	}
	m := mp.Meter(ScopeName)
	var errs errList
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs.add(err)
		return c
	}
	seconds := func(name, desc string, bounds ...float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(bounds...))
		errs.add(err)
		return h
	}
	t.runsStarted = counter("baton.runs.started", "{run}", "Runs started (planning handed to a planner), by schedule, job and trigger.")
	t.runsFinished = counter("baton.runs.finished", "{run}", "Runs that reached a final state, by schedule, job and state.")
	t.partsProcessed = counter("baton.partitions.processed", "{partition}", "Partition outcomes recorded in the ledger, by job and outcome.")
	t.partsFailed = counter("baton.partitions.failed", "{partition}", "Partitions recorded as failed, by job.")
	t.partsRetried = counter("baton.partitions.retried", "{partition}", "Retries scheduled for failed tries, by job.")
	t.partsDeadLettered = counter("baton.partitions.dead_lettered", "{message}", "Partition messages failed on their last delivery (sent to the dead-letter or poison queue), by job.")
	t.leaseAcquired = counter("baton.lease.acquisitions", "{lease}", "Leases won, by kind (scheduler or run).")
	t.leaseLost = counter("baton.lease.losses", "{lease}", "Leaderships lost (renewal failed or stalled), by kind.")
	t.leaseHandedOver = counter("baton.lease.handovers", "{lease}", "Leaderships handed over at shutdown, by kind.")
	runBounds := []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400}
	t.runDuration = seconds("baton.run.duration", "Time from a run's creation to its final state.", runBounds...)
	t.occurrenceLag = seconds("baton.occurrence.lag", "Time from a schedule occurrence's due time to its run's first planning.",
		0.1, 0.5, 1, 2, 5, 10, 30, 60, 300, 900)
	t.partitionDuration = seconds("baton.partition.duration", "Time one try of a partition's Process took, by job and outcome.",
		0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300)
	t.heartbeatDuration = seconds("baton.heartbeat.duration", "Time one heartbeat took (scheduling, supervision, retention).",
		0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
	return t, errs.err()
}

// On reports whether any signal is on.
func (t *Telemetry) On() bool { return t != nil }

// Run describes a run on spans and metrics.
type Run struct {
	ID, Schedule, Job string
	Epoch             int64
}

func (r Run) attrs(extra ...attribute.KeyValue) []attribute.KeyValue {
	out := make([]attribute.KeyValue, 0, 4+len(extra))
	out = append(out, KeyRun.String(r.ID), KeyJob.String(r.Job), KeyEpoch.Int64(r.Epoch))
	if r.Schedule != "" {
		out = append(out, KeySchedule.String(r.Schedule))
	}
	return append(out, extra...)
}

// runMetricAttrs are a run's low-cardinality attributes (no run ID).
func runMetricAttrs(schedule, job string, extra ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributes(append([]attribute.KeyValue{KeySchedule.String(schedule), KeyJob.String(job)}, extra...)...)
}

// Span is a started span; the zero Span (telemetry off) does nothing.
type Span struct{ s trace.Span }

// End ends the span, with err as its error status when not nil.
func (s Span) End(err error) {
	if s.s == nil {
		return
	}
	if err != nil {
		s.s.RecordError(err)
		s.s.SetStatus(codes.Error, err.Error())
	}
	s.s.End()
}

// EndTry ends a partition's span with its outcome as the status: ok, or err as the error.
func (s Span) EndTry(err error) {
	if s.s == nil {
		return
	}
	if err == nil {
		s.s.SetStatus(codes.Ok, "")
	}
	s.End(err)
}

// SetState records a run's state on the span.
func (s Span) SetState(state string) {
	if s.s != nil {
		s.s.SetAttributes(KeyState.String(state))
	}
}

// SetEpoch records the lease epoch the span's work ran under.
func (s Span) SetEpoch(epoch int64) {
	if s.s != nil {
		s.s.SetAttributes(KeyEpoch.Int64(epoch))
	}
}

// Traceparent is the W3C traceparent of the span in ctx ("" when there is none, or telemetry is
// off): what a message or a manifest carries so that another instance continues the trace.
func (t *Telemetry) Traceparent(ctx context.Context) string {
	if t == nil || t.tracer == nil {
		return ""
	}
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	var c carrier
	propagation.TraceContext{}.Inject(ctx, &c)
	return c.traceparent
}

// TraceparentLen is the length of a W3C traceparent (version 00).
const TraceparentLen = 55

// carrier carries the traceparent alone (a trace state would make messages larger).
type carrier struct{ traceparent string }

func (c *carrier) Get(key string) string {
	if key == "traceparent" {
		return c.traceparent
	}
	return ""
}

func (c *carrier) Set(key, value string) {
	if key == "traceparent" {
		c.traceparent = value
	}
}

func (c *carrier) Keys() []string { return []string{"traceparent"} }

// remote is the span context of traceparent (invalid when it does not parse).
func remote(traceparent string) trace.SpanContext {
	if traceparent == "" {
		return trace.SpanContext{}
	}
	c := carrier{traceparent: traceparent}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), &c))
}

// start starts span name: a child of parent (a traceparent; the span in ctx when empty or
// invalid, a new root when newRoot), linked to link when it is a valid traceparent.
func (t *Telemetry) start(ctx context.Context, name, parent, link string, newRoot bool, kind trace.SpanKind, attrs []attribute.KeyValue) (context.Context, Span) {
	opts := []trace.SpanStartOption{trace.WithAttributes(attrs...), trace.WithSpanKind(kind)}
	if p := remote(parent); p.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, p)
	} else if newRoot {
		if cur := trace.SpanContextFromContext(ctx); cur.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: cur}))
		}
		opts = append(opts, trace.WithNewRoot())
	}
	if l := remote(link); l.IsValid() && l.SpanID() != remote(parent).SpanID() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: l}))
	}
	ctx, s := t.tracer.Start(ctx, name, opts...)
	return ctx, Span{s}
}

func (t *Telemetry) tracing() bool { return t != nil && t.tracer != nil }

// StartHeartbeat starts the span of one heartbeat (a root of its own: each run decided in it
// starts a trace of its own, linked to it).
func (t *Telemetry) StartHeartbeat(ctx context.Context) (context.Context, Span) {
	if !t.tracing() {
		return ctx, Span{}
	}
	return t.start(ctx, "baton.heartbeat", "", "", true, trace.SpanKindInternal, nil)
}

// StartRun starts the root span of a new run's trace, the decision to start it (a heartbeat's
// for an occurrence, or a manual request's), linked to the span in ctx (the heartbeat's).
func (t *Telemetry) StartRun(ctx context.Context, r Run, trigger string) (context.Context, Span) {
	if !t.tracing() {
		return ctx, Span{}
	}
	return t.start(ctx, "baton.run.start", "", "", true, trace.SpanKindInternal, r.attrs(KeyTrigger.String(trigger)))
}

// StartCheck starts the span of a check message's handling (or a heartbeat's drive of a run),
// a child of the run's root (root, from the manifest), linked to the span that sent it (sender).
func (t *Telemetry) StartCheck(ctx context.Context, root, sender string, r Run, round int) (context.Context, Span) {
	if !t.tracing() {
		return ctx, Span{}
	}
	return t.start(ctx, "baton.check", root, sender, root == "", trace.SpanKindConsumer, r.attrs(KeyRound.Int(round)))
}

// StartSlice starts the span of one planning slice under the run's lease (child of ctx's span,
// or of root when ctx has none).
func (t *Telemetry) StartSlice(ctx context.Context, root string, r Run, next int) (context.Context, Span) {
	if !t.tracing() {
		return ctx, Span{}
	}
	parent := ""
	if !trace.SpanContextFromContext(ctx).IsValid() {
		parent = root
	}
	return t.start(ctx, "baton.plan.slice", parent, "", false, trace.SpanKindInternal, r.attrs(KeyFirst.Int(next)))
}

// StartBatch starts the span of one plan batch's planning and send: partitions first to
// first+count-1. Its traceparent goes into the batch's messages.
func (t *Telemetry) StartBatch(ctx context.Context, r Run, batch, first, count int) (context.Context, Span) {
	if !t.tracing() {
		return ctx, Span{}
	}
	return t.start(ctx, "baton.enqueue.batch", "", "", false, trace.SpanKindProducer,
		r.attrs(KeyBatch.Int(batch), KeyFirst.Int(first), KeyCount.Int(count)))
}

// Message describes a partition message for its span.
type Message struct {
	First, Count, Attempt, Redrive, Delivery int
}

// StartMessage starts the span of one delivery of a partition message (one partition or a
// bundle) on the instance that processes it: a child of sender, the span that sent it (an
// enqueue batch's), except for a retry, a split bundle's partition or a redriven one, which is
// a child of the run's root and linked to sender.
func (t *Telemetry) StartMessage(ctx context.Context, root, sender string, r Run, m Message) (context.Context, Span) {
	if !t.tracing() {
		return ctx, Span{}
	}
	name, parent, link := "baton.bundle", sender, ""
	if m.Count <= 1 {
		name = "baton.partition.message"
	}
	if m.Attempt > 1 || m.Redrive > 0 || sender == "" {
		parent, link = root, sender
	}
	attrs := r.attrs(KeyFirst.Int(m.First), KeyCount.Int(max(m.Count, 1)), KeyAttempt.Int(max(m.Attempt, 1)), KeyDelivery.Int(m.Delivery))
	if m.Redrive > 0 {
		attrs = append(attrs, KeyRedrive.Int(m.Redrive))
	}
	return t.start(ctx, name, parent, link, false, trace.SpanKindConsumer, attrs)
}

// StartPartition starts the span of one try of one partition (child of the message's span in
// ctx): the context Process gets, so a job's own spans nest under it. It carries the partition's
// index, and its try when above 1 (its outcome is its status: see EndTry); the run's attributes
// are on the message's span. Each attribute costs per partition, on the span and in the export.
func (t *Telemetry) StartPartition(ctx context.Context, part, attempt int) (context.Context, Span) {
	if !t.tracing() {
		return ctx, Span{}
	}
	attrs := trace.WithAttributes(KeyPart.Int(part))
	if attempt > 1 {
		attrs = trace.WithAttributes(KeyPart.Int(part), KeyAttempt.Int(attempt))
	}
	ctx, s := t.tracer.Start(ctx, "baton.partition", attrs)
	return ctx, Span{s}
}

// StartFold starts the span of folding a message's results into the run's partials and
// counting them done.
func (t *Telemetry) StartFold(ctx context.Context, r Run, results int) (context.Context, Span) {
	if !t.tracing() {
		return ctx, Span{}
	}
	return t.start(ctx, "baton.fold", "", "", false, trace.SpanKindInternal, r.attrs(KeyCount.Int(results)))
}

// StartFinish starts the span of a run's aggregation into its report (a child of the run's
// root, linked to the caller's span in ctx).
func (t *Telemetry) StartFinish(ctx context.Context, root string, r Run) (context.Context, Span) {
	if !t.tracing() {
		return ctx, Span{}
	}
	caller := t.Traceparent(ctx)
	return t.start(ctx, "baton.run.finish", root, caller, root == "", trace.SpanKindInternal, r.attrs())
}

// StartRedrive starts the span of a redrive request's round (a child of the run's root).
func (t *Telemetry) StartRedrive(ctx context.Context, root string, r Run, round int) (context.Context, Span) {
	if !t.tracing() {
		return ctx, Span{}
	}
	caller := t.Traceparent(ctx)
	return t.start(ctx, "baton.redrive", root, caller, root == "", trace.SpanKindInternal, r.attrs(KeyRedrive.Int(round)))
}

// RunStarted counts a run handed to a planner.
func (t *Telemetry) RunStarted(ctx context.Context, schedule, job, trigger string) {
	if t == nil || t.runsStarted == nil {
		return
	}
	t.runsStarted.Add(ctx, 1, runMetricAttrs(schedule, job, KeyTrigger.String(trigger)))
}

// RunFinished counts a run's move to its final state (once per run: by the write that made
// it final) and records its duration from created.
func (t *Telemetry) RunFinished(ctx context.Context, schedule, job, state string, created, finished time.Time) {
	if t == nil || t.runsFinished == nil {
		return
	}
	opt := runMetricAttrs(schedule, job, KeyState.String(state))
	t.runsFinished.Add(ctx, 1, opt)
	if !created.IsZero() && !finished.Before(created) {
		t.runDuration.Record(ctx, finished.Sub(created).Seconds(), opt)
	}
}

// OccurrenceLag records how late a schedule's occurrence started planning.
func (t *Telemetry) OccurrenceLag(ctx context.Context, schedule, job string, lag time.Duration) {
	if t == nil || t.occurrenceLag == nil {
		return
	}
	t.occurrenceLag.Record(ctx, max(lag, 0).Seconds(), runMetricAttrs(schedule, job))
}

// PartitionTried records one try of Process.
func (t *Telemetry) PartitionTried(ctx context.Context, job string, ok bool, d time.Duration) {
	if t == nil || t.partitionDuration == nil {
		return
	}
	t.partitionDuration.Record(ctx, d.Seconds(), t.jobAttrs(job).record[b2i(ok)]...)
}

// PartitionsRecorded counts outcomes this process recorded in the ledger, succeeded and failed
// (a duplicate delivery that found another's counts nothing): once per message.
func (t *Telemetry) PartitionsRecorded(ctx context.Context, job string, succeeded, failed int) {
	if t == nil || t.partsProcessed == nil || succeeded+failed == 0 {
		return
	}
	a := t.jobAttrs(job)
	if succeeded > 0 {
		t.partsProcessed.Add(ctx, int64(succeeded), a.add[1]...)
	}
	if failed > 0 {
		t.partsProcessed.Add(ctx, int64(failed), a.add[0]...)
		t.partsFailed.Add(ctx, int64(failed), a.job...)
	}
}

// PartitionRetried counts a retry scheduled.
func (t *Telemetry) PartitionRetried(ctx context.Context, job string) {
	if t == nil || t.partsRetried == nil {
		return
	}
	t.partsRetried.Add(ctx, 1, t.jobAttrs(job).job...)
}

// PartitionDeadLettered counts a partition message failed on its last delivery.
func (t *Telemetry) PartitionDeadLettered(ctx context.Context, job string) {
	if t == nil || t.partsDeadLettered == nil {
		return
	}
	t.partsDeadLettered.Add(ctx, 1, t.jobAttrs(job).job...)
}

// jobAttrs are a job's partition metric attributes, made once per job (a partition's
// measurements then build no attribute set): by job, and by job and outcome (ok: succeeded).
type jobAttrs struct {
	job    []metric.AddOption
	add    [2][]metric.AddOption
	record [2][]metric.RecordOption
}

func (t *Telemetry) jobAttrs(job string) *jobAttrs {
	if v, ok := t.jobs.Load(job); ok {
		return v.(*jobAttrs)
	}
	a := &jobAttrs{job: []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(KeyJob.String(job)))}}
	for i, ok := range []bool{false, true} {
		opt := metric.WithAttributeSet(attribute.NewSet(KeyJob.String(job), KeyOutcome.String(outcome(ok))))
		a.add[i], a.record[i] = []metric.AddOption{opt}, []metric.RecordOption{opt}
	}
	v, _ := t.jobs.LoadOrStore(job, a)
	return v.(*jobAttrs)
}

func b2i(ok bool) int {
	if ok {
		return 1
	}
	return 0
}

// LeaseAcquired, LeaseLost and LeaseHandedOver count the lease events of kind.
func (t *Telemetry) LeaseAcquired(ctx context.Context, kind string) { t.lease(ctx, t.acq(), kind) }

// LeaseLost counts a leadership lost (renewal failed, or the task stalled).
func (t *Telemetry) LeaseLost(ctx context.Context, kind string) { t.lease(ctx, t.lost(), kind) }

// LeaseHandedOver counts a leadership ended by a graceful handover.
func (t *Telemetry) LeaseHandedOver(ctx context.Context, kind string) { t.lease(ctx, t.handed(), kind) }

func (t *Telemetry) acq() metric.Int64Counter {
	if t == nil {
		return nil
	}
	return t.leaseAcquired
}

func (t *Telemetry) lost() metric.Int64Counter {
	if t == nil {
		return nil
	}
	return t.leaseLost
}

func (t *Telemetry) handed() metric.Int64Counter {
	if t == nil {
		return nil
	}
	return t.leaseHandedOver
}

func (t *Telemetry) lease(ctx context.Context, c metric.Int64Counter, kind string) {
	if c == nil {
		return
	}
	c.Add(ctx, 1, metric.WithAttributes(KeyLeaseKind.String(kind)))
}

// HeartbeatDone records a heartbeat's duration.
func (t *Telemetry) HeartbeatDone(ctx context.Context, d time.Duration) {
	if t == nil || t.heartbeatDuration == nil {
		return
	}
	t.heartbeatDuration.Record(ctx, d.Seconds())
}

func outcome(ok bool) string {
	if ok {
		return OutcomeSucceeded
	}
	return OutcomeFailed
}

// WatchBacklog reports depth(ctx), the messages waiting on queue, as the gauge
// baton.queue.backlog at each metric collection (a transport that can tell: the Storage queue's
// approximate count). An error skips that collection's value.
func (t *Telemetry) WatchBacklog(meter metric.MeterProvider, queue string, depth func(ctx context.Context) (int64, error)) error {
	if t == nil || meter == nil {
		return nil
	}
	m := meter.Meter(ScopeName)
	attrs := metric.WithAttributes(KeyQueue.String(queue))
	_, err := m.Int64ObservableGauge("baton.queue.backlog", metric.WithUnit("{message}"),
		metric.WithDescription("Messages waiting on a queue, as the transport approximates it, by queue."),
		metric.WithInt64Callback(func(ctx context.Context, o metric.Int64Observer) error {
			n, err := depth(ctx)
			if err != nil {
				return nil // no value this time; the exporter's error handler needs no noise
			}
			o.Observe(n, attrs)
			return nil
		}))
	return err
}

type errList []error

func (e *errList) add(err error) {
	if err != nil {
		*e = append(*e, err)
	}
}

func (e errList) err() error { return errors.Join(e...) }

// ContextWithTraceparent returns ctx carrying traceparent (a caller's W3C trace context, as an
// HTTP request's traceparent header brings it) as its remote span, so that a run started there
// links to the caller's trace; ctx itself when traceparent does not parse.
func ContextWithTraceparent(ctx context.Context, traceparent string) context.Context {
	if sc := remote(traceparent); sc.IsValid() {
		return trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	return ctx
}
