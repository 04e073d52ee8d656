package work

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/limit"
	"github.com/batonfn/baton/internal/engine/telemetry"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/internal/lib/parallel"
)

// Sender is the part of a transport the worker needs to schedule retries.
type Sender interface {
	Send(ctx context.Context, msgs []transport.Message) error
}

// Defaults for the Worker's zero-valued fields.
const (
	// DefaultStaleClaim is how long an unfinished report claim may go unrenewed before
	// another worker takes the aggregation over (its aggregator is presumed dead). The
	// aggregator renews its claim every third of it, however long the aggregation takes, so it
	// bounds how late a run finishes after its aggregator crashed, not how long Aggregate may
	// run. A takeover of a live but stalled aggregator costs a second Aggregate call, never a
	// second report (the report is written under the claim's ETag). The app sets it to the
	// lease duration, the same bound on a dead leader; the default is the default lease's.
	DefaultStaleClaim = config.DefaultLeaseDuration
	// DefaultRecordTimeout bounds the storage calls that record a partition's outcome. They
	// run on a context detached from the invocation's, so a Process that used up the deadline
	// still gets its result (or its failure, on the last delivery) written.
	DefaultRecordTimeout = 20 * time.Second
	// DefaultReadConcurrency is how many results the aggregator reads at once.
	DefaultReadConcurrency = 16
	// MaxReportFailures caps the failed partitions listed in a report (the counts are exact).
	MaxReportFailures = 100
)

// ErrGaveUp is returned by HandlePartition when a partition failed on its last allowed
// delivery: a failure result was recorded (the run can finish as partial) and the invocation
// must fail so the message goes to the dead-letter or poison queue.
var ErrGaveUp = errors.New("gave up after the last delivery")

// Delivery describes one delivery of a message, from the trigger metadata.
type Delivery struct {
	MessageID string
	// Count is the 1-based delivery count: Service Bus DeliveryCount or Storage-queue
	// DequeueCount. Values below 1 are treated as 1.
	Count int
	// Try is the 1-based try of this delivery: an invocation that meets a storage or queue
	// outage keeps its message and handles it again, so a try after the first may find the
	// work of the one before it, as a later delivery may. Values below 1 are treated as 1.
	Try int
}

// WorkerConfig configures a Worker. Store and Jobs are required; the rest have defaults.
type WorkerConfig struct {
	Store Ledger
	Jobs  *Registry
	// Holder identifies this process in results and reports.
	Holder ledger.Holder
	// MaxDeliveries is the queue's max delivery count (BATON_MAX_DELIVERIES): on that
	// delivery a partition that cannot be retried otherwise is recorded as failed. Required.
	MaxDeliveries int
	// Retries sends the scheduled retry of a partition whose Process failed, under its job's
	// RetryPolicy (Registry.Retry); the app passes the work queue's sender. Nil leaves
	// retries to the host's redelivery: the failure is recorded on delivery MaxDeliveries.
	Retries Sender
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives structured logs (default: discarded).
	Logger *slog.Logger
	// StaleClaim, RecordTimeout, ReadConcurrency: see the Default* constants.
	StaleClaim      time.Duration
	RecordTimeout   time.Duration
	ReadConcurrency int
	// StopPoll: see DefaultStopPoll.
	StopPoll time.Duration
	// Telemetry traces each delivery and partition and counts their outcomes (nil: off).
	Telemetry *telemetry.Telemetry
	// CopyTTL bounds how old the process's copy of a planned run's manifest may be, so a run
	// stopped (Manifest.Stop) may still see partitions start here this long after. The app
	// sets it to the lease duration. Default ManifestCopyTTL.
	CopyTTL time.Duration
	// Limiter keeps the limits jobs run under (Registry.SetLimit); nil, or nil Retries, runs
	// every job unlimited.
	Limiter *limit.Limiter
}

// Worker processes partition messages idempotently and finishes runs exactly once. It is safe
// for concurrent use.
type Worker struct {
	cfg       WorkerConfig
	salt      [16]byte   // random per process: see claimToken
	finishing finishGate // runs this process is finishing: one attempt at a time each
	ended     endedRuns  // runs whose end this process logged before settling them
	manifests manifestCache
	stops     stopWatch // runs with deliveries in flight here, watched for a Stop
	facts     runFacts  // what this process has learnt of runs that stays true
}

// NewWorker validates cfg and fills in its defaults.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	var errs []error
	if cfg.Store == nil || cfg.Jobs == nil {
		errs = append(errs, errors.New("a store and a jobs registry are required"))
	}
	if cfg.MaxDeliveries < 1 {
		errs = append(errs, fmt.Errorf("MaxDeliveries %d: want the queue's max delivery count, at least 1", cfg.MaxDeliveries))
	}
	if cfg.StaleClaim < 0 || cfg.RecordTimeout < 0 || cfg.ReadConcurrency < 0 || cfg.StopPoll < 0 || cfg.CopyTTL < 0 {
		errs = append(errs, errors.New("StaleClaim, RecordTimeout, ReadConcurrency, StopPoll and CopyTTL must not be negative"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("worker config: %w", err)
	}
	cfg.StaleClaim = orDefault(cfg.StaleClaim, DefaultStaleClaim)
	cfg.RecordTimeout = orDefault(cfg.RecordTimeout, DefaultRecordTimeout)
	cfg.ReadConcurrency = orDefault(cfg.ReadConcurrency, DefaultReadConcurrency)
	cfg.StopPoll = orDefault(cfg.StopPoll, DefaultStopPoll)
	cfg.CopyTTL = orDefault(cfg.CopyTTL, ManifestCopyTTL)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	w := &Worker{cfg: cfg, facts: newRunFacts()}
	w.manifests.ttl = cfg.CopyTTL
	_, _ = rand.Read(w.salt[:])
	return w, nil
}

// Holder is the identity this worker writes into results and reports.
func (w *Worker) Holder() ledger.Holder { return w.cfg.Holder }

// MaxDeliveries is the delivery on which a failing partition is recorded as failed.
func (w *Worker) MaxDeliveries() int { return w.cfg.MaxDeliveries }

func (w *Worker) now() time.Time { return w.cfg.Now().UTC() }

func (w *Worker) logger() *slog.Logger { return w.cfg.Logger }

func (w *Worker) maxDeliveries() int { return w.cfg.MaxDeliveries }

func orDefault[T int | time.Duration](v, d T) T {
	if v > 0 {
		return v
	}
	return d
}

// HandlePartition processes one delivery of a partition message (one partition or a bundle),
// recording each partition's outcome. It returns nil when every outcome is recorded or settled
// (a retry scheduled, a stale message or final run dropped, a redelivered bundle split); an
// error wrapping ErrMalformed for a message that can never be processed (dead-letter it); one
// wrapping ErrGaveUp when the last allowed delivery failed (its failure recorded: fail the
// invocation so it dead-letters); any other error is transient: fail it so the host retries.
func (w *Worker) HandlePartition(ctx context.Context, env Envelope, d Delivery) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("partition %s/%d: panic: %v", env.Run, env.Part, r)
		}
	}()
	if err := env.Validate(); err != nil {
		return err
	}
	if env.Kind != KindPartition {
		return fmt.Errorf("%w: kind %q is not a partition message", ErrMalformed, env.Kind)
	}
	delivery := max(d.Count, 1)
	base := w.logger().With("run", env.Run, "epoch", env.Epoch, "delivery", delivery, "message", d.MessageID)
	log := base.With("part", env.Part, "try", max(env.Attempt, 1))
	if env.Count > 1 {
		log = base.With("part", env.Part, "count", env.Count)
	}

	// 1. The manifest decides whether the message is current.
	m, err := w.manifest(ctx, env.Run)
	if errors.Is(err, ledger.ErrNotFound) {
		// The leader creates the manifest before it enqueues anything.
		return fmt.Errorf("%w: run %s has no manifest", ErrMalformed, env.Run)
	}
	if err != nil {
		return fmt.Errorf("partition %s/%d: %w", env.Run, env.Part, err)
	}
	if env.Redrive > m.Round {
		// A copy from before the redrive that sent this message: read the run again.
		if m, err = w.cfg.Store.ReadManifest(ctx, env.Run); err != nil {
			return fmt.Errorf("partition %s/%d: %w", env.Run, env.Part, err)
		}
		w.manifests.put(m, w.now())
	}
	last := env.Part + max(env.Count, 1) - 1
	switch {
	case m.PlanDone && last >= m.Partitions:
		return fmt.Errorf("%w: partition %d out of range: run %s has %d partitions", ErrMalformed, last, env.Run, m.Partitions)
	case env.Epoch < m.SegmentEpoch(last):
		// Segments start at plan-batch boundaries and a bundle lies within one batch, so a
		// bundle is current or stale as a whole.
		log.Info("stale partition message dropped", "segmentEpoch", m.SegmentEpoch(last))
		return nil
	case m.State.Final():
		log.Info("run already finished; partition message dropped", "state", m.State)
		return nil
	case m.Stop != nil:
		log.Info("run stopped; partition message dropped", "stoppedBy", m.Stop.By, "state", m.Stop.State)
		return nil
	case env.Redrive != m.Round:
		log.Info("partition message of another redrive round dropped", "redrive", env.Redrive, "round", m.Round)
		return nil
	}
	job, err := w.cfg.Jobs.Lookup(m.Job)
	if err != nil {
		return fmt.Errorf("%w: run %s: %w", ErrMalformed, env.Run, err)
	}
	if w.cfg.Telemetry.On() {
		var span telemetry.Span
		ctx, span = w.cfg.Telemetry.StartMessage(ctx, m.Trace, env.Trace, telemetry.Run{ID: m.RunID, Schedule: m.Schedule, Job: m.Job, Epoch: env.Epoch},
			telemetry.Message{First: env.Part, Count: env.Count, Attempt: env.Attempt, Redrive: env.Redrive, Delivery: delivery})
		defer func() {
			if errors.Is(err, ErrGaveUp) {
				w.cfg.Telemetry.PartitionDeadLettered(ctx, m.Job)
			}
			span.End(err)
		}()
	}
	// A message of the last plan batch carries the run's partition count: this process's
	// other deliveries of the run may use it before their copy of the manifest says so.
	w.facts.learnCount(env.Run, env.Parts)
	if env.Redrive > 0 {
		return w.handleRedrive(ctx, &m, job, env, delivery, log)
	}
	if env.Count > 1 && delivery > 1 && w.cfg.Retries != nil {
		return w.split(ctx, &m, job, env, delivery, log)
	}

	// 2. Each partition: process it, unless an earlier delivery recorded its outcome.
	// 3. Record the outcomes together: one block per span (the rule of ledger.Block), then
	// schedule the retries, whose partitions then record their own. The recording calls run
	// on contexts detached from the invocation's (recording), so a Process that used up the
	// deadline still gets its result (or its failure) written.
	// A job under a limit runs the message's partitions under a grant, or sends it back.
	hold, sentBack, err := w.acquire(ctx, m.Job, env, log)
	if err != nil || sentBack {
		return err
	}
	known, err := w.recordedBefore(ctx, env, delivery)
	if err != nil {
		if hold != nil {
			w.closeHold(ctx, hold, log)
		}
		return fmt.Errorf("partition %s/%d: %w", env.Run, env.Part, err)
	}
	log.Debug("processing partitions", "partitions", max(env.Count, 1))
	wctx, unwatch := w.watch(ctx, env.Run) // cancelled should the run be stopped meanwhile
	outs := w.runAll(wctx, &m, job, env, delivery, known, hold, base, log)
	unwatch()
	if hold != nil {
		w.closeHold(ctx, hold, log)
	}
	rctx, cancel := w.recording(ctx) // from now: Process may have used up the deadline
	defer cancel()
	w.record(rctx, ctx, m.Job, env, known, delivery, outs, log)

	// 4. Count what was recorded: fold it into the partials, append the done records.
	var (
		stored []ledger.Result
		errs   []error
	)
	for _, o := range outs {
		if o.stored != nil {
			stored = append(stored, *o.stored)
		}
		errs = append(errs, o.gaveUp, o.err)
	}
	errs = append(errs, w.count(rctx, ctx, &m, job, env, stored, log), w.spend(rctx, &m, stored, log))
	return errors.Join(errs...)
}

// count folds recorded results into the partials and appends their done records.
func (w *Worker) count(rctx, ctx context.Context, m *ledger.Manifest, job Job, env Envelope, stored []ledger.Result, log *slog.Logger) (err error) {
	if w.cfg.Telemetry.On() && len(stored) > 0 {
		var span telemetry.Span
		rctx, span = w.cfg.Telemetry.StartFold(rctx, telemetry.Run{ID: m.RunID, Schedule: m.Schedule, Job: m.Job, Epoch: env.Epoch}, len(stored))
		defer func() { span.End(err) }()
	}
	if err := w.fold(rctx, m, job, stored); err != nil {
		return fmt.Errorf("partition %s/%d: %w", env.Run, env.Part, err)
	}
	return w.complete(rctx, ctx, m, env, stored, log)
}

// outcome is what handleOne did with one partition of a message.
type outcome struct {
	// stored is the partition's recorded result (this delivery's or an earlier one's), to be
	// folded and counted; nil when nothing is recorded (a retry is scheduled, or err).
	stored *ledger.Result
	// record is the result this delivery came to, to be recorded (then stored).
	record *ledger.Result
	// retry is the next try to schedule once the span's block exists.
	retry *retryPlan
	// gaveUp wraps ErrGaveUp when the partition failed on its last allowed delivery.
	gaveUp error
	// err is a failure that needs the message again.
	err error
}

// retryPlan is a failed try whose next try is to be scheduled.
type retryPlan struct {
	one    Envelope
	try    int
	res    ledger.Result // the failure to record should the retry not be scheduled on the last delivery
	policy RetryPolicy
	cause  error
	log    *slog.Logger
	job    string // the run's job
	trace  string // the failed try's span: the retry links to it
	// wait, for a partition its limit sends back (no try spent), is its delay.
	wait time.Duration
}

// recordedBefore reads, on a redelivery or a retry of a message whose partitions record in
// blocks, the blocks of its spans that exist (absent spans are not in the map): what an
// earlier delivery recorded.
func (w *Worker) recordedBefore(ctx context.Context, env Envelope, delivery int) (map[ledger.Span]*ledger.Block, error) {
	known := map[ledger.Span]*ledger.Block{}
	if env.Block == 0 || (delivery <= 1 && max(env.Attempt, 1) <= 1) {
		return known, nil
	}
	ctx, cancel := w.recording(ctx) // see handleOne's read of a result
	defer cancel()
	sp := ledger.SpanOf(env.Part, env.Block)
	b, err := w.cfg.Store.ReadBlock(ctx, env.Run, sp)
	switch {
	case err == nil:
		known[sp] = &b
	case !errors.Is(err, ledger.ErrNotFound):
		return nil, err
	}
	return known, nil
}

// record records the outcomes this delivery came to, per span, then schedules the retries.
func (w *Worker) record(rctx, ctx context.Context, job string, env Envelope, known map[ledger.Span]*ledger.Block, delivery int, outs []outcome, log *slog.Logger) {
	singles := env.Singles()
	spans := map[ledger.Span][]int{} // span → positions in outs with a result to record or a retry
	var order []ledger.Span
	var recorded tally
	for k, o := range outs {
		if o.record == nil && o.retry == nil {
			continue
		}
		sp := ledger.SpanOf(singles[k].Part, env.Block)
		if _, ok := spans[sp]; !ok {
			order = append(order, sp)
		}
		spans[sp] = append(spans[sp], k)
	}
	for _, sp := range order {
		var rs []ledger.Result
		for _, k := range spans[sp] {
			if outs[k].record != nil {
				rs = append(rs, *outs[k].record)
			}
		}
		taken := known[sp]
		if !sp.IsZero() && taken == nil && len(rs) == 0 {
			// Only retries: the span's block must exist before they record their own.
			b, err := ledger.TakeSpan(rctx, w.cfg.Store, env.Run, sp, nil)
			if err != nil {
				for _, k := range spans[sp] {
					outs[k].retry, outs[k].err = nil, fmt.Errorf("partition %s/%d: %w", env.Run, singles[k].Part, err)
				}
				continue
			}
			taken = &b
		}
		recs, b := ledger.Record(rctx, w.cfg.Store, env.Run, sp, rs, taken)
		if b != nil {
			taken = b
		}
		j := 0
		for _, k := range spans[sp] {
			o := &outs[k]
			if o.record != nil {
				w.settleRecorded(o, recs[j], &recorded, log)
				j++
				continue
			}
			if taken != nil {
				if r, ok := taken.Find(singles[k].Part); ok {
					// Another delivery recorded the partition in the block first.
					o.stored, o.retry = &r, nil
				}
			}
		}
	}
	recorded.report(rctx, w.cfg.Telemetry, job)
	for k := 0; k < len(outs); k++ {
		p := outs[k].retry
		if p == nil {
			continue
		}
		if n := w.sendBackRun(ctx, singles, outs, k); n > 1 {
			k += n - 1
			continue
		}
		outs[k].retry = nil
		w.scheduleRetry(rctx, ctx, &outs[k], p, delivery)
	}
}

// settleRecorded turns a recording into the outcome: the stored result, or the error. It
// counts the result in t when it is this delivery's own.
func (w *Worker) settleRecorded(o *outcome, rec ledger.Recorded, t *tally, log *slog.Logger) {
	mine := o.record
	o.record = nil
	if rec.Err != nil {
		o.err = fmt.Errorf("partition %s/%d: %w", mine.Run, mine.Index, rec.Err)
		return
	}
	r := rec.Result
	if r.Worker != mine.Worker || !r.Started.Equal(mine.Started) || r.Attempts != mine.Attempts {
		// Another delivery recorded the result first; it may have crashed before counting it.
		// Its outcome stands, so this delivery has nothing to give up on.
		log.Info("duplicate delivery: another delivery recorded the result first", "part", mine.Index)
		o.gaveUp = nil
	} else if r.OK {
		t.succeeded++
	} else {
		t.failed++
	}
	o.stored = &r
}

// tally counts the outcomes a delivery recorded, for one telemetry measurement per message.
type tally struct{ succeeded, failed int }

// report counts the tally in the job's metrics.
func (t tally) report(ctx context.Context, tel *telemetry.Telemetry, job string) {
	tel.PartitionsRecorded(ctx, job, t.succeeded, t.failed)
}

// scheduleRetry sends a retry planned by handleOne; one that cannot be sent on the message's
// last delivery records the failure instead.
func (w *Worker) scheduleRetry(rctx, ctx context.Context, o *outcome, p *retryPlan, delivery int) {
	one := p.one
	one.Trace = p.trace
	if p.wait > 0 {
		one.Block = 0 // the span's block exists: see record
		if o.err = w.sendBack(ctx, one, p.wait); o.err == nil {
			p.log.Info("partition sent back to wait for its limit", "reason", p.cause, "wait", p.wait.String())
		}
		return
	}
	serr := w.retry(ctx, one, p.try, p.res.Errors, p.policy, p.log, p.cause)
	if serr == nil {
		w.cfg.Telemetry.PartitionRetried(ctx, p.job)
	}
	if serr == nil || delivery < w.maxDeliveries() {
		o.err = serr
		return
	}
	p.log.Error("partition failed and its retry could not be scheduled on its last delivery; recording the failure", "err", p.cause, "sendErr", serr)
	res := p.res
	res.Error = fmt.Sprintf("%s (retry not scheduled: %s)", ledger.Cause(p.cause), ledger.Cause(serr))
	o.record, o.gaveUp = &res, giveUp(p.one, res.Attempts, p.cause)
	// The span's block exists (record took it before any retry): the result is its own.
	recs, _ := ledger.Record(rctx, w.cfg.Store, res.Run, ledger.Span{}, []ledger.Result{res}, nil)
	var t tally
	w.settleRecorded(o, recs[0], &t, p.log)
	t.report(rctx, w.cfg.Telemetry, p.job)
}

// runAll runs the message's partitions, a bundle's up to BundleConcurrency at once, and
// returns what each came to, in order. A bundle's partition not yet started when the
// invocation's context ends is not run: it needs the message again (a bundle's redelivery is
// split into single partitions). On the message's last delivery it runs anyway, and its
// failure is handled like any other (a retry scheduled, or the failure recorded).
func (w *Worker) runAll(ctx context.Context, m *ledger.Manifest, job Job, env Envelope, delivery int, known map[ledger.Span]*ledger.Block, hold *limit.Hold, base, log *slog.Logger) []outcome {
	singles := env.Singles()
	outs := make([]outcome, len(singles))
	ctx, cancel := underLimit(ctx, hold)
	defer cancel()
	if len(singles) == 1 {
		o, done := w.start(ctx, hold, singles[0], log)
		if o != nil {
			outs[0] = *o
			return outs
		}
		defer done()
		outs[0] = w.handleOne(ctx, m, job, singles[0], delivery, known, hold, log)
		return outs
	}
	parallel.Each(len(singles), BundleConcurrency, func(k int) (next bool) {
		one := singles[k]
		defer func() {
			if r := recover(); r != nil {
				outs[k], next = outcome{err: fmt.Errorf("partition %s/%d: panic: %v", one.Run, one.Part, r)}, true
			}
		}()
		if stoppedCtx(ctx) {
			return true // the run was stopped: nothing to record
		}
		if ctx.Err() != nil && delivery < w.maxDeliveries() {
			outs[k] = outcome{err: fmt.Errorf("partition %s/%d: not started: %w", one.Run, one.Part, context.Cause(ctx))}
			return true
		}
		plog := base.With("part", one.Part, "bundle", env.Part, "try", 1)
		o, done := w.start(ctx, hold, one, plog)
		if o != nil {
			outs[k] = *o
			return true
		}
		defer done()
		outs[k] = w.handleOne(ctx, m, job, one, delivery, known, hold, plog)
		return true
	})
	return outs
}

// recording returns the context of the storage calls that record an outcome: detached from
// the invocation's, so a Process that used up its deadline still gets its outcome written,
// and bounded by RecordTimeout from now, when the recording starts.
func (w *Worker) recording(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), w.cfg.RecordTimeout)
}

// handleOne processes partition one (a message of one partition, alone or from a bundle) on
// its delivery-th delivery and says what to record (see HandlePartition). known holds the
// blocks of the message's spans read before (recordedBefore).
func (w *Worker) handleOne(ctx context.Context, m *ledger.Manifest, job Job, one Envelope, delivery int, known map[ledger.Span]*ledger.Block, hold *limit.Hold, log *slog.Logger) outcome {
	try := max(one.Attempt, 1)
	attempt := try + delivery - 1
	fail := func(err error) outcome {
		return outcome{err: fmt.Errorf("partition %s/%d: %w", one.Run, one.Part, err)}
	}

	// A redelivery or a retry may find its result already recorded (a copy of the message got
	// there first): only make sure it is counted. The read is part of recording, so it runs on
	// a recording context: on a last delivery whose invocation deadline has (nearly) passed,
	// a read cut short by that deadline would fail the delivery instead of recording the
	// failure.
	if attempt > 1 {
		if b := known[ledger.SpanOf(one.Part, one.Block)]; b != nil {
			if r, found := b.Find(one.Part); found {
				log.Info("duplicate delivery: result already recorded")
				return outcome{stored: &r}
			}
		}
		// A block without the partition, or none: only a result of its own can be recorded.
		rctx, cancel := w.recording(ctx)
		r, err := w.cfg.Store.ReadResult(rctx, one.Run, one.Part)
		cancel()
		switch {
		case err == nil:
			log.Info("duplicate delivery: result already recorded")
			return outcome{stored: &r}
		case !errors.Is(err, ledger.ErrNotFound):
			return fail(err)
		}
	}

	if hold != nil {
		if err := hold.Check(); err != nil {
			// Its slots were lost since its start (say, its process was paused): it goes back
			// without making its call or spending a try.
			return outcome{retry: &retryPlan{one: one, wait: LimitWait, cause: err, log: log}}
		}
	}
	started := w.now()
	pctx, span := w.cfg.Telemetry.StartPartition(ctx, one.Part, attempt)
	out, perr := w.processBounded(pctx, job, Partition{
		Run: m.RunID, Index: one.Part, Epoch: one.Epoch, Attempt: attempt, Params: m.Params, Payload: one.Payload,
	}, w.cfg.Jobs.PartitionTimeout(m.Job), log)
	w.cfg.Telemetry.PartitionTried(ctx, m.Job, perr == nil, w.now().Sub(started))
	span.EndTry(perr)
	if stoppedCtx(ctx) {
		log.Info("run stopped while the partition ran; its outcome is not recorded", "err", perr)
		return outcome{}
	}
	if o := w.limited(ctx, one, hold, perr, log); o != nil {
		return *o
	}
	res := ledger.Result{Run: one.Run, Index: one.Part, Epoch: one.Epoch, Attempts: attempt, Errors: one.Errors,
		Worker: w.cfg.Holder, Started: started, Finished: w.now()}
	if perr != nil && !errors.Is(perr, ErrPermanent) {
		res.Errors = append(slices.Clip(one.Errors), attemptError(perr))
	}
	policy := w.cfg.Jobs.Retry(m.Job)
	switch {
	case perr == nil:
		res.OK, res.Output = true, out
	case errors.Is(perr, ErrPermanent):
		log.Warn("partition failed permanently; recording the failure", "err", perr)
		res.Error = ledger.Cause(perr) // the full error is in the log line above
	case w.cfg.Retries != nil && try < policy.Attempts:
		return outcome{retry: &retryPlan{one: one, try: try, res: res, policy: policy, cause: perr, log: log, job: m.Job,
			trace: w.cfg.Telemetry.Traceparent(pctx)}}
	case w.cfg.Retries != nil:
		log.Error("partition failed on its last try; recording the failure", "err", perr, "tries", policy.Attempts)
		res.Error = ledger.Cause(perr)
	case delivery >= w.maxDeliveries():
		log.Error("partition failed on its last delivery; recording the failure", "err", perr, "maxDeliveries", w.maxDeliveries())
		return outcome{record: withError(res, ledger.Cause(perr)), gaveUp: giveUp(one, attempt, perr)}
	default:
		log.Warn("partition failed; the host will retry", "err", perr, "maxDeliveries", w.maxDeliveries())
		return fail(fmt.Errorf("delivery %d of %d: %w", delivery, w.maxDeliveries(), perr))
	}
	return outcome{record: &res}
}

func withError(r ledger.Result, e string) *ledger.Result {
	r.Error = e
	return &r
}

// split answers a bundle's redelivery: its last delivery did not complete (the invocation
// failed, timed out or its process died), so its partitions go out again as messages of one
// partition, each on its second try (it may have run already: it reads its result first) with
// its own deliveries and retries. One partition that kills its process or outlasts the
// invocation then cannot take its batch-mates to the dead-letter queue. Its span's block is
// taken first (empty unless the earlier delivery wrote it): the partitions in it are counted
// here, the others go out and record their own. The messages' IDs are fixed by the bundle, so
// a split that is itself redelivered sends the same messages (Service Bus drops the copies; on
// the Storage queue a copy finds its result recorded).
func (w *Worker) split(ctx context.Context, m *ledger.Manifest, job Job, env Envelope, delivery int, log *slog.Logger) error {
	rctx, cancel := w.recording(ctx)
	defer cancel()
	var taken ledger.Block
	if env.Block != 0 {
		var err error
		if taken, err = ledger.TakeSpan(rctx, w.cfg.Store, env.Run, ledger.SpanOf(env.Part, env.Block), nil); err != nil {
			return fmt.Errorf("partitions %s/%d+%d: split bundle: %w", env.Run, env.Part, env.Count, err)
		}
	}
	singles := env.Singles()
	msgs := make([]transport.Message, 0, len(singles))
	var stored []ledger.Result
	for _, one := range singles {
		if r, ok := taken.Find(one.Part); ok {
			stored = append(stored, r)
			continue
		}
		one.Attempt, one.Block = 2, 0
		body, err := one.Encode()
		if err != nil {
			return fmt.Errorf("partition %s/%d: split bundle: %w", one.Run, one.Part, err)
		}
		msgs = append(msgs, transport.Message{ID: one.MessageID(), Body: body, Properties: one.Properties()})
	}
	if len(msgs) > 0 {
		if err := w.cfg.Retries.Send(ctx, msgs); err != nil {
			return fmt.Errorf("partitions %s/%d+%d: split bundle: %w", env.Run, env.Part, env.Count, err)
		}
		log.Warn("bundle redelivered; its partitions are sent again one per message", "previousDeliveries", delivery-1, "sent", len(msgs), "recorded", len(stored))
	}
	return w.count(rctx, ctx, m, job, env, stored, log)
}

// retry schedules try+1 of the partition: the same message with the next attempt number and
// the errors so far, delivered after the policy's delay. The message ID is a function of the
// attempt, so a redelivery of this message (its completion was lost) sends the same retry
// again: Service Bus's duplicate detection drops it, and on the Storage queue the copy finds
// the result recorded (or fails its try again under the same attempt number).
func (w *Worker) retry(ctx context.Context, env Envelope, try int, errs []string, p RetryPolicy, log *slog.Logger, cause error) error {
	next := env
	next.Attempt, next.Errors, next.Block = try+1, errs, 0 // the span's block exists: see record
	id := next.MessageID()
	body, err := next.Encode()
	if err != nil {
		return fmt.Errorf("partition %s/%d: retry %d: %w", env.Run, env.Part, try+1, err)
	}
	delay := p.Delay(try, id)
	at := w.now().Add(delay)
	if err := w.cfg.Retries.Send(ctx, []transport.Message{{ID: id, Body: body, Properties: next.Properties(), NotBefore: at}}); err != nil {
		return fmt.Errorf("partition %s/%d: schedule try %d of %d: %w", env.Run, env.Part, try+1, p.Attempts, err)
	}
	log.Warn("partition failed; retry scheduled", "err", cause, "nextTry", try+1, "tries", p.Attempts, "delay", delay.String())
	return nil
}

func giveUp(env Envelope, attempt int, cause error) error {
	return fmt.Errorf("partition %s/%d after %d deliveries: %w: %w", env.Run, env.Part, attempt, ErrGaveUp, cause)
}

// ErrPartitionTimeout marks a try cut off by its job's partition timeout: it failed (not
// permanently), and is retried under the job's retry policy.
var ErrPartitionTimeout = errors.New("partition timed out")

// AbandonGrace is how long a try past its partition timeout has to return once its context is
// cancelled; a Process that does not is abandoned (its goroutine runs on, its outcome unused).
const AbandonGrace = time.Second

// processBounded runs process under the job's partition timeout d (none when d is 0): past
// it, the try's context is cancelled and the try fails with ErrPartitionTimeout, whatever
// error Process returns then, or after AbandonGrace if it returns none.
func (w *Worker) processBounded(ctx context.Context, job Job, p Partition, d time.Duration, log *slog.Logger) (json.RawMessage, error) {
	if d <= 0 {
		return process(ctx, job, p)
	}
	timedOut := fmt.Errorf("%w after %s (try %d)", ErrPartitionTimeout, d, p.Attempt)
	pctx, cancel := context.WithTimeoutCause(ctx, d, timedOut)
	defer cancel()
	type done struct {
		out json.RawMessage
		err error
	}
	ch := make(chan done, 1)
	go func() {
		out, err := process(pctx, job, p)
		ch <- done{out, err}
	}()
	cut := func(err error) error {
		if ctx.Err() == nil && errors.Is(context.Cause(pctx), ErrPartitionTimeout) && err != nil {
			return timedOut // the job's error is what the cancel made of it
		}
		return err
	}
	select {
	case r := <-ch:
		return r.out, cut(r.err)
	case <-pctx.Done():
	}
	select {
	case r := <-ch:
		return r.out, cut(r.err)
	case <-time.After(AbandonGrace):
		log.Error("partition abandoned: Process did not return after its context was cancelled", "timeout", d.String(), "grace", AbandonGrace.String())
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, timedOut
	}
}

// process runs the job, turning a panic into an error and invalid output into a permanent one.
func process(ctx context.Context, job Job, p Partition) (out json.RawMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("job panicked: %v", r)
		}
	}()
	out, err = job.Process(ctx, p)
	if err == nil && len(out) > 0 && !json.Valid(out) {
		return nil, Permanent(errors.New("job returned output that is not JSON"))
	}
	return out, err
}

// manifest returns run's manifest: the process's cached copy while it may stand in for a read
// (manifestCache), otherwise a fresh read (shared with the deliveries that need it meanwhile),
// cached when it may.
func (w *Worker) manifest(ctx context.Context, run string) (ledger.Manifest, error) {
	return w.manifests.load(ctx, run, w.now(), func(ctx context.Context) (ledger.Manifest, error) {
		return w.cfg.Store.ReadManifest(ctx, run)
	})
}
