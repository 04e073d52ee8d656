package coordinator

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/batonfn/baton/config"
	"github.com/batonfn/baton/election"
	"github.com/batonfn/baton/ledger"
	"github.com/batonfn/baton/transport"
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

// Misfire is the policy for occurrences that never fired.
type Misfire string

const (
	// MisfireSkip records missed occurrences and runs none of them.
	MisfireSkip Misfire = "skip"
	// MisfireRunLatest also runs the most recent missed occurrence when the next one has not
	// come yet and it is no older than StartingDeadline.
	MisfireRunLatest Misfire = "run-latest"
)

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
	// Job and Params are what a timer run executes (BATON_JOB, BATON_JOB_PARAMS).
	Job    string
	Params json.RawMessage
	// JobError, when non-nil, means the timer job is misconfigured: every occurrence records a
	// failed run whose Reason is this error's text, which names the setting. New sets it when
	// Job and Params do not validate and the caller left it nil.
	JobError error
	// Schedule is BATON_SCHEDULE.
	Schedule Schedule
	// AllowOverlap starts a new run while an earlier one is still in progress (BATON_OVERLAP=allow).
	AllowOverlap bool
	// BatchSize is the number of partitions per plan batch, send and checkpoint (default 250).
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
	// MaxDeliveries is the queue's max delivery count: on its last delivery a failing check
	// acts instead of failing, so the check chain never dies silently (default 5).
	MaxDeliveries int
	// Misfire and StartingDeadline decide what happens to occurrences that never fired
	// (default MisfireSkip, 10m).
	Misfire          Misfire
	StartingDeadline time.Duration
	// TickWait bounds how long a Tick that finds the lease held waits for it before it leaves
	// its occurrence to the holder (default: the lease duration plus 5 s, so a crashed
	// leader's lease lapses within it).
	TickWait time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives the run's story (default: discarded).
	Logger *slog.Logger
}

// Coordinator starts, resumes and checks runs. All of its decisions are made under the lease
// and recorded in the ledger.
type Coordinator struct {
	cfg       Config
	leaseDur  time.Duration
	ensuredOK atomic.Bool
	planning  planningSet // runs this process is enqueueing (handover.go)
}

// New validates cfg and returns a Coordinator.
func New(cfg Config) (*Coordinator, error) {
	var errs []error
	if cfg.Leader == nil || cfg.Store == nil || cfg.Sender == nil || cfg.Jobs == nil {
		errs = append(errs, errors.New("a leader, a store, a sender and a jobs registry are required"))
	}
	if cfg.Job != "" && cfg.Jobs != nil && cfg.JobError == nil {
		if err := cfg.Jobs.ValidateParams(cfg.Job, cfg.Params); err != nil {
			cfg.JobError = fmt.Errorf("timer job: %w", err)
		}
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
	if cfg.MaxDeliveries == 0 {
		cfg.MaxDeliveries = config.DefaultMaxDeliveries
	}
	if cfg.Misfire == "" {
		cfg.Misfire = MisfireSkip
	}
	if cfg.Misfire != MisfireSkip && cfg.Misfire != MisfireRunLatest {
		errs = append(errs, fmt.Errorf("Misfire %q must be %q or %q", cfg.Misfire, MisfireSkip, MisfireRunLatest))
	}
	if cfg.StartingDeadline == 0 {
		cfg.StartingDeadline = config.DefaultStartDeadline
	}
	if cfg.MaxDeliveries < 1 || cfg.StartingDeadline < 0 || cfg.TickWait < 0 {
		errs = append(errs, fmt.Errorf("MaxDeliveries %d, StartingDeadline %s and TickWait %s must be positive", cfg.MaxDeliveries, cfg.StartingDeadline, cfg.TickWait))
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
	c := &Coordinator{cfg: cfg, leaseDur: cfg.Leader.LeaseDuration()}
	if c.cfg.TickWait == 0 {
		c.cfg.TickWait = c.leaseDur + checkMargin
	}
	if c.cfg.WavePause == 0 {
		c.cfg.WavePause = 2 * time.Second
	}
	return c, nil
}

// Status is the outcome of a tick, a manual start or a check.
type Status string

const (
	StatusStarted  Status = "started"  // this call planned and enqueued a new run
	StatusResumed  Status = "resumed"  // this call finished enqueueing a run another leader began
	StatusExisting Status = "existing" // the run already exists (a replay or a repeated key)
	StatusSkipped  Status = "skipped"  // the overlap policy recorded the run as skipped
	StatusHeld     Status = "held"     // another instance holds the lease
	// StatusDeferred: the lease stayed busy for the whole wait; the occurrence is recorded in
	// the schedule's inbox and the lease holder decides it before it lets go.
	StatusDeferred Status = "deferred"
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

// ErrRunInProgress is returned (with a skipped Outcome) by StartManual when the overlap policy
// refuses to start a run beside one still in progress.
var ErrRunInProgress = errors.New("a run is still in progress")

// runSpec describes a run to start.
type runSpec struct {
	id         string
	trigger    ledger.Trigger
	occurrence time.Time
	key        string
	job        string
	params     json.RawMessage
}

func (c *Coordinator) log(run string, epoch int64) *slog.Logger {
	return c.cfg.Logger.With("run", run, "epoch", epoch, "instance", c.cfg.Identity.Instance)
}

// ManualRequest asks for a run outside the schedule.
type ManualRequest struct {
	// Job and Params default to the timer job.
	Job    string
	Params json.RawMessage
	// IdempotencyKey maps to one run ID: a repeat returns the existing run.
	IdempotencyKey string
}

// ManualRunID is the run ID of a manual run: derived from the idempotency key when given (so
// every repeat maps to the same run), random otherwise.
func ManualRunID(key string, now time.Time) string {
	if key != "" {
		sum := sha256.Sum256([]byte(key))
		return "manual-" + hex.EncodeToString(sum[:12])
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "manual-" + strings.ToLower(now.UTC().Format("20060102T150405Z")) + "-" + hex.EncodeToString(b[:])
}

// StartManual starts a run by hand through the same lease as the timer.
func (c *Coordinator) StartManual(ctx context.Context, req ManualRequest) (Outcome, error) {
	job, params := req.Job, req.Params
	if job == "" {
		job, params = c.cfg.Job, c.cfg.Params
	}
	if err := c.cfg.Jobs.ValidateParams(job, params); err != nil {
		return Outcome{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	spec := runSpec{id: ManualRunID(req.IdempotencyKey, c.cfg.Now()), trigger: ledger.TriggerManual, key: req.IdempotencyKey, job: job, params: params}
	if req.IdempotencyKey != "" {
		// A repeated key answers from the ledger without contending for the lease.
		if m, err := c.cfg.Store.ReadManifest(ctx, spec.id); err == nil {
			return Outcome{Status: StatusExisting, Run: m.RunID, Epoch: m.Epoch, State: m.State}, nil
		} else if !errors.Is(err, ledger.ErrNotFound) {
			return Outcome{}, err
		}
	}
	out, err := c.start(ctx, spec)
	if err == nil && out.Status == StatusSkipped {
		return out, ErrRunInProgress
	}
	return out, err
}

// errNoLease marks an attempt that could not reach the lease at all (storage failed before
// anything was decided): nothing was done under it.
var errNoLease = errors.New("could not contend for the lease")

func isHeld(err error) bool {
	var held *election.HeldError
	return errors.As(err, &held)
}

// ErrBadRequest marks a manual request the caller must fix.
var ErrBadRequest = errors.New("bad request")

// start runs the leader part of a run: under the lease, create or resume the manifest, plan,
// enqueue and schedule the dead-man's-switch check.
func (c *Coordinator) start(ctx context.Context, spec runSpec) (Outcome, error) {
	var out Outcome
	led := false
	err := c.asLeader(ctx, func(ctx context.Context, lease election.Lease, beat func()) error {
		led = true
		var err error
		out, err = c.decide(ctx, lease, beat, spec)
		return err
	})
	if err != nil && !led && !isHeld(err) {
		return out, fmt.Errorf("%w: %w", errNoLease, err)
	}
	var held *election.HeldError
	if errors.As(err, &held) {
		out = Outcome{Status: StatusHeld, Run: spec.id, Holder: held.Holder, HolderEpoch: held.Epoch}
		// Tell the caller which run the holder is busy with, when the ledger knows.
		if a, ok, aerr := c.cfg.Store.ReadActive(ctx); aerr == nil && ok {
			out.ActiveRun = a.Run
		}
		return out, nil
	}
	return out, err
}

// asLeader is the one way this package takes the lease: one attempt (a *election.HeldError when another
// instance holds it), then, under the lease, supervise the active run, do the task, and do the
// housekeeping every lease holder does before it lets go: decide the occurrences that fired
// while the lease was busy, and record those that never fired.
func (c *Coordinator) asLeader(ctx context.Context, task func(ctx context.Context, lease election.Lease, beat func()) error) error {
	return c.cfg.Leader.RunAsLeader(ctx, func(ctx context.Context, lease election.Lease, beat func()) error {
		if err := c.ensureContainer(ctx); err != nil {
			return err
		}
		if err := c.supervise(ctx, lease); err != nil {
			return err
		}
		if err := task(ctx, lease, beat); err != nil {
			return err
		}
		if err := c.housekeep(ctx, lease, beat); err != nil {
			// The task itself is done; what housekeeping left is picked up by the next holder.
			c.log("", lease.Epoch).Warn("schedule housekeeping incomplete; the next lease holder goes on", "err", err)
		}
		return nil
	})
}

// decide opens, resumes or skips the run of spec under the lease.
func (c *Coordinator) decide(ctx context.Context, lease election.Lease, beat func(), spec runSpec) (Outcome, error) {
	log := c.log(spec.id, lease.Epoch)
	m, err := c.cfg.Store.ReadManifest(ctx, spec.id)
	switch {
	case err == nil:
		if m.State.Final() || m.PlanDone {
			log.Info("run already exists; nothing to plan", "state", m.State)
			return Outcome{Status: StatusExisting, Run: spec.id, Epoch: lease.Epoch, State: m.State}, nil
		}
		log.Warn("run was left mid-enqueue by an earlier leader; resuming", "leaderEpoch", m.Epoch, "next", m.Checkpoint.Next)
		m, err = c.resume(ctx, lease, beat, spec.id)
		if err != nil {
			return Outcome{}, err
		}
		return Outcome{Status: StatusResumed, Run: spec.id, Epoch: lease.Epoch, State: m.State}, nil
	case !errors.Is(err, ledger.ErrNotFound):
		return Outcome{}, err
	}

	// A new run. First repair: a run left mid-enqueue by a dead leader is resumed here (this
	// instance holds the lease, so nobody else is enqueueing it). Then the overlap policy
	// decides, and its decision is recorded.
	active, am, busy, err := c.activeRun(ctx)
	if err != nil {
		return Outcome{}, err
	}
	if busy && !am.PlanDone && am.Epoch < lease.Epoch {
		log.Warn("the latest run was left mid-enqueue by a dead leader; resuming it first", "active", active, "leaderEpoch", am.Epoch)
		if am, err = c.resume(ctx, lease, beat, active); err != nil {
			return Outcome{}, err
		}
		if err := c.scheduleCheck(ctx, active, lease.Epoch, 1, am.Deadline); err != nil {
			return Outcome{}, err
		}
		busy = !am.State.Final()
	}
	if busy && !c.cfg.AllowOverlap {
		reason := fmt.Sprintf("run %s is still in progress (overlap policy: skip)", active)
		if spec.trigger == ledger.TriggerTimer {
			if err := c.record(ctx, lease, spec, ledger.StateSkipped, reason); err != nil {
				return Outcome{}, err
			}
		}
		log.Warn("run skipped", "reason", reason, "active", active)
		return Outcome{Status: StatusSkipped, Run: spec.id, Epoch: lease.Epoch, State: ledger.StateSkipped, Reason: reason, ActiveRun: active}, nil
	}

	if out, done, err := c.misconfigured(ctx, lease, spec); done {
		return out, err
	}
	// The dead-man's switch goes out before the run exists: if this leader dies at any point
	// after this, the check resumes the run once the lease has expired (a check whose run was
	// never created is dropped).
	if err := c.scheduleCheck(ctx, spec.id, lease.Epoch, 1, c.cfg.Now().Add(c.leaseDur+checkMargin)); err != nil {
		return Outcome{}, err
	}
	nm := c.newManifest(spec, lease)
	if err := c.cfg.Store.CreateManifest(ctx, &nm); errors.Is(err, ledger.ErrExists) {
		// Either our own create whose response was lost (the SDK retried and found it), or
		// another leader's run: the stored leader and epoch tell which.
		cur, rerr := c.cfg.Store.ReadManifest(ctx, spec.id)
		if rerr != nil {
			return Outcome{}, rerr
		}
		if cur.Epoch != lease.Epoch || cur.Leader != lease.Holder {
			log.Warn("run created concurrently by another leader", "leaderEpoch", cur.Epoch)
			return Outcome{Status: StatusExisting, Run: spec.id, Epoch: lease.Epoch, State: cur.State}, nil
		}
		log.Info("the run's create answered 'exists' but the run is ours (a lost response); going on")
		nm = cur
	} else if err != nil {
		return Outcome{}, err
	}
	log.Info("run created", "trigger", spec.trigger, "job", spec.job, "holder", lease.Holder.String())
	if err := c.cfg.Store.SetActive(ctx, ledger.Active{Run: spec.id, Epoch: lease.Epoch, Started: nm.Created}); err != nil {
		return Outcome{}, err
	}
	m, err = c.enqueue(ctx, lease, beat, spec.id)
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{Status: StatusStarted, Run: spec.id, Epoch: lease.Epoch, State: m.State}, nil
}

func (c *Coordinator) newManifest(spec runSpec, lease election.Lease) ledger.Manifest {
	now := c.cfg.Now().UTC()
	return ledger.Manifest{
		RunID: spec.id, Trigger: spec.trigger, Occurrence: spec.occurrence, IdempotencyKey: spec.key,
		Epoch: lease.Epoch, Leader: lease.Holder, Segments: []ledger.Segment{{Epoch: lease.Epoch, From: 0}},
		Job: spec.job, Params: spec.params, State: ledger.StatePlanning, BatchSize: c.cfg.BatchSize,
		Created: now, Deadline: now.Add(c.cfg.RunTimeout), Expires: now.Add(c.cfg.RunTimeout),
		FoldShards: c.foldShards(spec.job),
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

// record writes spec's record directly in a final state (skipped, missed, failed) with its
// reason. A record that already exists stands: every occurrence keeps exactly one.
func (c *Coordinator) record(ctx context.Context, lease election.Lease, spec runSpec, state ledger.State, reason string) error {
	m := c.newManifest(spec, lease)
	m.State, m.Reason, m.Finished = state, reason, m.Created
	m.Deadline, m.Expires = time.Time{}, time.Time{}
	if err := c.cfg.Store.CreateManifest(ctx, &m); err != nil && !errors.Is(err, ledger.ErrExists) {
		return err
	}
	c.log(spec.id, lease.Epoch).Warn("occurrence recorded", "state", state, "reason", reason, "occurrence", spec.occurrence)
	return nil
}

// activeRun reports the latest started run, its manifest, and whether it is still in progress.
func (c *Coordinator) activeRun(ctx context.Context) (string, ledger.Manifest, bool, error) {
	var m ledger.Manifest
	a, ok, err := c.cfg.Store.ReadActive(ctx)
	if err != nil || !ok {
		return "", m, false, err
	}
	m, err = c.cfg.Store.ReadManifest(ctx, a.Run)
	if errors.Is(err, ledger.ErrNotFound) {
		return a.Run, m, false, nil
	}
	if err != nil {
		return "", m, false, err
	}
	return a.Run, m, !m.State.Final(), nil
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
