package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/telemetry"
)

// Leader defaults.
const (
	// DefaultReleaseTimeout bounds the release after the task returns.
	DefaultReleaseTimeout = 10 * time.Second
	// maxStallTimeout keeps a typo ("2h" for "2m") from disabling the stall watchdog.
	maxStallTimeout = 24 * time.Hour
)

// LeaderConfig configures a Leader. Zero durations take the defaults noted on each field.
type LeaderConfig struct {
	// Lock is the mutex leadership is held through (a *BlobLock in production).
	Lock Lock
	// Locks, when set, gives the named locks RunAsLeaderOf contends for (one per run, say),
	// each with the same lease duration as Lock. Nil: RunAsLeaderOf refuses.
	Locks func(name string) (Lock, error)
	// Identity names this process in the lease record and in logs.
	Identity ledger.Holder
	// LeaseDuration must equal the lock's lease duration: config.MinLeaseDuration to
	// config.MaxLeaseDuration, default config.DefaultLeaseDuration.
	LeaseDuration time.Duration
	// RenewInterval is the time between renewals, default a third of LeaseDuration; each wait
	// is shortened by up to a fifth at random so that leaders do not renew in lockstep. At most
	// half of LeaseDuration−SafetyMargin, so a failed renewal has time to be retried.
	RenewInterval time.Duration
	// SafetyMargin shortens the local deadline: leadership is given up at the last successful
	// renewal + LeaseDuration − SafetyMargin if no renewal succeeded since. It covers clock
	// drift and the time a request takes. Default a sixth of LeaseDuration (5s of 30s).
	SafetyMargin time.Duration
	// StallTimeout stops a leader whose task reported no progress (beat) for this long: it
	// stops renewing, cancels the task and lets the lease lapse. Longer than RenewInterval,
	// at most 24h; default config.DefaultStallTimeout.
	StallTimeout time.Duration
	// ReleaseTimeout bounds the release once the task returns (default 10s).
	ReleaseTimeout time.Duration
	// Now is the clock (default time.Now). It must move with the runtime's timers; tests use
	// testing/synctest rather than a hand-driven clock.
	Now func() time.Time
	// Logger receives acquire, renew failure, loss, stall and release (default: discarded).
	Logger *slog.Logger
	// Telemetry counts acquisitions, losses and handovers (nil: off).
	Telemetry *telemetry.Telemetry
}

// Leader runs tasks while holding the lock, client-go style: acquire once, renew in the
// background, cancel the task as soon as leadership cannot be guaranteed, release at the end.
// One Leader may run several leaderships at once (e.g. a tick and a check message on the same
// instance); each contends for the lock on its own.
type Leader struct {
	cfg LeaderConfig

	mu     sync.Mutex
	closed bool
	active map[*leadership]struct{}
}

// leadership is one running RunAsLeader.
type leadership struct {
	lock   Lock
	lease  Lease
	cancel context.CancelCauseFunc
	done   chan struct{} // closed after the release
	hooks  renewHooks    // called after each successful renewal (see OnRenewal)
}

// errTaskDone is the cancel cause once the task has returned on its own.
var errTaskDone = errors.New("leader task returned")

// NewLeader validates cfg, fills in defaults and returns a Leader. Every problem is reported,
// each naming its field.
func NewLeader(cfg LeaderConfig) (*Leader, error) {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if cfg.Lock == nil {
		add("Lock is required")
	}
	if err := cfg.Identity.Validate(); err != nil {
		errs = append(errs, err)
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = config.DefaultLeaseDuration
	}
	if cfg.LeaseDuration < config.MinLeaseDuration || cfg.LeaseDuration > config.MaxLeaseDuration {
		add("LeaseDuration %s is out of range: Azure Blob leases last %s to %s", cfg.LeaseDuration, config.MinLeaseDuration, config.MaxLeaseDuration)
	}
	if d, ok := cfg.Lock.(interface{ Duration() time.Duration }); ok && d.Duration() != cfg.LeaseDuration {
		add("LeaseDuration %s must equal the lock's lease duration %s", cfg.LeaseDuration, d.Duration())
	}
	if cfg.SafetyMargin == 0 {
		cfg.SafetyMargin = cfg.LeaseDuration / 6
	}
	if cfg.SafetyMargin < 0 || cfg.SafetyMargin >= cfg.LeaseDuration/2 {
		add("SafetyMargin %s must be positive and less than half of LeaseDuration %s", cfg.SafetyMargin, cfg.LeaseDuration)
	}
	if cfg.RenewInterval == 0 {
		cfg.RenewInterval = cfg.LeaseDuration / 3
	}
	if budget := cfg.LeaseDuration - cfg.SafetyMargin; cfg.RenewInterval <= 0 || cfg.RenewInterval > budget/2 {
		add("RenewInterval %s must be positive and at most half of LeaseDuration−SafetyMargin (%s)", cfg.RenewInterval, budget/2)
	}
	if cfg.StallTimeout == 0 {
		cfg.StallTimeout = config.DefaultStallTimeout
	}
	if cfg.StallTimeout <= cfg.RenewInterval || cfg.StallTimeout > maxStallTimeout {
		add("StallTimeout %s must be longer than RenewInterval %s and at most %s", cfg.StallTimeout, cfg.RenewInterval, maxStallTimeout)
	}
	if cfg.ReleaseTimeout == 0 {
		cfg.ReleaseTimeout = DefaultReleaseTimeout
	}
	if cfg.ReleaseTimeout < 0 {
		add("ReleaseTimeout %s must be positive", cfg.ReleaseTimeout)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("leader config: %w", err)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Leader{cfg: cfg, active: map[*leadership]struct{}{}}, nil
}

// LeaseDuration is the duration of the leases this leader holds.
func (l *Leader) LeaseDuration() time.Duration { return l.cfg.LeaseDuration }

// RunAsLeader makes one attempt to acquire the lock (*HeldError when someone else holds it)
// and runs fn with a context cancelled as soon as leadership cannot be guaranteed: a renewal
// fails, the local deadline passes, fn stops calling beat for StallTimeout, ctx ends, or
// ReleaseAll is called. fn must stop promptly then and call beat as it makes progress; on its
// return the lease is released. It returns fn's error or, when leadership ended first, one
// wrapping ErrLeaseLost, ErrStalled or ErrHandover (and fn's own, unless just the cancellation).
func (l *Leader) RunAsLeader(ctx context.Context, fn func(ctx context.Context, lease Lease, beat func()) error) error {
	return l.runAs(ctx, l.cfg.Lock, "", fn)
}

// RunAsLeaderOf is RunAsLeader over the named lock of LeaderConfig.Locks: leaderships of
// different names are independent of each other and of the Leader's own lock, and ReleaseAll
// ends them all. The lease it passes fn carries the name.
func (l *Leader) RunAsLeaderOf(ctx context.Context, name string, fn func(ctx context.Context, lease Lease, beat func()) error) error {
	if l.cfg.Locks == nil || name == "" {
		return fmt.Errorf("run as leader of %q: the leader has no named locks", name)
	}
	lock, err := l.cfg.Locks(name)
	if err != nil {
		return fmt.Errorf("run as leader of %q: %w", name, err)
	}
	if d, ok := lock.(interface{ Duration() time.Duration }); ok && d.Duration() != l.cfg.LeaseDuration {
		return fmt.Errorf("run as leader of %q: the lock's lease duration %s is not the leader's %s", name, d.Duration(), l.cfg.LeaseDuration)
	}
	return l.runAs(ctx, lock, name, fn)
}

func (l *Leader) runAs(ctx context.Context, lock Lock, name string, fn func(ctx context.Context, lease Lease, beat func()) error) error {
	if fn == nil {
		return errors.New("run as leader: fn is nil")
	}
	if l.isClosed() {
		return ErrLeaderClosed
	}
	// 1. One attempt to acquire.
	lease, err := lock.Acquire(ctx, l.cfg.Identity)
	if err != nil {
		if held := (*HeldError)(nil); errors.As(err, &held) {
			l.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "lease held by another instance",
				slog.String("holder", held.Holder.String()), slog.Int64("epoch", held.Epoch), slog.Time("since", held.Since))
		}
		return err
	}
	lease.Name = name
	log := l.cfg.Logger.With(slog.String("holder", lease.Holder.String()), slog.Int64("epoch", lease.Epoch))
	if name != "" {
		log = log.With(slog.String("lease", name))
	}
	acquired := []slog.Attr{slog.Duration("leaseDuration", lease.Duration)}
	if !lease.PreviousHolder.IsZero() {
		acquired = append(acquired, slog.String("previousHolder", lease.PreviousHolder.String()))
	}
	if !lease.PreviousReleasedAt.IsZero() {
		acquired = append(acquired, slog.Time("previousReleasedAt", lease.PreviousReleasedAt))
	}
	log.LogAttrs(ctx, slog.LevelInfo, "leadership acquired", acquired...)
	kind := telemetry.LeaseRun
	if name == "" {
		kind = telemetry.LeaseScheduler
	}
	l.cfg.Telemetry.LeaseAcquired(ctx, kind)

	// 2. Run fn and the keep-alive side by side; either finishing stops the other.
	runCtx, cancel := context.WithCancelCause(ctx)
	ld := &leadership{lock: lock, lease: lease, cancel: cancel, done: make(chan struct{})}
	runCtx = context.WithValue(runCtx, leadershipKey{}, ld)
	if !l.register(ld) {
		cancel(ErrLeaderClosed)
		l.release(log, lock, lease)
		close(ld.done)
		return ErrLeaderClosed
	}
	var lastBeat atomic.Int64
	lastBeat.Store(l.cfg.Now().UnixNano())
	beat := func() { lastBeat.Store(l.cfg.Now().UnixNano()) }
	keepDone := make(chan struct{})
	go func() {
		defer close(keepDone)
		l.keepAlive(runCtx, cancel, log, ld, &lastBeat)
	}()
	defer func() {
		// 3. Stop renewing, then release with a fresh context: runCtx is already done.
		cancel(errTaskDone)
		<-keepDone
		l.release(log, lock, lease)
		l.unregister(ld)
		close(ld.done)
	}()

	fnErr := fn(runCtx, lease, beat)
	if cause := context.Cause(runCtx); runCtx.Err() != nil && (errors.Is(cause, ErrLeaseLost) ||
		errors.Is(cause, ErrStalled) || errors.Is(cause, ErrHandover)) {
		if errors.Is(cause, ErrHandover) {
			l.cfg.Telemetry.LeaseHandedOver(ctx, kind)
		} else {
			l.cfg.Telemetry.LeaseLost(ctx, kind)
		}
		if fnErr == nil || errors.Is(fnErr, context.Canceled) {
			return cause
		}
		return fmt.Errorf("%w; task: %w", cause, fnErr)
	}
	return fnErr
}

// keepAlive renews the lease every RenewInterval (jittered) until ctx is done, and cancels
// ctx with the reason when leadership can no longer be guaranteed.
func (l *Leader) keepAlive(ctx context.Context, cancel context.CancelCauseFunc, log *slog.Logger, ld *leadership, lastBeat *atomic.Int64) {
	lease := ld.lease
	lastRenew := lease.AcquiredAt // sent-before time of the last confirmation
	next := lastRenew.Add(l.renewWait())
	for {
		now := l.cfg.Now()
		deadline := lastRenew.Add(l.cfg.LeaseDuration - l.cfg.SafetyMargin)
		beatAt := time.Unix(0, lastBeat.Load())
		stallAt := beatAt.Add(l.cfg.StallTimeout)
		switch {
		case !now.Before(stallAt):
			// The task is stuck: stop renewing so another instance can take over once the
			// lease lapses, and cancel the task.
			log.LogAttrs(ctx, slog.LevelWarn, "leader task stalled: stopping renewals, lease will lapse",
				slog.Duration("sinceProgress", now.Sub(beatAt)), slog.Duration("stallTimeout", l.cfg.StallTimeout))
			cancel(fmt.Errorf("%w: no progress for %s", ErrStalled, now.Sub(beatAt).Round(time.Millisecond)))
			return
		case !now.Before(deadline):
			log.LogAttrs(ctx, slog.LevelError, "leadership lost: local deadline passed without a renewal",
				slog.Time("lastRenewal", lastRenew))
			cancel(fmt.Errorf("%w: no successful renewal since %s", ErrLeaseLost, lastRenew.Format(time.RFC3339Nano)))
			return
		case !now.Before(next):
			// Each renewal's budget ends at the local deadline, so retries inside Renew can
			// never carry it past the point where the lease may have expired.
			rctx, rcancel := context.WithDeadline(ctx, deadline)
			err := ld.lock.Renew(rctx, lease)
			rcancel()
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				log.LogAttrs(ctx, slog.LevelError, "lease renewal failed: leadership lost", slog.Any("error", err))
				if !errors.Is(err, ErrLeaseLost) {
					err = fmt.Errorf("%w: %w", ErrLeaseLost, err)
				}
				cancel(err)
				return
			}
			log.LogAttrs(ctx, slog.LevelDebug, "lease renewed")
			ld.hooks.call(l.cfg.Now())
			lastRenew = now
			next = now.Add(l.renewWait())
			continue
		}
		t := time.NewTimer(min(next.Sub(now), deadline.Sub(now), stallAt.Sub(now)))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// renewWait is RenewInterval less up to a fifth at random.
func (l *Leader) renewWait() time.Duration {
	return l.cfg.RenewInterval - rand.N(l.cfg.RenewInterval/5+1)
}

// release gives the lease up with a fresh context bounded by ReleaseTimeout.
func (l *Leader) release(log *slog.Logger, lock Lock, lease Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.ReleaseTimeout)
	defer cancel()
	held := slog.Duration("held", l.cfg.Now().Sub(lease.AcquiredAt).Round(time.Millisecond))
	switch err := lock.Release(ctx, lease); {
	case err == nil:
		log.LogAttrs(ctx, slog.LevelInfo, "leadership released", held)
	case errors.Is(err, ErrLeaseLost):
		log.LogAttrs(ctx, slog.LevelInfo, "leadership ended: lease already gone at release", held, slog.Any("error", err))
	default:
		log.LogAttrs(ctx, slog.LevelWarn, "lease release failed: it will lapse", held, slog.Any("error", err))
	}
}

// ReleaseAll ends every leadership this Leader holds: it cancels the tasks, waits for them to
// return and their leases to be released, so that the next contender wins at once (graceful
// handover on SIGTERM). Afterwards RunAsLeader returns ErrLeaderClosed. A task that does not
// return before ctx ends keeps its lease until the lease lapses (releasing it under a running
// task would allow two leaders); ReleaseAll then reports it.
func (l *Leader) ReleaseAll(ctx context.Context) error {
	l.mu.Lock()
	l.closed = true
	running := make([]*leadership, 0, len(l.active))
	for ld := range l.active {
		running = append(running, ld)
	}
	l.mu.Unlock()

	for _, ld := range running {
		l.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "handing over leadership",
			slog.String("holder", ld.lease.Holder.String()), slog.Int64("epoch", ld.lease.Epoch))
		ld.cancel(ErrHandover)
	}
	var errs []error
	for _, ld := range running {
		select {
		case <-ld.done:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("epoch %d: task did not stop in time; its lease will lapse: %w", ld.lease.Epoch, ctx.Err()))
		}
	}
	return errors.Join(errs...)
}

// Held lists the leases this Leader holds right now.
func (l *Leader) Held() []Lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Lease, 0, len(l.active))
	for ld := range l.active {
		out = append(out, ld.lease)
	}
	return out
}

// State reads the current leadership from the lock without contending.
func (l *Leader) State(ctx context.Context) (LeaderState, error) { return l.cfg.Lock.State(ctx) }

func (l *Leader) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

func (l *Leader) register(ld *leadership) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.active[ld] = struct{}{}
	return true
}

func (l *Leader) unregister(ld *leadership) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.active, ld)
}
