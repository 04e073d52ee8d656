package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/work"
)

// Failover at the lease's floor: a leader enqueueing a run schedules a lease probe on the
// control queue for the moment its lease would lapse after each renewal (the probe after its
// last renewal takes over once it died), and a leader stopping gracefully releases its lease
// and sends an immediate handover check. Both are check envelopes of round 0 that schedule
// nothing after them; both need Config.Control, since on the work queue they would wait behind
// the partition backlog.

// probeRound is the envelope round of lease probes and handover checks.
const probeRound = 0

// probeSendTimeout bounds one probe's send, so a slow control queue never holds up a renewal.
const probeSendTimeout = 10 * time.Second

// control is the sender of check messages: Config.Control, else Config.Sender.
func (c *Coordinator) control() Sender {
	if c.cfg.Control != nil {
		return c.cfg.Control
	}
	return c.cfg.Sender
}

// guard covers an enqueue by this leader: it records the run as planned here (for Handover) and
// sends a probe now and after every renewal until stop is called; when the invocation was
// cancelled, stop also sends a handover check. Probe failures are logged, not returned.
func (c *Coordinator) guard(ctx context.Context, lease election.Lease, run string) (stop func()) {
	if c.cfg.Control == nil {
		return func() {}
	}
	c.planning.add(run, lease.Epoch)
	var wg sync.WaitGroup
	probe := func(renewed time.Time) {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeSendTimeout)
		defer cancel()
		if err := c.sendProbe(sctx, run, lease.Epoch, renewed); err != nil {
			c.log(run, lease.Epoch).Warn("lease probe not sent; the check chain still covers the run", "err", err)
		}
	}
	// The lease was acquired (or last renewed) before now, so it lapses by now + lease at the
	// latest when nothing renews it again. This first probe is sent before anything is
	// enqueued, so it is in place even if the leader dies at once (and does not queue behind
	// the first partitions).
	probe(c.cfg.Now())
	remove := election.OnRenewal(ctx, func(renewed time.Time) {
		wg.Add(1)
		go func() { // never hold up the renewals
			defer wg.Done()
			probe(renewed)
		}()
	})
	return func() {
		remove()
		wg.Wait()
		c.planning.remove(run, lease.Epoch)
		cause := context.Cause(ctx)
		if ctx.Err() == nil || errors.Is(cause, election.ErrHandover) || errors.Is(cause, election.ErrLeaseLost) ||
			errors.Is(cause, election.ErrStalled) {
			return
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeSendTimeout)
		defer cancel()
		for _, err := range c.sendHandovers(sctx, []planningRun{{run, lease.Epoch}}, cause) {
			c.log(run, lease.Epoch).Warn("handover check not sent; the lease probes cover the run", "err", err)
		}
	}
}

// sendProbe schedules a lease probe for renewed + lease duration: the latest moment at which a
// lease confirmed by renewed can still be held. renewed is read after the renewal was
// confirmed, so the probe never fires before that lease lapses on a shared clock; the
// transports only ever deliver later (the Storage queue rounds the delay up to whole seconds
// from its own send time, Service Bus activates at or after the scheduled time).
func (c *Coordinator) sendProbe(ctx context.Context, run string, epoch int64, renewed time.Time) error {
	at := renewed.Add(c.leaseDur)
	msg, err := controlMessage(run, epoch, "p"+strconv.FormatInt(at.UnixMilli(), 10), at, false)
	if err != nil {
		return err
	}
	if err := c.control().Send(ctx, []transport.Message{msg}); err != nil {
		return fmt.Errorf("send lease probe of %s: %w", run, err)
	}
	c.log(run, epoch).Debug("lease probe scheduled", "at", at.UTC())
	return nil
}

// controlMessage builds a round-0 check for run, deliverable at `at` (zero: now), whose message
// ID carries suffix; handover marks a handover check.
func controlMessage(run string, epoch int64, suffix string, at time.Time, handover bool) (transport.Message, error) {
	env := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindCheck, Run: run, Epoch: epoch, Round: probeRound, Handover: handover}
	body, err := env.Encode()
	if err != nil {
		return transport.Message{}, err
	}
	return transport.Message{ID: env.MessageID() + "/" + suffix, Body: body, Properties: env.Properties(), NotBefore: at}, nil
}

// probe handles a round-0 check (a lease probe or a handover check): when the run is still
// mid-enqueue under the epoch the check was sent for, try the lease and resume the run on
// success. A lease probe makes one attempt: a held lease means its leader is alive (or another
// instance already took over), and a later probe covers it. A handover check was sent while
// its leader was still stopping, so it keeps trying every handoverPoll while that leader's
// epoch holds the lease, for at most one lease duration: by then the lease was released or
// has lapsed. Neither schedules another check.
func (c *Coordinator) probe(ctx context.Context, env work.Envelope) error {
	m, err := c.cfg.Store.ReadManifest(ctx, env.Run)
	if errors.Is(err, ledger.ErrNotFound) {
		// Baton sends probes only for runs it created, so this one was deleted, or the message
		// was not Baton's: either way worth a line, never a retry.
		c.log(env.Run, env.Epoch).Warn("lease probe: no such run; dropping the check", "handover", env.Handover)
		return nil
	}
	if err != nil {
		return err
	}
	log := c.log(env.Run, m.Epoch).With("probeEpoch", env.Epoch, "handover", env.Handover)
	if m.PlanDone || m.State.Final() || m.Epoch > env.Epoch {
		log.Debug("lease probe: the run is enqueued or already taken over; nothing to do", "state", m.State)
		return nil
	}
	until := c.cfg.Now().Add(c.leaseDur)
	for attempt := 1; ; attempt++ {
		out, err := c.resumeAsLeader(ctx, m, false)
		if errors.Is(err, election.ErrHandover) {
			// This instance is stopping and sent a handover check for the run: that check, not a
			// redelivery of this one, carries the run on.
			log.Info("lease probe: handed over while resuming")
			return nil
		}
		if err != nil {
			return fmt.Errorf("lease probe of %s: %w", env.Run, err)
		}
		if out.Status != StatusHeld {
			log.Warn("lease probe: resumed a run whose leader stopped mid-enqueue", "status", out.Status, "state", out.State,
				"newEpoch", out.Epoch, "attempts", attempt)
			return nil
		}
		if !env.Handover || out.HolderEpoch > env.Epoch || !c.cfg.Now().Before(until) {
			log.Debug("lease probe: lease held; nothing to do", "holder", out.Holder.String(), "holderEpoch", out.HolderEpoch,
				"attempts", attempt)
			return nil
		}
		poll := handoverPoll
		if attempt > handoverFastAttempts { // the task is slow to stop, or its lease will lapse
			poll *= 10
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("handover check of %s: waiting for the lease: %w", env.Run, ctx.Err())
		case <-t.C:
		}
	}
}

// handoverPoll is how often a handover check tries a lease its stopping leader still holds
// (one lease read each) for its first handoverFastAttempts tries, about the two seconds a
// leader may take to stop; ten times less often after that.
const (
	handoverPoll         = 50 * time.Millisecond
	handoverFastAttempts = 40
)

// Handover is the graceful stop of a leader (the handler's SIGTERM): it ends every
// leadership this process holds and releases the leases (election.Leader.ReleaseAll), and
// sends an immediate handover check for each run it was enqueueing. The checks go out while
// the tasks stop, not after: the instance a check reaches waits for the release (probe), so
// the run resumes one lease read after the release instead of a send and a delivery later. A
// run whose task did not stop in time keeps its lease until it lapses; the handover check
// waits that long, and the lease probes cover it too.
func (c *Coordinator) Handover(ctx context.Context) error {
	runs := c.planning.snapshot() // empty without Config.Control
	sent := make(chan []error, 1)
	go func() { sent <- c.sendHandovers(ctx, runs, election.ErrHandover) }()
	errs := []error{c.cfg.Leader.ReleaseAll(ctx)}
	errs = append(errs, <-sent...)
	return errors.Join(errs...)
}

// sendHandovers sends one handover check per run, each at once; why is logged.
func (c *Coordinator) sendHandovers(ctx context.Context, runs []planningRun, why error) []error {
	var errs []error
	for _, r := range runs {
		msg, err := controlMessage(r.run, r.epoch, "handover", time.Time{}, true)
		if err == nil {
			err = c.control().Send(ctx, []transport.Message{msg})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("handover check for %s: %w", r.run, err))
			continue
		}
		c.log(r.run, r.epoch).Info("handover: check sent; another instance resumes the run once the lease is released",
			"why", why.Error())
	}
	return errs
}

// planningSet records the runs this process is enqueueing, by epoch.
type planningSet struct {
	mu   sync.Mutex
	runs map[planningRun]int
}

type planningRun struct {
	run   string
	epoch int64
}

func (p *planningSet) add(run string, epoch int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.runs == nil {
		p.runs = map[planningRun]int{}
	}
	p.runs[planningRun{run, epoch}]++
}

func (p *planningSet) remove(run string, epoch int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := planningRun{run, epoch}
	if p.runs[k]--; p.runs[k] <= 0 {
		delete(p.runs, k)
	}
}

func (p *planningSet) snapshot() []planningRun {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]planningRun, 0, len(p.runs))
	for k := range p.runs {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].run < out[j].run })
	return out
}
