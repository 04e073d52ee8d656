package batontest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/batonfn/baton"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/ledgertest"
	"github.com/batonfn/baton/internal/engine/limit"
	jsonparams "github.com/batonfn/baton/internal/lib/params"
	"github.com/batonfn/baton/work"
)

// Report is the run's report as Baton writes it, from the run where every partition was
// delivered once, in order.
type Report struct {
	Partitions int
	Succeeded  int
	Failed     int
	// Failures are the failed partitions' errors by index (at most the first 100 failures).
	Failures map[int]string
	// Aggregate is the job's aggregate: Aggregate's output, or the merge of the partials for
	// a Merger.
	Aggregate json.RawMessage
	// SlowDowns counts the tries that returned baton.SlowDown in the run under the limit
	// (UnderLimit); 0 without one.
	SlowDowns int
}

// Option tunes Check.
type Option func(*settings)

type settings struct {
	maxPartitions  int
	timeout        time.Duration
	allowAllFailed bool
	limit          *baton.Limit
	// enforced is the limit the limited run enforces, for this package's tests (default:
	// limit, the one checked).
	enforced *baton.Limit
}

// DefaultMaxPartitions is how many partitions a checked run may plan unless MaxPartitions says
// otherwise: Check runs the job several times over, so test runs stay small.
const DefaultMaxPartitions = 1000

// MaxPartitions sets how many partitions a checked run may plan (default
// DefaultMaxPartitions); a plan that emits more fails the check.
func MaxPartitions(n int) Option { return func(s *settings) { s.maxPartitions = n } }

// AllowAllFailed lets every partition of the checked run fail, for a test of a job's failures
// (by default a run none of whose partitions succeeded fails the check).
func AllowAllFailed() Option { return func(s *settings) { s.allowAllFailed = true } }

// Timeout bounds the whole check (default 2 minutes).
func Timeout(d time.Duration) Option { return func(s *settings) { s.timeout = d } }

// maxDeliveries is the checked runs' delivery budget, as BATON_MAX_DELIVERIES's default.
const maxDeliveries = 5

// jobName is the name the job is registered under in the checked runs.
const jobName = "checked"

// Check runs job with params (a JSON object: json.RawMessage, []byte, string, or a Go value
// to encode) end to end in memory and reports each property the job breaks with t.Errorf,
// naming the property and the partition (see the package documentation). It returns the
// report of the run where every partition was delivered once, in order (the zero Report when
// the job could not be run at all).
func Check(t testing.TB, job baton.Job, params any, opts ...Option) Report {
	t.Helper()
	s := settings{maxPartitions: DefaultMaxPartitions, timeout: 2 * time.Minute}
	for _, o := range opts {
		o(&s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	c := &checker{t: t, ctx: ctx, job: job, max: s.maxPartitions, allowAllFailed: s.allowAllFailed}
	if s.limit != nil {
		if s.enforced == nil {
			s.enforced = s.limit
		}
		var ok bool
		if c.limit, ok = c.validLimit(*s.limit); !ok {
			return Report{}
		}
		if c.enforced, ok = c.validLimit(*s.enforced); !ok {
			return Report{}
		}
	}
	return c.check(params)
}

// checker holds one Check's state.
type checker struct {
	t   testing.TB
	ctx context.Context
	job baton.Job
	max int
	// allowAllFailed: a run none of whose partitions succeeded passes (AllowAllFailed).
	allowAllFailed bool
	// limit: the job also runs under it (UnderLimit), which enforced enforces (the same
	// but in this package's tests).
	limit, enforced *limit.Spec
	params          json.RawMessage
	parts           []planned
}

// planned is one partition as the plan emitted it.
type planned struct {
	payload json.RawMessage
	next    string
}

func (c *checker) errorf(property, format string, args ...any) {
	c.t.Helper()
	c.t.Errorf("batontest: %s: %s", property, fmt.Sprintf(format, args...))
}

func (c *checker) check(params any) Report {
	c.t.Helper()
	if c.job == nil {
		c.errorf("job", "the job is nil")
		return Report{}
	}
	raw, err := jsonparams.Object(params)
	if err != nil {
		c.errorf("params", "%v", err)
		return Report{}
	}
	c.params = raw
	if v, ok := c.job.(baton.ParamsValidator); ok {
		if err := v.ValidateParams(raw); err != nil {
			c.errorf("params", "the job's ValidateParams refuses %s: %v", raw, err)
			return Report{}
		}
	}
	if c.parts, err = c.plan(""); err != nil {
		c.errorf("plan", "planning from the start: %v", err)
		return Report{}
	}
	if len(c.parts) == 0 {
		c.errorf("plan", "no partitions planned from %s: give params that plan at least one", raw)
		return Report{}
	}
	c.checkPlan()
	if !c.checkPayloads() {
		return Report{}
	}
	var limited limitedRun
	if c.limit != nil {
		// First, so that the downstream's first answers (a 429, say) go to it.
		var ok bool
		if limited, ok = c.executeUnderLimit(); !ok {
			return Report{}
		}
	}
	ref, refResults, ok := c.execute("reference", c.job, inOrder(len(c.parts)), nil)
	if !ok {
		return Report{}
	}
	if c.limit != nil {
		c.compareUnderLimit(ref, refResults, limited)
		ref.SlowDowns = limited.slowDowns
	}
	c.checkSomeSucceeded(ref)
	c.checkRedelivery(ref, refResults)
	c.checkOutOfOrder(ref, refResults)
	c.checkFailedAttempt(refResults)
	c.checkMerge(refResults)
	c.checkFailedPartition(refResults)
	c.checkPermanent()
	c.checkCancellation()
	return ref
}

// errStop ends a plan that emits more than the check can use.
var errStop = errors.New("batontest: plan stopped")

// plan runs the job's planner from cursor, collecting at most max partitions (one more ends
// it with an error).
func (c *checker) plan(cursor string) ([]planned, error) {
	var out []planned
	stopped := false
	err := c.job.Plan(c.ctx, c.params, cursor, func(payload json.RawMessage, next string) error {
		if len(out) == c.max {
			stopped = true
			return errStop
		}
		out = append(out, planned{payload: slices.Clone(payload), next: next})
		return nil
	})
	switch {
	case stopped && err == nil:
		return out, fmt.Errorf("emit returned an error and Plan returned nil: emit's error must be returned as is")
	case stopped && err != errStop:
		return out, fmt.Errorf("emit's error must be returned as is, got %w", err)
	case stopped:
		return out, fmt.Errorf("more than %d partitions (raise batontest.MaxPartitions, or plan fewer in the test)", c.max)
	}
	return out, err
}

// checkPlan: planning again gives the same partitions; planning resumed from each cursor (at
// most about 100 of them, spread over the run) gives exactly the partitions after it.
func (c *checker) checkPlan() {
	c.t.Helper()
	again, err := c.plan("")
	if err != nil {
		c.errorf("plan", "planning from the start a second time: %v", err)
		return
	}
	if i, diff := firstDiff(c.parts, again, 0); diff != "" {
		c.errorf("plan is not deterministic", "partition %d: %s (the same params must give the same partitions)", i, diff)
		return
	}
	n := len(c.parts)
	step := max(1, (n-1)/100)
	for i := 0; i < n; i += step {
		c.checkResume(i)
		if i < n-1 && i+step >= n {
			c.checkResume(n - 1)
		}
	}
}

// checkResume checks planning resumed from the cursor emitted with partition i.
func (c *checker) checkResume(i int) {
	c.t.Helper()
	cursor, n := c.parts[i].next, len(c.parts)
	if cursor == "" {
		if i < n-1 {
			c.errorf("plan cursor", "the cursor after partition %d is empty, which means \"from the start\": a leader resuming there would plan partition 0 again", i)
		}
		return
	}
	tail, err := c.plan(cursor)
	if err != nil {
		c.errorf("plan resume", "planning from the cursor after partition %d (%q): %v", i, cursor, err)
		return
	}
	if j, diff := firstDiff(c.parts[i+1:], tail, i+1); diff != "" {
		c.errorf("plan resume", "planning from the cursor after partition %d (%q): partition %d: %s", i, cursor, j, diff)
	}
}

// firstDiff compares two plans whose first partition has index offset, returning the index
// of the first difference and what it is.
func firstDiff(want, got []planned, offset int) (int, string) {
	for j := range min(len(want), len(got)) {
		if !sameJSON(want[j].payload, got[j].payload) {
			return offset + j, fmt.Sprintf("payload %s, want %s", got[j].payload, want[j].payload)
		}
		if want[j].next != got[j].next {
			return offset + j, fmt.Sprintf("cursor %q, want %q", got[j].next, want[j].next)
		}
	}
	end := offset + len(want) // the index after the last partition
	switch {
	case len(got) > len(want):
		return end, fmt.Sprintf("planned, but planning from the start ends with partition %d", end-1)
	case len(got) < len(want):
		return offset + len(got), fmt.Sprintf("missing: planning ended before it, but planning from the start goes on to partition %d", end-1)
	}
	return 0, ""
}

// checkPayloads: every payload is JSON and fits a message. It reports whether the run can go
// on.
func (c *checker) checkPayloads() bool {
	c.t.Helper()
	ok := true
	for i, p := range c.parts {
		env := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindPartition, Run: "batontest-size", Epoch: 1,
			Part: i, Parts: len(c.parts), Payload: p.payload}
		if _, err := env.Encode(); err != nil {
			c.errorf("payload size", "partition %d (%d bytes, at most %d fit a message): %v", i, len(p.payload), work.MaxPayloadBytes, err)
			ok = false
		}
	}
	return ok
}

func inOrder(n int) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	return order
}

// execute runs the job through Baton's worker over an in-memory ledger: each partition in
// order is delivered until its result is recorded (before, when set, runs first), and the
// run's report and results are read back. ok is false when the run did not finish.
func (c *checker) execute(name string, job baton.Job, order []int, before func(i int)) (Report, []baton.Result, bool) {
	c.t.Helper()
	w, store, run, ok := c.newRun(name, job, work.WorkerConfig{}, nil)
	if !ok {
		return Report{}, nil, false
	}
	for _, i := range order {
		if before != nil {
			before(i)
		}
		if !c.deliver(name, w, run, i) {
			return Report{}, nil, false
		}
	}
	return c.readBack(name, w, store, run)
}

// newRun creates the run named name of job in a new in-memory ledger, and a worker over it
// configured as cfg (its Store, Jobs, MaxDeliveries and Holder filled in), the job under spec
// when it is not nil.
func (c *checker) newRun(name string, job baton.Job, cfg work.WorkerConfig, spec *limit.Spec) (*work.Worker, *ledgertest.Fake, string, bool) {
	c.t.Helper()
	n := len(c.parts)
	run := "batontest-" + name
	store := ledgertest.NewFake(ledgertest.Options{})
	jobs := work.NewRegistry()
	ej := engineJob(job)
	jobs.Register(jobName, ej)
	if spec != nil {
		jobs.SetLimit(jobName, *spec)
	}
	cfg.Store, cfg.Jobs, cfg.MaxDeliveries = store, jobs, maxDeliveries
	cfg.Holder = ledger.Holder{App: "batontest", Instance: name, PID: 1}
	w, err := work.NewWorker(cfg)
	if err != nil {
		c.errorf(name, "worker: %v", err)
		return nil, nil, "", false
	}
	m := &ledger.Manifest{RunID: run, Trigger: ledger.TriggerManual, Epoch: 1, Segments: []ledger.Segment{{Epoch: 1, From: 0}},
		Job: jobName, Params: c.params, State: ledger.StateRunning, Partitions: n, PlanDone: true, BatchSize: 100,
		Checkpoint: ledger.Checkpoint{Batches: (n + 99) / 100, Next: n}, FoldShards: work.FoldShardsFor(ej), FoldBlock: work.DefaultFoldBlock,
		DoneLayout: ledger.DoneStriped}
	if err := store.CreateManifest(c.ctx, m); err != nil {
		c.errorf(name, "create the run: %v", err)
		return nil, nil, "", false
	}
	return w, store, run, true
}

// deliver hands partition i to the worker until its outcome is recorded, as the host
// redelivers a failed invocation; then once more, as a duplicate delivery.
func (c *checker) deliver(name string, w *work.Worker, run string, i int) bool {
	c.t.Helper()
	env := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindPartition, Run: run, Epoch: 1, Part: i,
		Parts: len(c.parts), Payload: c.parts[i].payload}
	handle := func(count int) error {
		return w.HandlePartition(c.ctx, env, work.Delivery{MessageID: env.MessageID(), Count: count})
	}
	count := 1
	var err error
	for ; count <= maxDeliveries; count++ {
		err = handle(count)
		if err == nil || errors.Is(err, work.ErrGaveUp) {
			break
		}
		if errors.Is(err, work.ErrMalformed) || c.ctx.Err() != nil {
			c.errorf(name, "partition %d: delivery %d: %v", i, count, err)
			return false
		}
	}
	if count > maxDeliveries {
		c.errorf(name, "partition %d: every one of its %d deliveries failed, the last with: %v", i, maxDeliveries, err)
		return false
	}
	if err := handle(count + 1); err != nil {
		c.errorf(name, "partition %d: a duplicate delivery after its result was recorded failed: %v", i, err)
		return false
	}
	return true
}

// readBack reads the run's report (finishing it if no worker did) and every result.
func (c *checker) readBack(name string, w *work.Worker, store *ledgertest.Fake, run string) (Report, []baton.Result, bool) {
	c.t.Helper()
	rep, _, err := store.ReadReport(c.ctx, run)
	if errors.Is(err, ledger.ErrNotFound) {
		if _, ferr := w.TryFinish(c.ctx, run); ferr != nil {
			c.errorf(name, "finishing the run: %v", ferr)
			return Report{}, nil, false
		}
		rep, _, err = store.ReadReport(c.ctx, run)
	}
	if err != nil {
		c.errorf(name, "the run has no report after every partition has a result: %v", err)
		return Report{}, nil, false
	}
	if !rep.State.Final() {
		c.errorf(name, "the run's report is %s, not final", rep.State)
		return Report{}, nil, false
	}
	results := make([]baton.Result, len(c.parts))
	rd := ledger.NewReader(store, run)
	for i := range results {
		r, err := rd.Read(c.ctx, i)
		if err != nil {
			c.errorf(name, "partition %d: no result: %v", i, err)
			return Report{}, nil, false
		}
		results[i] = publicResult(r)
	}
	out := Report{Partitions: rep.Partitions, Succeeded: rep.Succeeded, Failed: rep.Failed, Aggregate: rep.Aggregate}
	for _, f := range rep.FailedList {
		if out.Failures == nil {
			out.Failures = map[int]string{}
		}
		out.Failures[f.Index] = f.Error
	}
	return out, results, true
}

// sameJSON compares two JSON values by value; invalid JSON compares by bytes.
func sameJSON(a, b json.RawMessage) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return string(a) == string(b)
	}
	return reflect.DeepEqual(va, vb)
}

// compareResults names the first partition whose outcome differs from the reference's.
func (c *checker) compareResults(property string, ref, got []baton.Result) bool {
	c.t.Helper()
	for i := range ref {
		r, g := ref[i], got[i]
		switch {
		case r.OK != g.OK:
			c.errorf(property, "partition %d: ok=%v (error %q), but ok=%v (error %q) when every partition is processed once in order",
				i, g.OK, g.Error, r.OK, r.Error)
			return false
		case !sameJSON(r.Output, g.Output):
			c.errorf(property, "partition %d: output %s, but %s when every partition is processed once in order", i, g.Output, r.Output)
			return false
		}
	}
	return true
}

// compareReports reports how got differs from the reference report.
func (c *checker) compareReports(property string, ref, got Report) {
	c.t.Helper()
	switch {
	case ref.Succeeded != got.Succeeded || ref.Failed != got.Failed:
		c.errorf(property, "the report counts %d succeeded and %d failed, but %d and %d when every partition is processed once in order",
			got.Succeeded, got.Failed, ref.Succeeded, ref.Failed)
	case !sameJSON(ref.Aggregate, got.Aggregate):
		c.errorf(property, "the report's aggregate is %s, but %s when every partition is processed once in order", got.Aggregate, ref.Aggregate)
	}
}

// process calls the job's Process directly, as a delivery whose result was never recorded.
func (c *checker) process(run string, i int) {
	_, _ = c.job.Process(c.ctx, baton.Partition{Run: run, Index: i, Attempt: 1, Params: c.params, Payload: c.parts[i].payload})
}

// checkRedelivery: each partition is processed once more before its recorded delivery (a
// worker crashed after the work), and delivered again after it.
func (c *checker) checkRedelivery(ref Report, refResults []baton.Result) {
	c.t.Helper()
	const name = "redelivery"
	got, results, ok := c.execute(name, c.job, inOrder(len(c.parts)), func(i int) { c.process("batontest-"+name, i) })
	if ok && c.compareResults(name, refResults, results) {
		c.compareReports(name, ref, got)
	}
}

// checkOutOfOrder: partitions delivered last to first (so a Merger folds them in the other
// order).
func (c *checker) checkOutOfOrder(ref Report, refResults []baton.Result) {
	c.t.Helper()
	const name = "out of order"
	order := inOrder(len(c.parts))
	slices.Reverse(order)
	got, results, ok := c.execute("reversed", c.job, order, nil)
	if ok && c.compareResults(name, refResults, results) {
		c.compareReports(name, ref, got)
	}
}

// checkFailedAttempt: each partition's first attempt does the work and then fails (an
// invocation that timed out at the end); its retry must give the same output. Reports are
// not compared: a job may count attempts in its aggregate.
func (c *checker) checkFailedAttempt(refResults []baton.Result) {
	c.t.Helper()
	const name = "failed attempt"
	f := &failFirst{Job: c.job, done: map[int]bool{}}
	var job baton.Job = f
	if m, ok := c.job.(baton.Merger); ok {
		job = failFirstMerger{failFirst: f, merge: m.Merge}
	}
	if _, results, ok := c.execute("retried", job, inOrder(len(c.parts)), nil); ok {
		c.compareResults(name, refResults, results)
	}
}

// errInjected is the failure failFirst returns after the first attempt's work.
var errInjected = errors.New("batontest: injected failure after the work was done")

// failFirst wraps a job so the first Process of each partition does the work, then fails.
type failFirst struct {
	baton.Job
	mu   sync.Mutex
	done map[int]bool
}

func (f *failFirst) Process(ctx context.Context, p baton.Partition) (json.RawMessage, error) {
	out, err := f.Job.Process(ctx, p)
	f.mu.Lock()
	first := !f.done[p.Index]
	f.done[p.Index] = true
	f.mu.Unlock()
	if first && err == nil {
		return nil, errInjected
	}
	return out, err
}

// failFirstMerger is failFirst for a Merger, which must stay one.
type failFirstMerger struct {
	*failFirst
	merge func(context.Context, baton.RunInfo, []json.RawMessage) (json.RawMessage, error)
}

func (f failFirstMerger) Merge(ctx context.Context, run baton.RunInfo, parts []json.RawMessage) (json.RawMessage, error) {
	return f.merge(ctx, run, parts)
}

// checkCancellation: Process of partition 0 returns within work.AbandonGrace once its context
// is cancelled with baton.ErrRunStopped (a run stopped while it ran); past it, Baton abandons a
// try, and a stopped run's partitions in flight hold their invocation until they return.
func (c *checker) checkCancellation() {
	c.t.Helper()
	ctx, cancel := context.WithCancelCause(c.ctx)
	defer cancel(nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { _ = recover() }()
		_, _ = c.job.Process(ctx, baton.Partition{Run: "batontest-cancelled", Index: 0, Attempt: 1, Params: c.params, Payload: c.parts[0].payload})
	}()
	cancel(baton.ErrRunStopped)
	select {
	case <-done:
	case <-time.After(work.AbandonGrace):
		c.errorf("cancellation", "Process of partition 0 did not return within %s of its context being cancelled: "+
			"return when ctx.Done() is closed (pass ctx to every call that waits), so a cancelled run stops at once", work.AbandonGrace)
	case <-c.ctx.Done():
	}
}

// checkPermanent: a payload the job cannot read fails with an error marked permanent (or
// succeeds, for a job that accepts anything), and never panics.
func (c *checker) checkPermanent() {
	c.t.Helper()
	payload := json.RawMessage(`"batontest: not a payload of this job"`)
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		_, err = c.job.Process(c.ctx, baton.Partition{Run: "batontest-permanent", Index: 0, Attempt: 1, Params: c.params, Payload: payload})
		return err
	}()
	if err != nil && !errors.Is(err, baton.ErrPermanent) {
		c.errorf("permanent errors", "partition 0 with payload %s: Process returned %v, which is not marked permanent "+
			"(wrap errors that retrying cannot fix with baton.Permanent): Baton would retry it %d times before giving up",
			payload, err, maxDeliveries)
	}
}
