package coordinator

import (
	"context"
	"errors"
	"fmt"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/work"
)

// Errors of Redrive the API answers 409 to.
var (
	// ErrNothingToRedrive: every partition of the run succeeded.
	ErrNothingToRedrive = errors.New("nothing to redrive")
	// ErrPlanGone: the run's stored plan (the payloads a redrive sends again) is gone, deleted by
	// retention.
	ErrPlanGone = errors.New("the run's plan is gone")
	// ErrPlanChanged: the run's job is no longer registered, or refuses the run's params.
	ErrPlanChanged = errors.New("the run's job would not plan it again")
)

// RedriveOutcome is what Redrive did.
type RedriveOutcome struct {
	Run        string
	Round      int
	Partitions int
	// Existing is true when the Idempotency-Key named a round an earlier request started.
	Existing bool
	State    ledger.State
}

// redriveRound numbers the check at a redrive round's deadline (plus the round), apart from the
// run's other chains.
const redriveRound = 1_600_000_000

// redriveSend is how many redriven partitions one send carries.
const redriveSend = 256

// Redrive runs the partitions of run whose outcome is not a success (failed, timed out, or
// dead-lettered and then timed out) again, in a new redrive round of the same run, on behalf of
// by; key is the caller's Idempotency-Key: a request with the key of an earlier round answers
// that round (Existing). The partitions are sent again from the run's stored plan batches (the
// very payloads planned, so the plan cannot differ), each alone, under the job's retry policy.
// The run goes back to running and, once they all have a result, is aggregated once more, into
// the round's report, each partition's latest round standing for it.
//
// Refused: a run that is not final, or ended other than partial, failed or timed out (a stopped
// run among them: ledger.ErrReopen); one whose partitions all succeeded (ErrNothingToRedrive);
// more than ledger.MaxRedrive partitions (ErrBadRequest); a job no longer registered or refusing
// the run's params (ErrPlanChanged); a plan deleted by retention (ErrPlanGone);
// ledger.ErrNotFound for no run.
func (c *Coordinator) Redrive(ctx context.Context, run, key, by string) (RedriveOutcome, error) {
	out := RedriveOutcome{Run: run}
	m, err := c.cfg.Store.ReadManifest(ctx, run)
	if err != nil {
		return out, err
	}
	if rd, ok := redriveOf(m, key); ok {
		out.Round, out.Partitions, out.Existing, out.State = rd.Round, len(rd.Indexes), true, m.State
		if m.Round == rd.Round && !m.State.Final() {
			// The request that started it may have failed before every message went out.
			return out, c.sendRedrive(ctx, m, rd.Round, rd.Indexes, 0)
		}
		return out, nil
	}
	probe := m
	if err := probe.Reopen(ledger.Redrive{Round: m.Round + 1}); err != nil {
		return out, err
	}
	if err := c.cfg.Jobs.ValidateParams(m.Job, m.Params); err != nil {
		return out, fmt.Errorf("%w: %w", ErrPlanChanged, err)
	}
	idx, err := c.unsucceeded(ctx, m)
	if err != nil {
		return out, err
	}
	switch {
	case len(idx) == 0:
		return out, fmt.Errorf("%w: every partition of run %s succeeded", ErrNothingToRedrive, run)
	case len(idx) > ledger.MaxRedrive:
		return out, fmt.Errorf("%w: %d partitions did not succeed, more than a redrive runs again (%d): start a new run", ErrBadRequest,
			len(idx), ledger.MaxRedrive)
	}
	// Every payload must still be there before the run reopens.
	if _, err := c.batchesOf(ctx, m, idx); err != nil {
		return out, err
	}
	now := c.cfg.Now().UTC()
	rd := ledger.Redrive{Round: m.Round + 1, Key: key, By: by, At: now, Indexes: idx}
	if err := c.cfg.Store.AddActive(ctx, ledger.ActiveOf(&m)); err != nil {
		return out, err
	}
	m, err = c.cfg.Store.UpdateManifest(ctx, run, ledger.NoFence, func(cur *ledger.Manifest) error {
		if _, ok := redriveOf(*cur, key); ok {
			return ledger.ErrNoChange // our own update, its answer lost
		}
		if err := cur.Reopen(rd); err != nil {
			return err
		}
		cur.Deadline = now.Add(c.runTimeout(*cur))
		cur.Expires = c.planExpiry(*cur, now)
		return nil
	})
	if err != nil {
		return out, err
	}
	got, _ := redriveOf(m, key)
	out.Round, out.Partitions, out.State = got.Round, len(got.Indexes), m.State
	log := c.log(run, m.Epoch).With("round", got.Round, "by", by)
	log.Warn("run redriven: its partitions that did not succeed run again", "partitions", len(got.Indexes), "from", got.From)
	ctx, span := c.cfg.Telemetry.StartRedrive(ctx, m.Trace, runOf(m), got.Round)
	err = c.sendRedrive(ctx, m, got.Round, got.Indexes, 0)
	span.End(err)
	if err != nil {
		return out, err
	}
	if err := c.scheduleCheck(ctx, run, m.Epoch, redriveRound+got.Round, m.Deadline); err != nil {
		log.Warn("redrive: the deadline check was not sent; the heartbeat supervises the round", "err", err)
	}
	return out, nil
}

// redriveOf finds m's redrive round started with key.
func redriveOf(m ledger.Manifest, key string) (ledger.Redrive, bool) {
	for _, rd := range m.Redrives {
		if rd.Key == key {
			return rd, true
		}
	}
	return ledger.Redrive{}, false
}

// unsucceeded lists, ascending, m's partitions whose latest outcome over its rounds is not a
// success (or that have none).
func (c *Coordinator) unsucceeded(ctx context.Context, m ledger.Manifest) ([]int, error) {
	ok := make([]bool, m.Partitions)
	for r := 0; r <= m.Round; r++ {
		if err := ledger.ReadAll(ctx, c.cfg.Store, ledger.RoundRun(m.RunID, r), func(res ledger.Result) {
			if res.Index >= 0 && res.Index < len(ok) {
				ok[res.Index] = res.OK
			}
		}); err != nil {
			return nil, err
		}
	}
	var out []int
	for i, good := range ok {
		if !good {
			out = append(out, i)
		}
	}
	return out, nil
}

// batchesOf reads the plan batches holding idx; ErrPlanGone when one is missing.
func (c *Coordinator) batchesOf(ctx context.Context, m ledger.Manifest, idx []int) (map[int]ledger.PlanBatch, error) {
	out := map[int]ledger.PlanBatch{}
	for _, i := range idx {
		b := m.BatchOf(i)
		if _, ok := out[b]; ok {
			continue
		}
		pb, err := c.cfg.Store.ReadPlanBatch(ctx, m.RunID, b)
		if errors.Is(err, ledger.ErrNotFound) {
			return nil, fmt.Errorf("%w: run %s has no plan batch %d (deleted by retention?)", ErrPlanGone, m.RunID, b)
		}
		if err != nil {
			return nil, err
		}
		out[b] = pb
	}
	return out, nil
}

// sendRedrive sends partitions idx of m in redrive round `round`, each alone, as re-enqueue
// round `again` (0 the first time; each resend of the missing ones gets new message IDs).
func (c *Coordinator) sendRedrive(ctx context.Context, m ledger.Manifest, round int, idx []int, again int) error {
	batches, err := c.batchesOf(ctx, m, idx)
	if err != nil {
		return err
	}
	var msgs []transport.Message
	flush := func() error {
		if len(msgs) == 0 {
			return nil
		}
		err := c.cfg.Sender.Send(ctx, msgs)
		msgs = msgs[:0]
		return err
	}
	for _, i := range idx {
		pb := batches[m.BatchOf(i)]
		k := i - pb.First
		if k < 0 || k >= len(pb.Partitions) {
			return fmt.Errorf("redrive %s: plan batch %d does not hold partition %d", m.RunID, pb.Batch, i)
		}
		env := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindPartition, Run: m.RunID, Epoch: max(m.Epoch, 1), Part: i,
			Parts: m.Partitions, Round: again, Payload: pb.Partitions[k], Redrive: round,
			Trace: c.cfg.Telemetry.Traceparent(ctx)}
		body, err := env.Encode()
		if err != nil {
			return fmt.Errorf("redrive %s: %w", m.RunID, err)
		}
		msgs = append(msgs, transport.Message{ID: env.MessageID(), Body: body, Properties: env.Properties()})
		if len(msgs) == redriveSend {
			if err := flush(); err != nil {
				return fmt.Errorf("redrive %s: %w", m.RunID, err)
			}
		}
	}
	if err := flush(); err != nil {
		return fmt.Errorf("redrive %s: %w", m.RunID, err)
	}
	return nil
}

// checkRound is check for a run in a redrive round: finish it once every partition it runs
// again has a result; before its deadline, look again then; past it, send the missing ones again
// for up to CheckRounds rounds, then record them timed out (in the round) and finish.
func (c *Coordinator) checkRound(ctx context.Context, m ledger.Manifest, next int) error {
	log := c.log(m.RunID, m.Epoch).With("round", m.Round)
	if c.cfg.Finisher != nil {
		if done, err := c.cfg.Finisher.FinishRound(ctx, m.RunID); err != nil {
			return fmt.Errorf("check: finish redrive round %d of %s: %w", m.Round, m.RunID, err)
		} else if done {
			log.Info("check: redrive round finished")
			return nil
		}
	}
	now := c.cfg.Now()
	overdue := c.overdue(m)
	if !overdue && now.Before(m.Deadline) {
		return c.scheduleCheck(ctx, m.RunID, m.Epoch, next, m.Deadline)
	}
	rd := m.Redriving()
	if rd == nil {
		return nil
	}
	key := ledger.RoundRun(m.RunID, m.Round)
	missing, latest, err := c.missingOf(ctx, key, m.Partitions, rd.Indexes)
	if err != nil {
		return err
	}
	retryAt := now.Add(c.retryInterval(m))
	if !overdue && len(missing) > 0 {
		if moved, err := c.waitForLimit(ctx, m, progress{missing: len(missing), of: len(rd.Indexes), latest: latest}, next); moved || err != nil {
			return err
		}
	}
	switch {
	case len(missing) == 0:
		// Complete, but another aggregator holds the claim: look again.
		return c.scheduleCheck(ctx, m.RunID, m.Epoch, next, retryAt)
	case !overdue && m.CheckRound < c.cfg.CheckRounds:
		again := m.CheckRound + 1
		if err := c.sendRedrive(ctx, m, m.Round, missing, again); err != nil {
			return err
		}
		round := m.Round
		m, err := c.cfg.Store.UpdateManifest(ctx, m.RunID, ledger.NoFence, func(cur *ledger.Manifest) error {
			if cur.Round != round || cur.CheckRound != again-1 || cur.State.Final() {
				return ledger.ErrNoChange
			}
			cur.CheckRound, cur.Deadline = again, retryAt.UTC()
			return nil
		})
		if err != nil {
			return err
		}
		log.Warn("check: re-enqueued the redrive round's missing partitions", "missing", len(missing), "again", again)
		return c.scheduleCheck(ctx, m.RunID, m.Epoch, next, m.Deadline)
	}
	log.Warn("check: the redrive round's missing partitions are recorded timed out", "missing", len(missing))
	at := now.UTC()
	for _, i := range missing {
		res := ledger.Result{Run: key, Index: i, Epoch: m.Epoch, TimedOut: true, Worker: c.cfg.Identity, Started: at, Finished: at,
			Error: fmt.Sprintf("timed out: no result in redrive round %d by its deadline after %d re-enqueue rounds", m.Round, m.CheckRound)}
		if recs, _ := ledger.Record(ctx, c.cfg.Store, key, ledger.Span{}, []ledger.Result{res}, nil); recs[0].Err != nil {
			return recs[0].Err
		}
	}
	if c.cfg.Finisher != nil {
		if done, err := c.cfg.Finisher.FinishRound(ctx, m.RunID); err != nil || done {
			return err
		}
	}
	return c.scheduleCheck(ctx, m.RunID, m.Epoch, next, now.Add(c.checkDelay()))
}
