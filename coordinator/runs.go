package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync/atomic"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/telemetry"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/internal/lib/memo"
	"github.com/batonfn/baton/internal/lib/parallel"
	"github.com/batonfn/baton/work"
)

// Sender sends partition and check messages (storagequeue.QueueSender or ServiceBusSender).
type Sender interface {
	Send(ctx context.Context, msgs []transport.Message) error
}

// DeadLetterPeeker reads a queue's dead letters without removing them
// (transport.DeadLetterQueue).
type DeadLetterPeeker interface {
	Peek(ctx context.Context, max int) ([]transport.DeadLetter, error)
}

// Finisher aggregates a run once every partition has a result (work.Worker). TryFinish trusts
// the done counters first; TryFinishByListing decides from the results listing alone (for
// checks and supervision, when a done record may have been lost).
type Finisher interface {
	TryFinish(ctx context.Context, run string) (bool, error)
	TryFinishByListing(ctx context.Context, run string) (bool, error)
	FinishStopped(ctx context.Context, run string) (bool, error)
	FinishRound(ctx context.Context, run string) (bool, error)
}

// checkMargin is added to the lease duration for the first check: by then a dead leader's
// lease has certainly expired. (The defaults of Config's fields are the settings' defaults, in
// package config: one home for each.)
const checkMargin = config.CheckMargin

// Config wires a Coordinator.
type Config struct {
	Leader *election.Leader
	Store  Ledger
	Sender Sender
	// Control sends check messages on the control queue, and with it the lease probes and
	// handover checks that bring failover down to the lease's expiry (handover.go). Nil sends
	// checks through Sender and no probes.
	Control Sender
	// DeadLetters, when set, is the work queue's dead-letter (or poison) queue. A partition
	// recorded as timed out whose message is found there gets the dead-letter reason in its
	// error: a message can dead-letter with no failure recorded when deliveries were lost
	// unseen (a lock lost to a connection drop or an instance recycle still counts one).
	DeadLetters DeadLetterPeeker
	Jobs        *work.Registry
	// Finisher aggregates when the leader learns the last result came in before planning ended.
	Finisher Finisher
	Identity ledger.Holder
	// BatchSize is the number of partitions per plan batch, send and checkpoint (default
	// config.DefaultEnqueueBatch, 2,048).
	BatchSize int
	// BatchSpread is the fewest messages a plan batch goes out as (work.SpreadBundleSize;
	// default config.DefaultBatchSpread, 8).
	BatchSpread int
	// RunTimeout is how long after planning a run may take before missing partitions are
	// re-enqueued (default 1h). A job's own (work.Registry.RunTimeout) replaces it for the
	// job's runs; each run records the one it was created with (ledger.Manifest.RunTimeout).
	RunTimeout time.Duration
	// CheckRounds bounds the re-enqueue rounds; after the last, missing partitions are recorded
	// as failed (default 3).
	CheckRounds int
	// SliceBudget bounds how long one leadership plans a run: past it, the leader checkpoints,
	// sends a check that continues at once, and lets go (0: no bound).
	SliceBudget time.Duration
	// MaxBacklog bounds the partitions enqueued but not yet done: the leader sends the next
	// plan batch once it fits under the bound (a batch at a time when the bound is smaller),
	// waiting for room in its invocation while the backlog drains, else ending its slice and
	// continuing a WavePause later (0: enqueue the whole run at once). A queue whose every
	// call grows with its depth (as Azurite's does) stays fast.
	MaxBacklog int
	// RefillWait is how long a leader whose backlog is full waits in its invocation for room
	// without a count seeing it drain before it leaves the next wave to a check, at least
	// (twice the longest quiet spell between completions seen, this leader's or recorded by
	// the last: Checkpoint.Quiet); also how often it counts (default WavePause; negative: it
	// never waits).
	RefillWait time.Duration
	// WavePause is how long after a full backlog the next wave is sent (default 2s).
	WavePause time.Duration
	// Sleep, when set, is how a leader waiting for room in its backlog waits d: false if ctx
	// ended first (default: a timer). A test's moves its clock on.
	Sleep func(ctx context.Context, d time.Duration) bool
	// FinishGrace is how long after its first try the leader that ended a run's planning tries
	// to finish the run again, when the first try did not (default DefaultFinishGrace). It must
	// exceed work.PlanningCopyTTL: a worker whose copy of the manifest, younger than that,
	// still said planning when its done append may have completed the run leaves the finish
	// to this second try.
	FinishGrace time.Duration
	// Schedules are the app's schedules, fired by Heartbeat.
	Schedules []Schedule
	// HeartbeatPeriod is the longest gap between two heartbeats (the Tick timer): each
	// schedule's catch-up window must be longer (0: not checked).
	HeartbeatPeriod time.Duration
	// MaxManualRuns and MaxManualRunsPerJob cap the manual runs (ad-hoc runs and runs now)
	// in progress, in the app and of one job: StartManual and RunNow refuse a run beyond either
	// with ErrTooManyRuns (0: no cap; the handler passes BATON_MAX_MANUAL_RUNS and
	// BATON_MAX_MANUAL_RUNS_PER_JOB). A schedule's occurrences are neither counted nor refused.
	MaxManualRuns       int
	MaxManualRunsPerJob int
	// Retention is how long final runs are kept, by final state, before the heartbeat deletes
	// them (retention.go; the handler passes BATON_RETENTION). Nil or all zero: kept for ever.
	Retention config.Retention
	// RetentionPage bounds the runs one heartbeat's retention sweep examines and deletes
	// (default DefaultRetentionPage).
	RetentionPage int
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives the run's story (default: discarded).
	Logger *slog.Logger
	// Telemetry traces each run and counts runs, heartbeats and leases (nil: off).
	Telemetry *telemetry.Telemetry
}

// Coordinator starts, resumes and checks runs. The scheduler's decisions (which occurrence
// runs, is skipped, queued, missed or paused) are made under the scheduler lease (the
// Leader's own lock); a run's planning under the run's own lease (ledger.RunLeaseName). Every
// decision is recorded in the ledger.
type Coordinator struct {
	cfg       Config
	leaseDur  time.Duration
	schedules map[string]*Schedule
	order     []string // schedule names in the order given
	ensuredOK atomic.Bool
	planning  planningSet // runs this process is enqueueing (handover.go)
	bounds    boundMemo   // when the heartbeat looks at a run again (supervise.go)
	// backfilled: the index of active runs holds every run recorded before it (supervise.go).
	backfilled atomic.Bool
	started    time.Time // when this instance started: a new schedule's cursor starts there
	// retain remembers when each final run seen by the retention sweep may be deleted, and
	// sweepRest (Unix ns) when the next pass may start (retention.go).
	retain    *memo.Map[time.Time]
	sweepRest atomic.Int64
}

// New validates cfg and returns a Coordinator. Every problem is reported, each naming its
// field (and its schedule).
func New(cfg Config) (*Coordinator, error) {
	var errs []error
	if cfg.Leader == nil || cfg.Store == nil || cfg.Sender == nil || cfg.Jobs == nil {
		errs = append(errs, errors.New("a leader, a store, a sender and a jobs registry are required"))
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = config.DefaultEnqueueBatch
	}
	if cfg.BatchSize < 1 || cfg.BatchSize > 5000 {
		errs = append(errs, fmt.Errorf("BatchSize %d must be 1-5000", cfg.BatchSize))
	}
	if cfg.BatchSpread == 0 {
		cfg.BatchSpread = config.DefaultBatchSpread
	}
	if cfg.BatchSpread < 1 || cfg.BatchSpread > config.MaxBatchSpread {
		errs = append(errs, fmt.Errorf("BatchSpread %d must be 1-%d", cfg.BatchSpread, config.MaxBatchSpread))
	}
	if cfg.RunTimeout == 0 {
		cfg.RunTimeout = config.DefaultRunTimeout
	}
	if cfg.CheckRounds < 0 {
		errs = append(errs, fmt.Errorf("CheckRounds %d must not be negative", cfg.CheckRounds))
	}
	if cfg.FinishGrace == 0 {
		cfg.FinishGrace = DefaultFinishGrace
	}
	if cfg.FinishGrace < 0 {
		errs = append(errs, fmt.Errorf("FinishGrace %s must not be negative", cfg.FinishGrace))
	}
	if cfg.HeartbeatPeriod < 0 {
		errs = append(errs, fmt.Errorf("HeartbeatPeriod %s must not be negative", cfg.HeartbeatPeriod))
	}
	if cfg.MaxManualRuns < 0 || cfg.MaxManualRunsPerJob < 0 {
		errs = append(errs, fmt.Errorf("MaxManualRuns %d and MaxManualRunsPerJob %d must not be negative", cfg.MaxManualRuns, cfg.MaxManualRunsPerJob))
	}
	schedules := map[string]*Schedule{}
	var order []string
	for i := range cfg.Schedules {
		s := cfg.Schedules[i] // a copy: the defaults are the coordinator's
		s.withDefaults()
		if err := s.validate(cfg.HeartbeatPeriod); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := schedules[s.Name]; dup {
			errs = append(errs, fmt.Errorf("schedule %q is declared twice", s.Name))
			continue
		}
		if s.JobError == nil && cfg.Jobs != nil {
			if err := cfg.Jobs.ValidateParams(s.Job, s.Params); err != nil {
				s.JobError = fmt.Errorf("schedule %s: %w", s.Name, err)
			}
		}
		schedules[s.Name] = &s
		order = append(order, s.Name)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("coordinator config: %w", err)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Coordinator{cfg: cfg, leaseDur: cfg.Leader.LeaseDuration(), schedules: schedules, order: order, started: cfg.Now(),
		bounds: boundMemo{memo.New[time.Time](boundMemoMax)}, retain: memo.New[time.Time](retainMemoMax)}
	if c.cfg.WavePause == 0 {
		c.cfg.WavePause = 2 * time.Second
	}
	if c.cfg.RefillWait == 0 {
		c.cfg.RefillWait = c.cfg.WavePause
	}
	return c, nil
}

// Schedules returns the schedules this coordinator fires, as it runs them (defaults filled
// in), in the order they were given.
func (c *Coordinator) Schedules() []Schedule {
	out := make([]Schedule, 0, len(c.order))
	for _, name := range c.order {
		out = append(out, *c.schedules[name])
	}
	return out
}

// Status is the outcome of a heartbeat's decision, a manual start or a check.
type Status string

const (
	StatusStarted  Status = "started"  // a new run was created and handed to a planner
	StatusQueued   Status = "queued"   // a new run waits for the schedule's run in progress (buffer-one)
	StatusResumed  Status = "resumed"  // this call went on planning a run another leader began
	StatusExisting Status = "existing" // the run already exists (a replay or a repeated key)
	StatusSkipped  Status = "skipped"  // the overlap policy skipped it
	StatusRecorded Status = "recorded" // a final record (skipped, missed, paused, failed) was written
	StatusHeld     Status = "held"     // another instance holds the lease
)

// Outcome reports what a call did.
type Outcome struct {
	Status Status
	Run    string
	Epoch  int64
	// State is the run's state after the call (empty when held).
	State ledger.State
	// Reason explains a skip.
	Reason string
	// Holder, HolderEpoch and ActiveRun describe the leader when Status is held, and the run
	// still in progress when Status is skipped.
	Holder      ledger.Holder
	HolderEpoch int64
	ActiveRun   string
}

// ErrRunInProgress is returned (with a skipped Outcome) by RunNow when the schedule's overlap
// policy refuses to start a run beside the one in progress.
var ErrRunInProgress = errors.New("a run is still in progress")

// ErrUnknownSchedule: no schedule of that name is declared.
var ErrUnknownSchedule = errors.New("no such schedule")

// ErrSchedulerBusy: the scheduler lease stayed held while a run now waited for it.
var ErrSchedulerBusy = errors.New("the scheduler is busy")

// ErrBadRequest marks a manual request the caller must fix.
var ErrBadRequest = errors.New("bad request")

// ErrKeyReused: the Idempotency-Key already names a run that another request made (an ad-hoc
// run where this one is a run now, another schedule, job or params); the Outcome names it.
var ErrKeyReused = errors.New("idempotency key reused")

// ErrTooManyRuns: the manual runs in progress fill the app's cap or the job's
// (Config.MaxManualRuns); nothing was recorded, and a retry once one of them ends may pass.
var ErrTooManyRuns = errors.New("too many manual runs in progress")

// runSpec describes a run to create.
type runSpec struct {
	id         string
	trigger    ledger.Trigger
	schedule   string
	occurrence time.Time
	key        string
	job        string
	params     json.RawMessage
	jitter     time.Duration  // the start's delay
	budget     *ledger.Budget // the schedule's failure budget, if it has one
}

func (c *Coordinator) log(run string, epoch int64) *slog.Logger {
	return c.cfg.Logger.With("run", run, "epoch", epoch, "instance", c.cfg.Identity.Instance)
}

// ManualRequest asks for an ad-hoc run of a job, outside every schedule and its policies.
type ManualRequest struct {
	Job    string
	Params json.RawMessage
	// IdempotencyKey maps to one run ID: a repeat returns the existing run.
	IdempotencyKey string
}

// StartManual creates an ad-hoc run of a job and hands it to a planner (a check message on
// the control queue takes the run's own lease and plans it). No schedule's overlap policy
// applies, so it needs no lease of its own. A repeated Idempotency-Key answers its run when it
// asked for the same job and params, else ErrKeyReused (see repeat); a new run beyond the caps
// on manual runs gets ErrTooManyRuns.
func (c *Coordinator) StartManual(ctx context.Context, req ManualRequest) (Outcome, error) {
	if req.Job == "" {
		return Outcome{}, fmt.Errorf("%w: a job is required", ErrBadRequest)
	}
	if err := c.cfg.Jobs.ValidateParams(req.Job, req.Params); err != nil {
		return Outcome{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	spec := runSpec{id: ledger.ManualRunID(req.IdempotencyKey, c.cfg.Now()), trigger: ledger.TriggerManual,
		key: req.IdempotencyKey, job: req.Job, params: req.Params}
	if err := c.ensureContainer(ctx); err != nil {
		return Outcome{}, err
	}
	if out, ok, err := c.repeat(ctx, spec); ok || err != nil {
		return out, err
	}
	if err := c.checkManualCaps(ctx, spec.job); err != nil {
		return Outcome{}, err
	}
	return c.open(ctx, spec, ledger.StatePlanning)
}

// keyRunIDs are the run IDs an Idempotency-Key can name: an ad-hoc run's and a run now's of
// each schedule (the IDs differ by endpoint, so a key is looked up under each).
func (c *Coordinator) keyRunIDs(key string) []string {
	ids := []string{ledger.ManualRunID(key, time.Time{})}
	for _, name := range c.order {
		ids = append(ids, ledger.ScheduleNowRunID(name, key, time.Time{}))
	}
	return ids
}

// keyReads bounds the manifest reads one keyed request has in flight.
const keyReads = 8

// repeat answers a request whose Idempotency-Key already names a run, whichever endpoint made
// it: ok is true, and the run is answered as the first request was (StatusExisting, its
// planning started if no planner took it) when spec asks for the same run, else refused with
// ErrKeyReused saying what differs. It reads one manifest per ID of keyRunIDs, so a key used on
// another endpoint is found, except by requests in flight at once (each may create its run).
func (c *Coordinator) repeat(ctx context.Context, spec runSpec) (Outcome, bool, error) {
	if spec.key == "" {
		return Outcome{}, false, nil
	}
	ids := c.keyRunIDs(spec.key)
	found := make([]*ledger.Manifest, len(ids))
	errs := make([]error, len(ids))
	parallel.Each(len(ids), keyReads, func(i int) bool {
		m, err := c.cfg.Store.ReadManifest(ctx, ids[i])
		switch {
		case err == nil:
			found[i] = &m
		case !errors.Is(err, ledger.ErrNotFound):
			errs[i] = err
		}
		return ctx.Err() == nil
	})
	if err := errors.Join(errs...); err != nil {
		return Outcome{}, false, fmt.Errorf("look up the runs of the Idempotency-Key: %w", err)
	}
	// The request's own ID first: a ledger from before keys were bound may hold a run of the
	// key under two endpoints, and each endpoint keeps answering its own.
	pick := slices.IndexFunc(ids, func(id string) bool { return id == spec.id })
	if pick < 0 || found[pick] == nil {
		pick = slices.IndexFunc(found, func(m *ledger.Manifest) bool { return m != nil })
	}
	if pick < 0 {
		return Outcome{}, false, nil
	}
	out, err := c.answerKey(ctx, spec, *found[pick])
	return out, true, err
}

// answerKey answers spec's request with m, the run of spec's ID or of its Idempotency-Key that
// exists already: the existing run when m is what spec asks for (or spec has no key: a
// schedule's occurrence), else ErrKeyReused.
func (c *Coordinator) answerKey(ctx context.Context, spec runSpec, m ledger.Manifest) (Outcome, error) {
	if diff := keyMismatch(m, spec); spec.key != "" && diff != "" {
		return Outcome{Run: m.RunID, State: m.State}, fmt.Errorf("%w: the Idempotency-Key already names run %s, %s", ErrKeyReused, m.RunID, diff)
	}
	if err := c.startRun(ctx, m, spec.jitter); err != nil {
		return Outcome{}, err
	}
	return Outcome{Status: StatusExisting, Run: m.RunID, State: m.State}, nil
}

// keyMismatch says how m differs from the run spec asks for ("" when it is the same request):
// its kind (an ad-hoc run or a run now), its schedule, and for an ad-hoc run its job and params,
// compared as JSON values. A run now's job and params are its schedule's, so the schedule
// settles it.
func keyMismatch(m ledger.Manifest, spec runSpec) string {
	schedule := m.Schedule
	if n, ok := ledger.ParseRunID(m.RunID); ok && schedule == "" {
		schedule = n.Schedule // a run recorded before manifests named their schedule
	}
	was, is := describeRun(schedule, m.Job), describeRun(spec.schedule, spec.job)
	switch {
	case schedule != spec.schedule:
		return fmt.Sprintf("%s; this request is %s", was, is)
	case spec.schedule == "" && m.Job != spec.job:
		return fmt.Sprintf("%s; this request names job %q", was, spec.job)
	case spec.schedule == "" && !sameJSON(m.Params, spec.params):
		return fmt.Sprintf("%s with other params than this request's", was)
	}
	return ""
}

func describeRun(schedule, job string) string {
	if schedule == "" {
		return fmt.Sprintf("an ad-hoc run of job %q (POST /api/runs naming a job)", job)
	}
	return fmt.Sprintf("a run now of schedule %q", schedule)
}

// sameJSON compares two JSON values by meaning (key order and spacing do not matter); an
// absent value equals null.
func sameJSON(x, y json.RawMessage) bool {
	var vx, vy any
	for _, v := range []struct {
		raw json.RawMessage
		to  *any
	}{{x, &vx}, {y, &vy}} {
		if len(bytes.TrimSpace(v.raw)) > 0 && json.Unmarshal(v.raw, v.to) != nil {
			return bytes.Equal(bytes.TrimSpace(x), bytes.TrimSpace(y))
		}
	}
	return reflect.DeepEqual(vx, vy)
}

// checkManualCaps refuses a new manual run of job with ErrTooManyRuns while the manual runs in
// progress fill the app's cap or the job's (Config.MaxManualRuns). It counts the ledger's index
// of runs that are not final (one listing) and reads records only when a cap is reached, to
// leave out entries that outlived their run. There is no lock: requests in flight at once may
// each find room, so the runs in progress may exceed a cap by that many.
func (c *Coordinator) checkManualCaps(ctx context.Context, job string) error {
	appCap, jobCap := c.cfg.MaxManualRuns, c.cfg.MaxManualRunsPerJob
	if appCap == 0 && jobCap == 0 {
		return nil
	}
	var all, ofJob []ledger.ActiveRun
	err := c.cfg.Store.ListActive(ctx, func(a ledger.ActiveRun) bool {
		if a.Trigger == ledger.TriggerManual {
			all = append(all, a)
			if a.Job == job {
				ofJob = append(ofJob, a)
			}
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("count the manual runs in progress: %w", err)
	}
	for _, cp := range []struct {
		cap     int
		entries []ledger.ActiveRun
		what    string
		setting string
	}{
		{jobCap, ofJob, fmt.Sprintf("job %q has", job), config.SettingMaxManualJob},
		{appCap, all, "the app has", config.SettingMaxManual},
	} {
		if cp.cap == 0 || len(cp.entries) < cp.cap {
			continue
		}
		n, err := c.countLive(ctx, cp.entries, cp.cap)
		if err != nil {
			return fmt.Errorf("count the manual runs in progress: %w", err)
		}
		if n >= cp.cap {
			return fmt.Errorf("%w: %s %d manual runs (ad-hoc runs and runs now) in progress, its cap (%s=%d); try again once one of them ends",
				ErrTooManyRuns, cp.what, n, cp.setting, cp.cap)
		}
	}
	return nil
}

// countLive counts the entries whose run is not final, reading records in order until limit
// are found. It repairs the index as every reader does: an entry whose run is final, or whose
// record was never created (older than a check delay), is removed; a run seen final before is
// not read again.
func (c *Coordinator) countLive(ctx context.Context, entries []ledger.ActiveRun, limit int) (int, error) {
	now := c.cfg.Now()
	live := 0
	for len(entries) > 0 && live < limit {
		batch := entries[:min(len(entries), limit-live)]
		entries = entries[len(batch):]
		ok := make([]bool, len(batch))
		errs := make([]error, len(batch))
		parallel.Each(len(batch), keyReads, func(i int) bool {
			a := batch[i]
			if bound, seen := c.bounds.bounds.Get(a.Run); seen && bound.Equal(finalBound) {
				errs[i] = c.cfg.Store.RemoveActive(ctx, a.Run)
				return ctx.Err() == nil
			}
			m, err := c.cfg.Store.ReadManifest(ctx, a.Run)
			switch {
			case errors.Is(err, ledger.ErrNotFound):
				// Counted while its creation may still be under way.
				ok[i] = now.Sub(a.Created) <= c.checkDelay()
				if !ok[i] {
					errs[i] = c.cfg.Store.RemoveActive(ctx, a.Run)
				}
			case err != nil:
				errs[i] = err
			case m.State.Final():
				c.bounds.final(m.RunID)
				errs[i] = c.cfg.Store.RemoveActive(ctx, m.RunID)
			default:
				ok[i] = true
			}
			return ctx.Err() == nil
		})
		if err := errors.Join(errs...); err != nil {
			return 0, err
		}
		for _, b := range ok {
			if b {
				live++
			}
		}
	}
	return live, nil
}

// open creates spec's run in state (planning, or queued for buffer-one) and, for a planning
// run, sends the check that starts its planning (after spec.jitter). The record comes first, so
// the check always finds its run; a check that never arrives leaves the run to the heartbeat.
// A run that already exists is answered as it is (answerKey: a key's other request is refused).
func (c *Coordinator) open(ctx context.Context, spec runSpec, state ledger.State) (out Outcome, err error) {
	m := c.newManifest(spec)
	if err := m.Transition(state); err != nil {
		return Outcome{}, err
	}
	// The run's trace starts with the decision to start it; its root's context is stored in
	// the manifest, so whichever instance plans, checks or finishes the run continues it.
	ctx, span := c.cfg.Telemetry.StartRun(ctx, telemetry.Run{ID: spec.id, Schedule: spec.schedule, Job: spec.job}, string(spec.trigger))
	defer func() {
		span.SetState(string(out.State))
		span.End(err)
	}()
	m.Trace = c.cfg.Telemetry.Traceparent(ctx)
	switch err := c.cfg.Store.CreateManifest(ctx, &m); {
	case errors.Is(err, ledger.ErrExists):
		cur, rerr := c.cfg.Store.ReadManifest(ctx, spec.id)
		if rerr != nil {
			return Outcome{}, rerr
		}
		return c.answerKey(ctx, spec, cur)
	case err != nil:
		return Outcome{}, err
	}
	c.log(spec.id, 0).Info("run created", "trigger", spec.trigger, "schedule", spec.schedule, "job", spec.job, "state", state)
	if state == ledger.StateQueued {
		return Outcome{Status: StatusQueued, Run: spec.id, State: state}, nil
	}
	if err := c.startRun(ctx, m, spec.jitter); err != nil {
		return Outcome{}, err
	}
	c.cfg.Telemetry.RunStarted(ctx, m.Schedule, m.Job, string(m.Trigger))
	return Outcome{Status: StatusStarted, Run: spec.id, State: m.State}, nil
}

// startRun sends the check that plans m when no planner has taken it up yet (epoch 0, still
// planning): the first link of the run's check chain. Sending it twice is harmless: Service
// Bus drops the duplicate message ID, and on the Storage queue the second check finds the
// run's lease held or the run planned.
func (c *Coordinator) startRun(ctx context.Context, m ledger.Manifest, jitter time.Duration) error {
	if !unstarted(m) {
		return nil
	}
	return c.scheduleCheck(ctx, m.RunID, 0, 1, c.startAt(m.Occurrence, jitter))
}

// unstarted: m waits for its first planner (planning, epoch 0, nothing planned).
func unstarted(m ledger.Manifest) bool {
	return m.Epoch == 0 && !m.PlanDone && m.State == ledger.StatePlanning
}

// startAt is when a run's planning may start: not before its occurrence (a heartbeat may beat
// a little early), and its jitter later.
func (c *Coordinator) startAt(occurrence time.Time, jitter time.Duration) time.Time {
	at := c.cfg.Now()
	if occurrence.After(at) {
		at = occurrence
	}
	return at.Add(jitter)
}

// newManifest is spec's record as the scheduler creates it, before its first state (see
// ledger.Manifest.Transition): epoch 0 (no planner yet), one segment, the run's own lease, and
// its job's run timeout, from which its deadlines are counted from its start.
func (c *Coordinator) newManifest(spec runSpec) ledger.Manifest {
	now := c.cfg.Now().UTC()
	start := c.startAt(spec.occurrence, spec.jitter).UTC()
	rt := c.jobRunTimeout(spec.job)
	return ledger.Manifest{
		Version: ledger.ManifestVersion, RunID: spec.id, Trigger: spec.trigger, Schedule: spec.schedule,
		Occurrence: spec.occurrence, IdempotencyKey: spec.key, Lease: ledger.RunLeaseName(spec.id),
		Leader: c.cfg.Identity, Segments: []ledger.Segment{{Epoch: 0, From: 0}},
		Job: spec.job, Params: spec.params, BatchSize: c.cfg.BatchSize,
		Created: now, Deadline: start.Add(rt), Expires: start.Add(rt), RunTimeout: rt,
		FoldShards: c.foldShards(spec.job), FoldBlock: work.DefaultFoldBlock, DoneLayout: ledger.DoneStriped,
		Budget: c.cfg.Jobs.FailureBudget(spec.job, spec.budget),
	}
}

// foldShards is how many partial aggregates a run of job folds its results into as they arrive
// (0 for a job without an associative merge, or an unknown one).
func (c *Coordinator) foldShards(job string) int {
	j, err := c.cfg.Jobs.Lookup(job)
	if err != nil {
		return 0
	}
	return work.FoldShardsFor(j)
}

// record writes spec's record directly in a final state (skipped, missed, paused, failed)
// with its reason. A record that already exists stands: every occurrence keeps exactly one.
func (c *Coordinator) record(ctx context.Context, spec runSpec, state ledger.State, reason string) error {
	m := c.newManifest(spec)
	if err := m.Transition(state); err != nil {
		return err
	}
	m.Reason, m.Finished, m.Lease = reason, m.Created, ""
	m.Deadline, m.Expires, m.RunTimeout = time.Time{}, time.Time{}, 0
	if !json.Valid(m.Params) {
		m.Params = nil // a reason may quote bad params; the record itself stays valid JSON
	}
	if err := c.cfg.Store.CreateManifest(ctx, &m); err != nil && !errors.Is(err, ledger.ErrExists) {
		return err
	}
	c.log(spec.id, 0).Warn("occurrence recorded", "schedule", spec.schedule, "state", state, "reason", reason, "occurrence", spec.occurrence)
	return nil
}

// asRunLeader is the one way this package takes a run's lease: one attempt (a
// *election.HeldError when another instance holds it), then task under it. A run created
// before runs had their own lease is fenced by the one lease of that time, the scheduler's.
func (c *Coordinator) asRunLeader(ctx context.Context, m ledger.Manifest, task func(ctx context.Context, lease election.Lease, beat func()) error) error {
	if m.Lease == "" {
		return c.cfg.Leader.RunAsLeader(ctx, task)
	}
	return c.cfg.Leader.RunAsLeaderOf(ctx, m.Lease, task)
}

func (c *Coordinator) ensureContainer(ctx context.Context) error {
	if c.ensuredOK.Load() {
		return nil
	}
	if err := c.cfg.Store.EnsureContainer(ctx); err != nil {
		return err
	}
	c.ensuredOK.Store(true)
	return nil
}
