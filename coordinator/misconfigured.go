package coordinator

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/batonfn/baton/election"
	"github.com/batonfn/baton/ledger"
)

// StatusMisconfigured is a tick that recorded its occurrence as a failed run because the timer
// job is misconfigured (Config.JobError).
const StatusMisconfigured Status = "misconfigured"

// misconfigured records a timer occurrence as a failed run, without planning or enqueueing
// anything, when the timer job is misconfigured. The reason is Config.JobError's text, which
// names the setting to fix. The manifest is created once: ErrExists means another leader (or an
// earlier delivery of this tick) already recorded it. done is false when the job is fine or the
// run is not a timer run, and the caller goes on to start the run.
func (c *Coordinator) misconfigured(ctx context.Context, lease election.Lease, spec runSpec) (out Outcome, done bool, err error) {
	if c.cfg.JobError == nil || spec.trigger != ledger.TriggerTimer {
		return Outcome{}, false, nil
	}
	m := c.newManifest(spec, lease)
	m.State, m.Reason, m.Finished = ledger.StateFailed, c.cfg.JobError.Error(), m.Created
	if !json.Valid(m.Params) {
		m.Params = nil // the reason quotes them; the manifest itself must stay valid JSON
	}
	out = Outcome{Status: StatusMisconfigured, Run: spec.id, Epoch: lease.Epoch, State: ledger.StateFailed, Reason: m.Reason}
	switch err := c.cfg.Store.CreateManifest(ctx, &m); {
	case errors.Is(err, ledger.ErrExists):
		out.Status = StatusExisting
		return out, true, nil
	case err != nil:
		return Outcome{}, true, err
	}
	c.log(spec.id, lease.Epoch).Error("timer job is misconfigured; occurrence recorded as failed", "reason", m.Reason)
	return out, true, nil
}
