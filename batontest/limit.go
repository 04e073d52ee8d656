package batontest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonfn/baton"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/limit"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/internal/lib/parallel"
	"github.com/batonfn/baton/work"
)

// UnderLimit has Check first run the job under limit l, as baton.WithLimit declares it,
// through Baton's real worker and limiter: many partitions at once, in the messages the leader
// would send, every wait on the run's own clock so that none takes real time. A partition that
// returns baton.SlowDown runs again after its wait on the same try. The check fails if more
// than l.MaxInFlight partitions ran at once, if the run goes a run timeout of its time without
// progress (a job that keeps slowing down), or if its results differ from the reference run's;
// Report.SlowDowns counts the slow-downs. A field of l out of range fails the check naming it,
// as WithLimit refuses it.
func UnderLimit(l baton.Limit) Option { return func(s *settings) { s.limit = &l } }

// The limited run's limiter timings. Its grants last an hour of the run's time, renewed every
// 20 minutes (every 5 after a failure), and reserve a rate's starts a minute ahead: a wait for
// a reserved start (at most limitHorizon) never looks like a renewal's, which runClock.sleep
// relies on.
const (
	limitLease   = time.Hour
	limitHorizon = time.Minute
)

// hostConcurrency is how many messages the limited run delivers at once, as the host does
// per instance by default.
const hostConcurrency = 16

// The limited run's bounds in its own time: as a limited run's deadline is moved a run
// timeout on while its results come in, it may go a run timeout (the default) without
// progress, and last at most limitRunLife.
const (
	limitRunTime = config.DefaultRunTimeout
	limitRunLife = 7 * 24 * time.Hour
)

// limitSpec validates the option's limit as WithLimit does.
func limitSpec(l baton.Limit) (limit.Spec, error) {
	spec, err := limit.Spec{Name: l.Name, MaxInFlight: l.MaxInFlight, Rate: l.Rate, Per: l.Per, Burst: l.Burst}.Normalize()
	if err != nil {
		return spec, fmt.Errorf("%w: %w", baton.ErrInvalidLimit, err)
	}
	return spec, nil
}

// validLimit is the spec of l (limitSpec), or false when l is out of range, which fails the
// check.
func (c *checker) validLimit(l baton.Limit) (*limit.Spec, bool) {
	c.t.Helper()
	spec, err := limitSpec(l)
	if err != nil {
		c.errorf("limit", "%+v: %v", l, err)
		return nil, false
	}
	return &spec, true
}

// limitedRun is what the run under the limit came to.
type limitedRun struct {
	report    Report
	results   []baton.Result
	slowDowns int
}

// executeUnderLimit runs every partition through a worker with the limit in force: the run's
// messages (bundles) due are delivered up to hostConcurrency at once, a message the worker
// sends (partitions sent back to wait, or a retry) is due at its time, a failed delivery comes
// again as the host redelivers it, and the run's clock jumps to the next message due once
// every delivery has returned.
func (c *checker) executeUnderLimit() (limitedRun, bool) {
	c.t.Helper()
	const name = "under limit"
	clock := newRunClock(time.Now())
	q := &simQueue{}
	store := newMemLimits()
	// A refused bundle goes back to the simulated queue at once (LocalWait off): the run's
	// clock moves only once every delivery has returned.
	lim, err := limit.New(limit.Config{Store: store, Holder: "batontest/1", Lease: limitLease, Horizon: limitHorizon,
		LocalWait: -1, Now: clock.now, Sleep: clock.sleep})
	if err != nil {
		c.errorf(name, "limiter: %v", err)
		return limitedRun{}, false
	}
	p := &probe{Job: c.job, now: clock.now}
	p.progressed(clock.now())
	var job baton.Job = p
	if m, ok := c.job.(baton.Merger); ok {
		job = probeMerger{probe: p, merge: m.Merge}
	}
	w, ledgerStore, run, ok := c.newRun("limited", job, work.WorkerConfig{Retries: q, Limiter: lim, Now: clock.now}, c.enforced)
	if !ok {
		return limitedRun{}, false
	}
	msgs, err := c.bundles(run)
	if err != nil {
		c.errorf(name, "%v", err)
		return limitedRun{}, false
	}
	for _, m := range msgs {
		q.add(m, 1)
	}
	start := clock.now()
	// overdue fails the run once it has gone too long without progress, or in all.
	overdue := func() bool {
		c.t.Helper()
		now := clock.now()
		switch {
		case now.Sub(p.lastProgress()) > limitRunTime:
			c.errorf(name, "%s of the run's time went by without a try that ended other than by slowing down, a run timeout (waits take no real time here): "+
				"%d slow-downs; the job keeps slowing down, or its limit lets too few partitions start", limitRunTime, p.slowDowns.Load())
		case now.Sub(start) > limitRunLife:
			c.errorf(name, "the run did not finish within %s of its time, the most a limited run may take: plan fewer partitions in the test", limitRunLife)
		default:
			return false
		}
		return true
	}
	for {
		if c.ctx.Err() != nil {
			c.errorf(name, "the check's time ran out with %d messages still on the queue: %v", q.len(), context.Cause(c.ctx))
			return limitedRun{}, false
		}
		due := q.due(clock.now())
		if len(due) == 0 {
			next, ok := q.next()
			if !ok {
				break
			}
			clock.advance(next)
			continue
		}
		if overdue() {
			return limitedRun{}, false
		}
		var (
			mu   sync.Mutex
			errs []error
		)
		parallel.Each(len(due), hostConcurrency, func(k int) bool {
			d := due[k]
			err := c.deliverQueued(w, d)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return false
			}
			if d.again {
				q.add(d.msg, d.count+1)
			}
			return true
		})
		if len(errs) > 0 {
			c.errorf(name, "%v", errs[0])
			return limitedRun{}, false
		}
		if peak, bound := p.peak.Load(), c.limit.MaxInFlight; bound > 0 && peak > int64(bound) {
			c.errorf(name, "%d partitions ran at once, more than the limit's MaxInFlight %d", peak, bound)
			return limitedRun{}, false
		}
	}
	if overdue() {
		return limitedRun{}, false
	}
	rep, results, ok := c.readBack(name, w, ledgerStore, run)
	if !ok {
		return limitedRun{}, false
	}
	return limitedRun{report: rep, results: results, slowDowns: int(p.slowDowns.Load())}, true
}

// bundles are the run's messages as the leader sends a run planned in one batch: bundles of
// consecutive partitions (work.BundleSize), each within a span of the bundle size and within
// the payload budget of a message, or messages of one partition.
func (c *checker) bundles(run string) ([]transport.Message, error) {
	n := len(c.parts)
	k := work.BundleSize(work.DefaultMaxBundle, min(n, config.DefaultEnqueueBatch))
	head := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindPartition, Run: run, Epoch: 1, Parts: n}
	if k > 1 {
		head.Block = k
	}
	var out []transport.Message
	for first := 0; first < n; {
		env, bytes := head, 0
		env.Part = first
		for i := first; i < n && (i == first || i%k != 0); i++ {
			cost := max(len(c.parts[i].payload), len("null")) + 1 // its bytes and a comma
			if i > first && bytes+cost > work.MaxPayloadBytes {
				break
			}
			p := c.parts[i].payload
			if len(p) == 0 {
				p = json.RawMessage("null")
			}
			env.Payloads, bytes = append(env.Payloads, p), bytes+cost
		}
		first += len(env.Payloads)
		if len(env.Payloads) == 1 {
			env.Payload, env.Payloads = c.parts[env.Part].payload, nil
		} else {
			env.Count = len(env.Payloads)
		}
		body, err := env.Encode()
		if errors.Is(err, work.ErrTooLarge) && env.Count > 1 {
			// As the leader does: its partitions go one per message (each fits).
			for _, one := range env.Singles() {
				if body, err = one.Encode(); err != nil {
					return nil, fmt.Errorf("partition %d: %w", one.Part, err)
				}
				out = append(out, transport.Message{ID: one.MessageID(), Body: body, Properties: one.Properties()})
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("partition %d: %w", env.Part, err)
		}
		out = append(out, transport.Message{ID: env.MessageID(), Body: body, Properties: env.Properties()})
	}
	return out, nil
}

// deliverQueued hands a message to the worker, as the host does; d.again says whether the
// host would deliver it again (the invocation failed), an error that the run cannot go on.
func (c *checker) deliverQueued(w *work.Worker, d *queued) error {
	env, err := work.DecodeEnvelope(d.msg.Body)
	if err != nil {
		return fmt.Errorf("message %s: %w", d.msg.ID, err)
	}
	err = w.HandlePartition(c.ctx, env, work.Delivery{MessageID: d.msg.ID, Count: d.count})
	switch {
	case err == nil || errors.Is(err, work.ErrGaveUp):
		return nil
	case errors.Is(err, work.ErrMalformed) || c.ctx.Err() != nil:
		return fmt.Errorf("partition %d: delivery %d: %w", env.Part, d.count, err)
	case d.count >= maxDeliveries:
		return fmt.Errorf("partition %d: every one of its %d deliveries failed, the last with: %w", env.Part, maxDeliveries, err)
	}
	d.again = true
	return nil
}

// compareUnderLimit compares the limited run with the reference run.
func (c *checker) compareUnderLimit(ref Report, refResults []baton.Result, lim limitedRun) {
	c.t.Helper()
	const name = "under limit"
	if c.compareResults(name, refResults, lim.results) {
		c.compareReports(name, ref, lim.report)
	}
}

// probe wraps a job to count its partitions running at once and its slow-downs, and to note
// when a try last ended other than by slowing down (progress), on the clock now.
type probe struct {
	baton.Job
	now                       func() time.Time
	inFlight, peak, slowDowns atomic.Int64
	progress                  atomic.Int64 // Unix nanoseconds
}

func (p *probe) progressed(t time.Time) { p.progress.Store(t.UnixNano()) }

func (p *probe) lastProgress() time.Time { return time.Unix(0, p.progress.Load()).UTC() }

func (p *probe) Process(ctx context.Context, part baton.Partition) (json.RawMessage, error) {
	n := p.inFlight.Add(1)
	defer p.inFlight.Add(-1)
	for q := p.peak.Load(); n > q && !p.peak.CompareAndSwap(q, n); q = p.peak.Load() {
	}
	out, err := p.Job.Process(ctx, part)
	if errors.Is(err, baton.ErrSlowDown) {
		p.slowDowns.Add(1)
	} else {
		p.progressed(p.now())
	}
	return out, err
}

// probeMerger is probe for a Merger, which must stay one.
type probeMerger struct {
	*probe
	merge func(context.Context, baton.RunInfo, []json.RawMessage) (json.RawMessage, error)
}

func (p probeMerger) Merge(ctx context.Context, run baton.RunInfo, parts []json.RawMessage) (json.RawMessage, error) {
	return p.merge(ctx, run, parts)
}

// simQueue is the work queue of the limited run: it keeps what the worker sends until it is
// due.
type simQueue struct {
	mu      sync.Mutex
	pending []*queued
}

// queued is a message waiting on the queue, to be delivered for the count-th time.
type queued struct {
	msg   transport.Message
	count int
	again bool
}

// Send queues msgs for their NotBefore.
func (q *simQueue) Send(ctx context.Context, msgs []transport.Message) error {
	for _, m := range msgs {
		q.add(m, 1)
	}
	return nil
}

func (q *simQueue) add(m transport.Message, count int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pending = append(q.pending, &queued{msg: m, count: count})
}

func (q *simQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending)
}

// due takes the messages due at now, in the order they were sent.
func (q *simQueue) due(now time.Time) []*queued {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out, rest []*queued
	for _, m := range q.pending {
		if m.msg.NotBefore.After(now) {
			rest = append(rest, m)
		} else {
			out = append(out, m)
		}
	}
	q.pending = rest
	return out
}

// next is when the first message waiting is due; false when none is.
func (q *simQueue) next() (time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.pending) == 0 {
		return time.Time{}, false
	}
	first := slices.MinFunc(q.pending, func(a, b *queued) int { return a.msg.NotBefore.Compare(b.msg.NotBefore) })
	return first.msg.NotBefore, true
}

// runClock is the limited run's clock: it stands still while partitions run, except that a
// partition waiting for its start under the limit's rate moves it on to that start at once;
// between deliveries it jumps to the next message due. A renewal's wait ends when the clock
// gets there.
type runClock struct {
	mu     sync.Mutex
	t      time.Time
	timers map[chan struct{}]time.Time
}

func newRunClock(t time.Time) *runClock {
	return &runClock{t: t.UTC(), timers: map[chan struct{}]time.Time{}}
}

func (c *runClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// waiting is how many waits the clock has yet to end.
func (c *runClock) waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// advance moves the clock on to t (never back), ending the waits due by then.
func (c *runClock) advance(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advanceLocked(t)
}

func (c *runClock) advanceLocked(t time.Time) {
	if !t.After(c.t) {
		return
	}
	c.t = t
	for ch, at := range c.timers {
		if !at.After(t) {
			close(ch)
			delete(c.timers, ch)
		}
	}
}

// sleep is the limiter's wait: one for a start the rate reserved (at most limitHorizon) moves
// the clock on; a longer one (a renewal's) waits for the clock to get there.
func (c *runClock) sleep(ctx context.Context, d time.Duration) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if d <= 0 {
		return nil
	}
	c.mu.Lock()
	if d <= limitHorizon {
		c.advanceLocked(c.t.Add(d))
		c.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	c.timers[ch] = c.t.Add(d)
	c.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.timers, ch)
		c.mu.Unlock()
		return context.Cause(ctx)
	}
}
