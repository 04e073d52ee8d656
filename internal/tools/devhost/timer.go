package devhost

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/batonfn/baton/internal/engine/protocol"
	"github.com/batonfn/baton/internal/lib/ncrontab"
)

// DefaultTimerSkew is the largest random offset of a timer fire from its occurrence, either way.
const DefaultTimerSkew = 300 * time.Millisecond

// pastDueAfter: a fire later than this after its occurrence is past due.
const pastDueAfter = time.Second

// TimerMode says on which instances a timer occurrence fires.
type TimerMode string

const (
	// TimerAll fires every occurrence on every running instance: the worst case a lease must
	// handle (several apps, slots or regions sharing one schedule). The default.
	TimerAll TimerMode = "all"
	// TimerOne fires every occurrence on one running instance chosen at random (seeded by
	// Options.TimerSeed), as Azure's per-app singleton timer does. There is no retry: when that
	// invocation fails, the occurrence is gone. With no running instance it fires nowhere.
	TimerOne TimerMode = "one"
)

// TimerModes lists the timer modes.
var TimerModes = []TimerMode{TimerAll, TimerOne}

// ParseTimerMode reads a timer mode ("" is TimerAll).
func ParseTimerMode(s string) (TimerMode, error) {
	switch m := TimerMode(strings.ToLower(strings.TrimSpace(s))); m {
	case "":
		return TimerAll, nil
	case TimerAll, TimerOne:
		return m, nil
	}
	return "", fmt.Errorf("timer mode %q: use %q (every instance) or %q (one random instance, as in Azure)", s, TimerAll, TimerOne)
}

// timerCandidate is an instance as the timer sees it when an occurrence is due.
type timerCandidate struct {
	name  string
	state State
}

// pickOne chooses the instance an occurrence fires on in TimerOne mode: a running instance
// drawn from rng (paused, starting, restarting and failed ones are never chosen); ok is false
// when none is running.
func pickOne(rng *rand.Rand, cands []timerCandidate) (name string, ok bool) {
	var running []string
	for _, c := range cands {
		if c.state == StateRunning {
			running = append(running, c.name)
		}
	}
	if len(running) == 0 {
		return "", false
	}
	return running[rng.IntN(len(running))], true
}

// TimerFire records one occurrence the devhost fired.
type TimerFire struct {
	Function   string
	Occurrence time.Time
	// Instances are the instances the occurrence was fired on.
	Instances []string
}

// timerTrigger fires one timer function at each occurrence, on every instance or on one
// (Options.TimerMode).
type timerTrigger struct {
	h        *Host
	fn       *Function
	binding  string
	schedule ncrontab.Expr
	monitor  bool
	// rng picks the instance in TimerOne mode; only run uses it.
	rng *rand.Rand

	// stop ends run (StopTimers); done is closed when run has returned.
	stop context.CancelFunc
	done chan struct{}

	mu     sync.Mutex
	status map[string]*protocol.ScheduleStatus // per instance: what its host's monitor holds
	missed map[string]time.Time                // per paused instance: the latest occurrence it missed
}

func newTimerTrigger(h *Host, fn *Function) (*timerTrigger, error) {
	b := fn.Trigger()
	expr, err := h.settings.Resolve(b.Prop("schedule"))
	if err != nil {
		return nil, fmt.Errorf("%s schedule: %w", fn.Name, err)
	}
	sched, err := ncrontab.Parse(expr) // the host evaluates a timer's NCRONTAB in UTC
	if err != nil {
		return nil, fmt.Errorf("%s schedule: %w", fn.Name, err)
	}
	monitor := true
	if v, ok := b.Props["useMonitor"].(bool); ok {
		monitor = v
	}
	if v, ok := b.Props["runOnStartup"].(bool); ok && v {
		h.log.Warn("runOnStartup is not emulated", "function", fn.Name)
	}
	// Each timer function draws from its own stream of the seed, so adding a function does
	// not change another's choices.
	seed := uint64(h.opts.TimerSeed)
	rng := rand.New(rand.NewPCG(seed, uint64(len(h.timers))+1))
	return &timerTrigger{h: h, fn: fn, binding: b.Name, schedule: sched, monitor: monitor, rng: rng,
		status: map[string]*protocol.ScheduleStatus{}, missed: map[string]time.Time{}}, nil
}

// run fires occurrences until ctx ends or Options.MaxTimerFires occurrences were fired.
func (t *timerTrigger) run(ctx context.Context) {
	h := t.h
	next, ok := t.schedule.Next(h.now(), time.UTC)
	if !ok {
		h.log.Error("timer schedule never fires again", "function", t.fn.Name, "schedule", t.schedule.String())
		return
	}
	h.log.Info("timer armed", "function", t.fn.Name, "schedule", t.schedule.String(), "next", next.UTC().Format(time.RFC3339))
	for n := 0; h.opts.MaxTimerFires == 0 || n < h.opts.MaxTimerFires; n++ {
		// Wake a little before the occurrence: early fires are part of the emulation.
		wait := time.Until(next.Add(-h.opts.TimerSkew))
		if wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		var targets []string
		if h.opts.TimerMode == TimerOne {
			targets = t.fireOne(next)
		} else {
			targets = t.fireAll(next)
		}
		h.recordFire(TimerFire{Function: t.fn.Name, Occurrence: next, Instances: targets})
		h.log.Info("timer fired", "function", t.fn.Name, "occurrence", next.UTC().Format(time.RFC3339),
			"instances", strings.Join(targets, ","), "mode", string(h.opts.TimerMode))
		if next, ok = t.schedule.Next(next, time.UTC); !ok {
			h.log.Error("timer schedule never fires again", "function", t.fn.Name, "schedule", t.schedule.String())
			return
		}
	}
	h.log.Info("timer: fire limit reached", "function", t.fn.Name, "limit", h.opts.MaxTimerFires)
}

// fire invokes the timer function on in for occurrence occ, at a random skew from it.
func (t *timerTrigger) fire(in *Instance, occ time.Time) {
	skew := time.Duration(0)
	if s := t.h.opts.TimerSkew; s > 0 {
		skew = time.Duration(rand.Int64N(int64(2*s+1))) - s
	}
	t.h.goWork(func(wctx context.Context) { t.fireAt(wctx, in, occ, occ.Add(skew)) })
}

// fireAll fires occurrence occ on every running instance and returns them; a paused instance
// remembers it, to fire it past due on SIGCONT.
func (t *timerTrigger) fireAll(occ time.Time) []string {
	h := t.h
	var targets []string
	for _, in := range h.instances {
		if st, _ := in.State(); st == StatePaused {
			t.mu.Lock()
			t.missed[in.name] = occ
			t.mu.Unlock()
			h.log.Info("timer: instance paused; occurrence missed there", "function", t.fn.Name, "instance", in.name)
			continue
		}
		if !in.live() {
			h.log.Info("timer: instance not running; not fired there", "function", t.fn.Name, "instance", in.name)
			continue
		}
		targets = append(targets, in.name)
		t.fire(in, occ)
	}
	return targets
}

// fireOne fires occurrence occ on one running instance (TimerOne) and returns it, or nothing
// when no instance is running: the occurrence is then not fired at all, as when an app has no
// instance up.
func (t *timerTrigger) fireOne(occ time.Time) []string {
	cands := make([]timerCandidate, 0, len(t.h.instances))
	for _, in := range t.h.instances {
		st, _ := in.State()
		cands = append(cands, timerCandidate{name: in.name, state: st})
	}
	name, ok := pickOne(t.rng, cands)
	if !ok {
		t.h.log.Warn("timer: no running instance; occurrence not fired", "function", t.fn.Name,
			"occurrence", occ.UTC().Format(time.RFC3339))
		return nil
	}
	t.fire(t.h.Instance(name), occ)
	return []string{name}
}

// fireAt invokes the timer function on in at `at` for occurrence occ.
func (t *timerTrigger) fireAt(ctx context.Context, in *Instance, occ, at time.Time) {
	if d := time.Until(at); d > 0 {
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
	t.invoke(ctx, in, occ)
}

// invoke builds the TimerInfo as the host does (the ScheduleStatus the monitor held before
// this fire: Last is the previous fire, Next this occurrence), invokes, then advances the
// status. There is no retry: a failed timer invocation waits for the next occurrence.
func (t *timerTrigger) invoke(ctx context.Context, in *Instance, occ time.Time) {
	h := t.h
	now := h.now()
	t.mu.Lock()
	st := t.status[in.name]
	if st == nil {
		// No status yet: as if the monitor had recorded the devhost's start.
		st = &protocol.ScheduleStatus{Last: protocol.HostTime{Time: h.started.UTC()}, LastUpdated: protocol.HostTime{Time: h.started.UTC()}}
	}
	cur := *st
	cur.Next = protocol.HostTime{Time: occ.UTC()}
	// The host moves a fire that came early to its occurrence for the next status.
	adjusted := now
	if now.Before(occ) {
		adjusted = occ
	}
	t.status[in.name] = &protocol.ScheduleStatus{Last: protocol.HostTime{Time: adjusted.UTC()}, LastUpdated: protocol.HostTime{Time: adjusted.UTC()}}
	t.mu.Unlock()

	p := TimerPayload{Now: now, IsPastDue: now.Sub(occ) > pastDueAfter}
	if t.monitor {
		p.Status = &cur
	}
	if _, err := in.invoke(ctx, t.fn.Name, timerRequest(t.fn.Name, t.binding, p), occ.UTC().Format(time.RFC3339)); err != nil {
		lvl := h.log.Warn
		if errors.Is(err, ErrNotReady) {
			lvl = h.log.Info
		}
		lvl("timer invocation failed (timers are not retried)", "function", t.fn.Name, "instance", in.name, "err", err)
	}
}

// resumed fires, past due, the latest occurrence a resumed instance missed.
func (t *timerTrigger) resumed(in *Instance) {
	t.mu.Lock()
	occ, ok := t.missed[in.name]
	delete(t.missed, in.name)
	t.mu.Unlock()
	if ok {
		t.h.log.Info("timer: firing the occurrence a resumed instance missed", "function", t.fn.Name,
			"instance", in.name, "occurrence", occ.UTC().Format(time.RFC3339))
		t.h.goWork(func(ctx context.Context) { t.invoke(ctx, in, occ) })
	}
}

// fireNow invokes the timer function once on in, outside the schedule (admin API).
func (t *timerTrigger) fireNow(ctx context.Context, in *Instance) error {
	p := TimerPayload{Now: t.h.now()}
	_, err := in.invoke(ctx, t.fn.Name, timerRequest(t.fn.Name, t.binding, p), "manual")
	return err
}
