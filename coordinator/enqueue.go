package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/batonfn/baton/ledger"
	"github.com/batonfn/baton/transport"
	"github.com/batonfn/baton/work"
)

// errBatchFull stops a job's planner once a plan batch is full.
var errBatchFull = errors.New("plan batch full")

// resume takes over a run left mid-enqueue: record the takeover (new epoch and a segment
// starting at the checkpoint, fencing the old leader out), then continue enqueueing.
func (c *Coordinator) resume(ctx context.Context, lease Lease, beat func(), run string) (ledger.Manifest, error) {
	m, err := c.cfg.Store.UpdateManifest(ctx, run, lease.Epoch, func(m *ledger.Manifest) error {
		if m.PlanDone || m.State.Final() {
			return ledger.ErrNoChange
		}
		if m.Epoch < lease.Epoch {
			m.Epoch = lease.Epoch
			m.Leader = holderOf(lease.Holder)
			m.Segments = append(m.Segments, ledger.Segment{Epoch: lease.Epoch, From: m.Checkpoint.Next})
		}
		return nil
	})
	if err != nil {
		return m, err
	}
	if m.PlanDone || m.State.Final() {
		return m, nil
	}
	return c.enqueue(ctx, lease, beat, run)
}

// enqueue plans and sends the run's partitions batch by batch from the manifest's checkpoint:
// store the plan batch (create-once; an existing one is reused as is), send it, checkpoint.
// Each step reports progress to the stall watchdog. It stops at once when leadership ends and
// never writes the manifest after that: every write is fenced by the lease epoch.
func (c *Coordinator) enqueue(ctx context.Context, lease Lease, beat func(), run string) (ledger.Manifest, error) {
	log := c.log(run, lease.Epoch)
	m, err := c.cfg.Store.ReadManifest(ctx, run)
	if err != nil {
		return m, err
	}
	job, err := c.cfg.Jobs.Lookup(m.Job)
	if err != nil {
		return c.failRun(ctx, lease, run, fmt.Sprintf("planning failed: %v", err))
	}
	start := c.cfg.Now()
	if !m.PlanDone {
		defer c.guard(ctx, lease, run)() // lease probes and handover while planning (handover.go)
	}
	for !m.PlanDone {
		beat()
		if err := ctx.Err(); err != nil {
			return m, fmt.Errorf("enqueue %s stopped: %w", run, context.Cause(ctx))
		}
		b, err := c.planBatch(ctx, job, &m)
		if err != nil {
			if ctx.Err() != nil {
				return m, fmt.Errorf("enqueue %s stopped: %w", run, context.Cause(ctx))
			}
			if errors.Is(err, errPlanning) {
				return c.failRun(ctx, lease, run, err.Error())
			}
			return m, err
		}
		beat()
		if err := c.send(ctx, m, b, lease.Epoch, 0); err != nil {
			return m, err
		}
		if ctx.Err() != nil { // leadership ended while sending: leave the checkpoint alone
			return m, fmt.Errorf("enqueue %s stopped: %w", run, context.Cause(ctx))
		}
		now := c.cfg.Now().UTC()
		m, err = c.cfg.Store.UpdateManifest(ctx, run, lease.Epoch, func(m *ledger.Manifest) error {
			if m.Checkpoint.Batches != b.Batch {
				return fmt.Errorf("checkpoint moved to batch %d under us (want %d): %w", m.Checkpoint.Batches, b.Batch, ledger.ErrFenced)
			}
			m.Checkpoint = ledger.Checkpoint{Batches: b.Batch + 1, Next: b.First + len(b.Partitions), Cursor: b.Cursor}
			m.State = ledger.StateEnqueuing
			if b.Last {
				m.PlanDone = true
				m.Partitions = m.Checkpoint.Next
				m.State = ledger.StateRunning
				m.Enqueued = now
				m.Deadline = now.Add(c.cfg.RunTimeout)
			}
			return nil
		})
		if err != nil {
			return m, err
		}
	}
	log.Info("run enqueued", "partitions", m.Partitions, "batches", m.Checkpoint.Batches,
		"ms", c.cfg.Now().Sub(start).Milliseconds())
	if c.cfg.Finisher != nil {
		// Workers may have recorded every result before planning ended (or there are no
		// partitions at all); they could not know the count then, so the leader tries now.
		if _, err := c.cfg.Finisher.TryFinish(ctx, run); err != nil {
			log.Warn("finish after planning", "err", err)
		}
	}
	return m, nil
}

// errPlanning marks a failure of the job's planner (the run fails; retrying will not help).
var errPlanning = errors.New("planning failed")

// planBatch returns plan batch m.Checkpoint.Batches, reusing a stored one (a previous leader
// may have stored it before dying) or planning it from the checkpoint's cursor.
func (c *Coordinator) planBatch(ctx context.Context, job work.Job, m *ledger.Manifest) (ledger.PlanBatch, error) {
	idx := m.Checkpoint.Batches
	b, err := c.cfg.Store.ReadPlanBatch(ctx, m.RunID, idx)
	if err == nil {
		return b, nil
	}
	if !errors.Is(err, ledger.ErrNotFound) {
		return b, err
	}
	b = ledger.PlanBatch{Batch: idx, First: m.Checkpoint.Next, Cursor: m.Checkpoint.Cursor}
	perr := job.Plan(ctx, m.Params, m.Checkpoint.Cursor, func(payload json.RawMessage, next string) error {
		if len(b.Partitions) == m.BatchSize {
			return errBatchFull
		}
		if len(payload) > work.MaxPayloadBytes {
			return fmt.Errorf("partition %d payload is %d bytes, limit %d", b.First+len(b.Partitions), len(payload), work.MaxPayloadBytes)
		}
		b.Partitions = append(b.Partitions, payload)
		b.Cursor = next
		return nil
	})
	switch {
	case errors.Is(perr, errBatchFull):
	case perr != nil:
		if ctx.Err() != nil {
			return b, ctx.Err()
		}
		return b, fmt.Errorf("%w: job %s: %v", errPlanning, m.Job, perr)
	default:
		b.Last = true
	}
	if err := c.cfg.Store.PutPlanBatch(ctx, m.RunID, b); errors.Is(err, ledger.ErrExists) {
		return c.cfg.Store.ReadPlanBatch(ctx, m.RunID, idx)
	} else if err != nil {
		return b, err
	}
	return b, nil
}

// send enqueues the partitions of a plan batch (or the given subset) with the given epoch and
// re-enqueue round.
func (c *Coordinator) send(ctx context.Context, m ledger.Manifest, b ledger.PlanBatch, epoch int64, round int, only ...int) error {
	parts := 0
	if m.PlanDone {
		parts = m.Partitions
	}
	want := map[int]bool{}
	for _, i := range only {
		want[i] = true
	}
	msgs := make([]transport.Message, 0, len(b.Partitions))
	for k, payload := range b.Partitions {
		idx := b.First + k
		if len(only) > 0 && !want[idx] {
			continue
		}
		env := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindPartition, Run: m.RunID, Epoch: epoch,
			Part: idx, Parts: parts, Round: round, Payload: payload}
		body, err := env.Encode()
		if err != nil {
			return fmt.Errorf("encode partition %s/%d: %w", m.RunID, idx, err)
		}
		msgs = append(msgs, transport.Message{ID: env.MessageID(), Body: body, Properties: env.Properties()})
	}
	if err := c.cfg.Sender.Send(ctx, msgs); err != nil {
		return fmt.Errorf("send %d partitions of %s batch %d: %w", len(msgs), m.RunID, b.Batch, err)
	}
	return nil
}

// scheduleCheck sends the run's check message for delivery at `at`.
func (c *Coordinator) scheduleCheck(ctx context.Context, run string, epoch int64, round int, at time.Time) error {
	env := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindCheck, Run: run, Epoch: epoch, Round: round}
	body, err := env.Encode()
	if err != nil {
		return err
	}
	msg := transport.Message{ID: env.MessageID(), Body: body, Properties: env.Properties(), NotBefore: at}
	if err := c.control().Send(ctx, []transport.Message{msg}); err != nil {
		return fmt.Errorf("schedule check %d of %s: %w", round, run, err)
	}
	c.log(run, epoch).Info("check scheduled", "round", round, "at", at.UTC())
	return nil
}

// failRun records a run that cannot be planned as failed.
func (c *Coordinator) failRun(ctx context.Context, lease Lease, run, reason string) (ledger.Manifest, error) {
	c.log(run, lease.Epoch).Error("run failed", "reason", reason)
	now := c.cfg.Now().UTC()
	return c.cfg.Store.UpdateManifest(ctx, run, lease.Epoch, func(m *ledger.Manifest) error {
		m.State, m.Reason, m.Finished = ledger.StateFailed, reason, now
		return nil
	})
}
