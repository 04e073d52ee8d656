package work

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/limit"
	"github.com/batonfn/baton/internal/engine/transport"
)

// ErrSlowDown marks a job error that asks for the partition's downstream to get no work for
// a while (SlowDown): the partition is sent back, not failed.
var ErrSlowDown = errors.New("slow down")

// MaxSlowDown caps the wait a SlowDown asks for.
const MaxSlowDown = time.Hour

// LimitWait is how long a partition that could not start under its grant (used up, lost)
// waits before it asks its limit again.
const LimitWait = time.Second

// busyWait is how long a bundle whose limit's state stayed contended waits before it asks
// again: LimitWait and up to as much again at random, so a crowd that came back together
// (a slow-down's end) spreads out.
func busyWait() time.Duration { return LimitWait + rand.N(LimitWait) }

type slowDownError struct {
	d   time.Duration
	err error
}

func (e *slowDownError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("slow down for %s", e.d)
	}
	return fmt.Sprintf("slow down for %s: %v", e.d, e.err)
}

func (e *slowDownError) Unwrap() []error { return []error{ErrSlowDown, e.err} }

// SlowDown returns an error saying the downstream asked for no work for d (clamped to 0 to
// MaxSlowDown): the partition goes back to wait d without spending a try or a delivery, and
// a job's limit holds every partition back on every instance for d.
func SlowDown(d time.Duration, err error) error {
	return &slowDownError{d: min(max(d, 0), MaxSlowDown), err: err}
}

// SlowDownDelay is the wait a SlowDown error asks for.
func SlowDownDelay(err error) (time.Duration, bool) {
	var e *slowDownError
	if errors.As(err, &e) {
		return e.d, true
	}
	return 0, false
}

// acquire asks the job's limit for a grant for the message: nil (no limit, nothing to hold),
// a hold to run the partitions under, or sentBack when the message went back to wait.
func (w *Worker) acquire(ctx context.Context, job string, env Envelope, log *slog.Logger) (hold *limit.Hold, sentBack bool, err error) {
	spec, ok := w.cfg.Jobs.Limit(job)
	if !ok || w.cfg.Limiter == nil || w.cfg.Retries == nil {
		return nil, false, nil
	}
	first := env
	first.Wait = 0 // the waiter is the same bundle each time it comes back
	n := max(env.Count, 1)
	g, wait, err := w.cfg.Limiter.AcquireWaiting(ctx, spec, first.MessageID(), n, min(n, BundleConcurrency))
	if errors.Is(err, limit.ErrContended) {
		// Busy, not broken: the bundle waits as for a full limit, without spending the
		// delivery.
		if err := w.sendBack(ctx, env, busyWait()); err != nil {
			return nil, false, err
		}
		log.Info("limit busy: the message waits", "limit", spec.Name, "err", err, "wait#", env.Wait+1)
		return nil, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("partition %s/%d: %w", env.Run, env.Part, err)
	}
	if g.Partitions == 0 {
		if err := w.sendBack(ctx, env, wait); err != nil {
			return nil, false, err
		}
		log.Info("limit full: the message waits", "limit", spec.Name, "wait", wait.String(), "wait#", env.Wait+1)
		return nil, true, nil
	}
	log.Debug("limit granted", "limit", spec.Name, "slots", g.Slots, "partitions", g.Partitions)
	return w.cfg.Limiter.Hold(ctx, g), false, nil
}

// sendBack sends env again to be delivered after wait: the same partitions on the same try,
// a new message (its deliveries start again) numbered by Wait.
func (w *Worker) sendBack(ctx context.Context, env Envelope, wait time.Duration) error {
	next := env
	next.Wait++
	body, err := next.Encode()
	if err != nil {
		return fmt.Errorf("partition %s/%d: send back: %w", env.Run, env.Part, err)
	}
	msg := transport.Message{ID: next.MessageID(), Body: body, Properties: next.Properties(), NotBefore: w.now().Add(wait)}
	if err := w.cfg.Retries.Send(ctx, []transport.Message{msg}); err != nil {
		return fmt.Errorf("partition %s/%d: send back: %w", env.Run, env.Part, err)
	}
	return nil
}

// sendBackRun sends outs[k] back to wait for its limit together with the outcomes after it
// that are sent back too, as one bundle of consecutive partitions (their first try; their
// results recorded one by one): a bundle its limit stopped partway goes back as a few
// messages, not one per partition, and asks its limit again as one. It returns how many
// outcomes it settled (1 or fewer: none; the caller sends outs[k] alone).
func (w *Worker) sendBackRun(ctx context.Context, singles []Envelope, outs []outcome, k int) int {
	waits := func(j int) bool {
		p := outs[j].retry
		return p != nil && p.wait > 0 && max(p.one.Attempt, 1) == 1 && p.one.Trace == "" &&
			p.one.Part == singles[k].Part+(j-k)
	}
	n := 0
	for k+n < len(outs) && n < MaxBundle && waits(k+n) {
		n++
	}
	if n < 2 {
		return 0
	}
	first := outs[k].retry
	b := first.one
	b.Count, b.Block, b.Payload, b.Payloads = n, 0, nil, nil
	wait := time.Duration(0)
	payloads := false
	for j := k; j < k+n; j++ {
		wait = max(wait, outs[j].retry.wait)
		payloads = payloads || len(outs[j].retry.one.Payload) > 0
	}
	if payloads {
		b.Payloads = make([]json.RawMessage, n)
		for j := k; j < k+n; j++ {
			b.Payloads[j-k] = outs[j].retry.one.Payload
			if len(b.Payloads[j-k]) == 0 {
				b.Payloads[j-k] = json.RawMessage("null")
			}
		}
	}
	err := w.sendBack(ctx, b, wait)
	if err == nil {
		first.log.Info("partitions sent back to wait for their limit", "reason", first.cause, "wait", wait.String(), "partitions", n)
	}
	for j := k; j < k+n; j++ {
		outs[j].retry, outs[j].err = nil, err
	}
	return n
}

// start asks hold (nil: no limit) to start partition one; on a refusal it returns the
// outcome that sends it back.
func (w *Worker) start(ctx context.Context, hold *limit.Hold, one Envelope, log *slog.Logger) (*outcome, func()) {
	if hold == nil {
		return nil, func() {}
	}
	if err := hold.Start(ctx); err != nil {
		if ctx.Err() != nil && !errors.Is(err, limit.ErrLost) {
			return &outcome{err: fmt.Errorf("partition %s/%d: not started: %w", one.Run, one.Part, err)}, nil
		}
		wait := LimitWait
		if g := hold.Grant(); g.SlowUntil.After(w.now()) {
			wait = g.SlowUntil.Sub(w.now())
		}
		return &outcome{retry: &retryPlan{one: one, wait: wait, cause: err, log: log}}, nil
	}
	return nil, hold.Done
}

// underLimit is ctx, also cancelled (with ErrLost) when hold's slots are lost.
func underLimit(ctx context.Context, hold *limit.Hold) (context.Context, context.CancelFunc) {
	if hold == nil {
		return ctx, func() {}
	}
	c, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(hold.Context(), func() {
		if errors.Is(context.Cause(hold.Context()), limit.ErrLost) {
			cancel(limit.ErrLost)
		}
	})
	return c, func() { stop(); cancel(nil) }
}

// limited is the outcome of a try its limit decides: one whose slots were lost while it ran
// (its context cancelled with ErrLost), or one that asked to slow down, is sent back
// without spending a try; nil for any other.
func (w *Worker) limited(ctx context.Context, one Envelope, hold *limit.Hold, perr error, log *slog.Logger) *outcome {
	if perr == nil || w.cfg.Retries == nil {
		return nil
	}
	if errors.Is(context.Cause(ctx), limit.ErrLost) {
		return &outcome{retry: &retryPlan{one: one, wait: LimitWait, cause: perr, log: log}}
	}
	d, ok := SlowDownDelay(perr)
	if !ok {
		return nil
	}
	d = max(d, LimitWait)
	if hold != nil {
		rctx, cancel := w.recording(ctx)
		defer cancel()
		if err := hold.SlowDown(rctx, w.now().Add(d), ledger.Cause(perr)); err != nil {
			log.Warn("the limit's slow-down could not be written; only this instance slows down", "err", err)
		}
	}
	log.Warn("the downstream asked to slow down", "err", perr, "wait", d.String())
	return &outcome{retry: &retryPlan{one: one, wait: d, cause: perr, log: log}}
}

// closeHold gives the grant's slots back.
func (w *Worker) closeHold(ctx context.Context, hold *limit.Hold, log *slog.Logger) {
	rctx, cancel := w.recording(ctx)
	defer cancel()
	if err := hold.Close(rctx); err != nil {
		log.Warn("limit slots not given back; they return when their lease ends", "err", err)
	}
}
