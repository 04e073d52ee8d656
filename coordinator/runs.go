package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/internal/lib/memo"
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
	// RunTimeout is how long after planning a run may take before missing partitions are
	// re-enqueued (default 1h).
	RunTimeout time.Duration
	// CheckRounds bounds the re-enqueue rounds; after the last, missing partitions are recorded
	// as failed (default 3).
	CheckRounds int
	// SliceBudget bounds how long one leadership plans a run: past it, the leader checkpoints,
	// sends a check that continues at once, and lets go (0: no bound).
	SliceBudget time.Duration
	// MaxBacklog bounds the partitions enqueued but not yet done: the leader feeds the queue
	// in waves, ending its slice when the backlog is full and continuing a WavePause later
	// (0: enqueue the whole run at once). A queue whose every call grows with its depth (as
	// Azurite's does) stays fast.
	MaxBacklog int
	// WavePause is how long after a full backlog the next wave is sent (default 2s).
	WavePause time.Duration
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
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives the run's story (default: discarded).
	Logger *slog.Logger
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
		bounds: boundMemo{memo.New[time.Time](boundMemoMax)}}
	if c.cfg.WavePause == 0 {
		c.cfg.WavePause = 2 * time.Second
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

// runSpec describes a run to create.
type runSpec struct {
	id         string
	trigger    ledger.Trigger
	schedule   string
	occurrence time.Time
	key        string
	job        string
	params     json.RawMessage
	jitter     time.Duration // the start's delay
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
// applies, so it needs no lease of its own; a repeated Idempotency-Key answers the existing run.
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
	return c.open(ctx, spec, ledger.StatePlanning)
}

// open creates spec's run in state (planning, or queued for buffer-one) and, for a planning
// run, sends the check that starts its planning (after spec.jitter). The record comes first, so
// the check always finds its run; a check that never arrives leaves the run to the heartbeat.
// A run that already exists is answered as it is.
func (c *Coordinator) open(ctx context.Context, spec runSpec, state ledger.State) (Outcome, error) {
	m := c.newManifest(spec)
	if err := m.Transition(state); err != nil {
		return Outcome{}, err
	}
	switch err := c.cfg.Store.CreateManifest(ctx, &m); {
	case errors.Is(err, ledger.ErrExists):
		cur, rerr := c.cfg.Store.ReadManifest(ctx, spec.id)
		if rerr != nil {
			return Outcome{}, rerr
		}
		if err := c.startRun(ctx, cur, spec.jitter); err != nil {
			return Outcome{}, err
		}
		return Outcome{Status: StatusExisting, Run: spec.id, State: cur.State}, nil
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
// a hard deadline counted from its start.
func (c *Coordinator) newManifest(spec runSpec) ledger.Manifest {
	now := c.cfg.Now().UTC()
	start := c.startAt(spec.occurrence, spec.jitter).UTC()
	return ledger.Manifest{
		Version: ledger.ManifestVersion, RunID: spec.id, Trigger: spec.trigger, Schedule: spec.schedule,
		Occurrence: spec.occurrence, IdempotencyKey: spec.key, Lease: ledger.RunLeaseName(spec.id),
		Leader: c.cfg.Identity, Segments: []ledger.Segment{{Epoch: 0, From: 0}},
		Job: spec.job, Params: spec.params, BatchSize: c.cfg.BatchSize,
		Created: now, Deadline: start.Add(c.cfg.RunTimeout), Expires: start.Add(c.cfg.RunTimeout),
		FoldShards: c.foldShards(spec.job), FoldBlock: work.DefaultFoldBlock, DoneLayout: ledger.DoneStriped,
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
	m.Deadline, m.Expires = time.Time{}, time.Time{}
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
