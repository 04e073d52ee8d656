package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/protocol"
	"github.com/batonfn/baton/work"
)

// functions holds what the function bodies call.
type functions struct {
	coord  *coordinator.Coordinator
	worker *work.Worker
	leader *coordinator.Leader
	now    func() time.Time
}

// tick is the Tick function: decode the timer payload, then one attempt at the lease.
func (f *functions) tick(ctx context.Context, inv *Invocation) error {
	raw, ok := inv.Request.Data[bindingTimer]
	if !ok {
		return badInput(fmt.Errorf("invocation has no Data.%s (the timerTrigger binding)", bindingTimer))
	}
	ti, err := protocol.DecodeTimer(raw)
	if err != nil {
		return badInput(err)
	}
	in := coordinator.TickInput{Now: f.now(), PastDue: ti.IsPastDue}
	if t, err := protocol.ParseTime(inv.Request.Sys().UtcNow); err == nil {
		in.Now = t // the host's clock, the same on every instance that fires for this occurrence
	}
	if ti.ScheduleStatus != nil {
		in.Next = ti.ScheduleStatus.Next.Time
	}
	out, err := f.coord.Tick(ctx, in)
	if err != nil {
		return err
	}
	log := inv.Logger.With("run", out.Run, "epoch", out.Epoch)
	switch out.Status {
	case coordinator.StatusHeld:
		log.Info("tick lost the election", "leader", out.Holder.String(), "leaderEpoch", out.HolderEpoch, "activeRun", out.ActiveRun)
	case coordinator.StatusSkipped:
		log.Warn("tick skipped the occurrence", "reason", out.Reason)
	default:
		log.Info("tick won the election", "status", out.Status, "state", out.State)
	}
	return nil
}

// message is the Work and Control (Service Bus) and WorkQueue and ControlQueue (Storage queue)
// functions: decode the envelope and dispatch by kind, whichever queue it came from (checks
// travel on the control queue, but one left on the work queue by an older version still
// works). A malformed message fails every delivery with the reason
// logged, so the host moves it to the dead-letter or poison queue; nothing is dropped
// silently.
func (f *functions) message(serviceBus bool) TriggerFunc {
	return func(ctx context.Context, inv *Invocation) error {
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
		switch env.Kind {
		case work.KindCheck:
			err = f.coord.Check(ctx, env)
		default:
			err = f.worker.HandlePartition(ctx, env, d)
		}
		if errors.Is(err, work.ErrMalformed) {
			log.Error("message rejected; it will be dead-lettered after its last delivery", "run", env.Run, "err", err)
			return badInput(err)
		}
		return err
	}
}
