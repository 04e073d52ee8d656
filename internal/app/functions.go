package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/engine/api"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/protocol"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/work"
)

// functions holds what the function bodies call.
type functions struct {
	coord *coordinator.Coordinator
	// starter starts manual runs (the coordinator, behind manualGuard); nil means coord.
	starter api.Starter
	worker  *work.Worker
	leader  *election.Leader
	// store is the run ledger the HTTP API reads.
	store api.Ledger
	now   func() time.Time
}

// tick is the Tick function, the scheduler's heartbeat: decode the timer payload, then one
// attempt at the scheduler lease, which decides every schedule's due occurrences. A heartbeat
// that finds the lease held is done: the holder decides every schedule.
func (f *functions) tick(ctx context.Context, inv *invocation) error {
	raw, ok := inv.Request.Data[bindingTimer]
	if !ok {
		return badInput(fmt.Errorf("invocation has no Data.%s (the timerTrigger binding)", bindingTimer))
	}
	ti, err := protocol.DecodeTimer(raw)
	if err != nil {
		return badInput(err)
	}
	out, err := f.coord.Heartbeat(ctx)
	if err != nil {
		return err
	}
	log := inv.Logger.With("epoch", out.Epoch, "pastDue", ti.IsPastDue)
	if out.Status == coordinator.StatusHeld {
		log.Info("heartbeat: the scheduler lease is held; its holder decides every schedule", "leader", out.Holder.String(),
			"leaderEpoch", out.HolderEpoch)
		return nil
	}
	for _, d := range out.Decisions {
		l := log.With("run", d.Run, "schedule", d.Schedule, "occurrence", d.Occurrence, "status", d.Status, "state", d.State)
		if d.Reason != "" {
			l = l.With("reason", d.Reason)
		}
		if d.State.Final() && d.State != "" {
			l.Warn("heartbeat: occurrence recorded")
		} else {
			l.Info("heartbeat: occurrence decided")
		}
	}
	log.Info("heartbeat: schedules decided", "decisions", len(out.Decisions))
	return nil
}

// message is the Work and Control (Service Bus) and WorkQueue and ControlQueue (Storage queue)
// functions: decode the envelope and dispatch by kind, whichever queue it came from (checks
// travel on the control queue, but one left on the work queue by an older version still
// works). A malformed message fails every delivery with the reason
// logged, so the host moves it to the dead-letter or poison queue; nothing is dropped
// silently.
func (f *functions) message(serviceBus bool) triggerFunc {
	return func(ctx context.Context, inv *invocation) error {
		raw, ok := inv.Request.Data[bindingMessage]
		if !ok {
			return badInput(fmt.Errorf("invocation has no Data.%s (the trigger binding)", bindingMessage))
		}
		var d work.Delivery
		if serviceBus {
			md, err := protocol.DecodeServiceBusMetadata(inv.Request.Metadata)
			if err != nil {
				return badInput(err)
			}
			d = work.Delivery{MessageID: md.MessageID, Count: int(md.DeliveryCount)}
		} else {
			md, err := protocol.DecodeQueueMetadata(inv.Request.Metadata)
			if err != nil {
				return badInput(err)
			}
			d = work.Delivery{MessageID: md.ID, Count: int(md.DequeueCount)}
		}
		log := inv.Logger.With("message", d.MessageID, "delivery", d.Count)
		body, err := protocol.DecodeMessage(raw)
		if err != nil {
			log.Error("message body unreadable; it will be dead-lettered after its last delivery", "err", err)
			return badInput(err)
		}
		env, err := work.DecodeEnvelope(body)
		if err != nil {
			log.Error("malformed message; it will be dead-lettered after its last delivery", "err", err)
			return badInput(err)
		}
		err = waitOutOutage(ctx, log, func(ctx context.Context, try int) error {
			d := d
			d.Try = try
			if env.Kind == work.KindCheck {
				return f.coord.Check(ctx, env, d)
			}
			return f.worker.HandlePartition(ctx, env, d)
		})
		if errors.Is(err, work.ErrMalformed) {
			log.Error("message rejected; it will be dead-lettered after its last delivery", "run", env.Run, "err", err)
			return badInput(err)
		}
		return err
	}
}

// Outage back-off: a storage or transport outage is not the message's fault, so it must not
// spend the message's delivery budget (a partition would be recorded failed after a 30-second
// outage). The invocation keeps its message and retries with growing pauses while the outage
// lasts, up to maxOutageWait or shortly before its own deadline; only then does it fail, and
// the host redelivers.
const (
	maxOutageWait    = 5 * time.Minute
	outageFirstPause = time.Second
	outageMaxPause   = 8 * time.Second
)

// outage reports whether err says storage or the queue could not be reached (rather than
// that the message or the job failed).
func outage(err error) bool {
	return errors.Is(err, ledger.ErrUnavailable) || transport.IsTransient(err)
}

func waitOutOutage(ctx context.Context, log *slog.Logger, fn func(ctx context.Context, try int) error) error {
	until := time.Now().Add(maxOutageWait)
	if d, ok := ctx.Deadline(); ok && d.Add(-2*outageMaxPause).Before(until) {
		until = d.Add(-2 * outageMaxPause)
	}
	pause := outageFirstPause
	for tries := 1; ; tries++ {
		err := fn(ctx, tries)
		if err == nil || !outage(err) || ctx.Err() != nil || time.Now().Add(pause).After(until) {
			return err
		}
		log.Warn("storage or queue unavailable; keeping the message and retrying", "try", tries, "pause", pause.String(), "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, outageMaxPause)
	}
}

// manualJobs settles the jobs a manual run naming a "job" may start, from BATON_MANUAL_JOBS:
// every job when it is * (all); otherwise the jobs it lists plus the job of each of schedules
// (the app's and the settings' tick), so that by default a function key starts only what the
// schedules run anyway. A listed name that is not a registered job is an error naming the
// setting.
func manualJobs(cfg config.Config, jobs *work.Registry, schedules []coordinator.Schedule) (allowed []string, all bool, err error) {
	var unknown []string
	for _, name := range cfg.ManualJobs {
		if _, err := jobs.Lookup(name); err != nil {
			unknown = append(unknown, fmt.Sprintf("%q", name))
		}
	}
	if len(unknown) > 0 {
		return nil, false, fmt.Errorf("%s=%q names %s, which this app does not register: list jobs of %s, or give %q for every job",
			config.SettingManualJobs, strings.Join(cfg.ManualJobs, ","), strings.Join(unknown, ", "), strings.Join(jobs.Names(), ", "), config.AllJobs)
	}
	if cfg.ManualAll {
		return nil, true, nil
	}
	allowed = slices.Clone(cfg.ManualJobs)
	for _, s := range schedules {
		allowed = append(allowed, s.Job)
	}
	slices.Sort(allowed)
	return slices.Compact(allowed), false, nil
}

// manualGuard is the app's policy on manual runs. A run that names no job is a run now of the
// settings' schedule (BATON_SCHEDULE), refused while its job is misconfigured with the error that
// names the setting, and refused when the app declares no such schedule; a run naming a job must
// name one of allowed, or any job when allowAll (see manualJobs). Each refusal answers 400. A
// run that names its job and gives no params gets the job's default params.
type manualGuard struct {
	api.Starter
	scheduler interface {
		RunNow(ctx context.Context, schedule, key string) (coordinator.Outcome, error)
	}
	jobErr     error
	hasDefault bool
	allowed    []string
	allowAll   bool
	defaults   map[string]json.RawMessage
}

func (g manualGuard) StartManual(ctx context.Context, req coordinator.ManualRequest) (coordinator.Outcome, error) {
	if req.Job == "" {
		switch {
		case !g.hasDefault:
			return coordinator.Outcome{}, fmt.Errorf("%w: %w", coordinator.ErrBadRequest, errNoSchedule)
		case g.jobErr != nil:
			return coordinator.Outcome{}, fmt.Errorf("%w: the default job is misconfigured: %w", coordinator.ErrBadRequest, g.jobErr)
		}
		return g.scheduler.RunNow(ctx, coordinator.LegacySchedule, req.IdempotencyKey)
	}
	if !g.allowAll && !slices.Contains(g.allowed, req.Job) {
		may := "none"
		if len(g.allowed) > 0 {
			may = strings.Join(g.allowed, ", ")
		}
		return coordinator.Outcome{}, fmt.Errorf("%w: job %q cannot be started by hand here: a manual run may start the jobs of the app's schedules and those %s lists (%s); add it to %s, or set %s=%s for every job",
			coordinator.ErrBadRequest, req.Job, config.SettingManualJobs, may, config.SettingManualJobs, config.SettingManualJobs, config.AllJobs)
	}
	if len(req.Params) == 0 {
		req.Params = g.defaults[req.Job]
	}
	return g.Starter.StartManual(ctx, req)
}
