package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/telemetry"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/internal/lib/parallel"
	"github.com/batonfn/baton/work"
)

// errBatchFull stops a job's planner once a plan batch is full.
var errBatchFull = errors.New("plan batch full")

// resume takes over a run left mid-enqueue: record the takeover (new epoch and a segment
// starting at the checkpoint, fencing the old leader out), then continue enqueueing. ended
// reports that this leadership recorded the plan done.
func (c *Coordinator) resume(ctx context.Context, lease election.Lease, beat func(), run string) (m ledger.Manifest, ended bool, err error) {
	first := false // this leadership is the run's first planner
	m, err = c.cfg.Store.UpdateManifest(ctx, run, lease.Epoch, func(m *ledger.Manifest) error {
		first = false
		if m.PlanDone || m.State.Final() || m.Stop != nil {
			return ledger.ErrNoChange
		}
		first = m.Epoch == 0
		if m.Epoch < lease.Epoch {
			m.Epoch = lease.Epoch
			m.Leader = lease.Holder
			if last := len(m.Segments) - 1; last >= 0 && m.Segments[last].From == m.Checkpoint.Next {
				// Nothing was checkpointed since the last takeover (a wave or slice that
				// ended at once): moving that segment to the new epoch fences exactly what
				// a new segment would, and the manifest does not grow with every slice.
				m.Segments[last].Epoch = lease.Epoch
			} else {
				m.Segments = append(m.Segments, ledger.Segment{Epoch: lease.Epoch, From: m.Checkpoint.Next})
			}
		}
		return nil
	})
	if err != nil {
		return m, false, err
	}
	if m.PlanDone || m.State.Final() || m.Stop != nil {
		return m, false, nil
	}
	if first && !m.Occurrence.IsZero() {
		c.cfg.Telemetry.OccurrenceLag(ctx, m.Schedule, m.Job, c.cfg.Now().Sub(m.Occurrence))
	}
	m, err = c.enqueue(ctx, lease, beat, m)
	return m, err == nil && m.PlanDone && !m.State.Final(), err
}

// enqueue plans and sends the run's partitions batch by batch from the checkpoint of m, the
// manifest as this leadership just wrote it: store the plan batch (create-once; an existing
// one is reused as is), send it, checkpoint. Each step reports progress to the stall watchdog.
// It stops at once when leadership ends and never writes the manifest after that: every write
// is fenced by the lease epoch.
func (c *Coordinator) enqueue(ctx context.Context, lease election.Lease, beat func(), m ledger.Manifest) (_ ledger.Manifest, err error) {
	run := m.RunID
	log := c.log(run, lease.Epoch)
	job, err := c.cfg.Jobs.Lookup(m.Job)
	if err != nil {
		return c.failRun(ctx, lease, run, fmt.Errorf("planning failed: %w", err))
	}
	start := c.cfg.Now()
	var pace pacer
	var paused time.Duration
	sliceStart := time.Now()
	failedSends := 0
	drain := drainRate{quiet: m.Checkpoint.Quiet} // workers' pace, seen while waiting for room (wave.go)
	// stored: the next plan batch may already be stored (by a leader before this one, or by
	// this one before a failed send). Once this slice has checkpointed a batch, the next is
	// new: it is planned and stored without a read first.
	stored := true
	if !m.PlanDone {
		// A full backlog ends the slice before it begins (and before any lease probe is sent).
		if full, err := c.waitForWave(ctx, lease, &m, &drain.counts); err != nil || full {
			return m, err
		}
		defer c.guard(ctx, lease, run)() // lease probes and handover while planning (handover.go)
	}
	ctx, slice := c.cfg.Telemetry.StartSlice(ctx, m.Trace, runOf(m), m.Checkpoint.Next)
	slice.SetEpoch(lease.Epoch)
	defer func() { slice.End(err) }()
	for !m.PlanDone {
		beat()
		if err := ctx.Err(); err != nil {
			return m, fmt.Errorf("enqueue %s stopped: %w", run, context.Cause(ctx))
		}
		if c.overdue(m) {
			return m, c.timeOut(ctx, &lease, m)
		}
		if full, err := c.awaitRoom(ctx, lease, beat, m, sliceStart, &drain); err != nil || full {
			return m, err
		}
		b, err := c.planBatch(ctx, job, &m, stored)
		if err != nil {
			if ctx.Err() != nil {
				return m, fmt.Errorf("enqueue %s stopped: %w", run, context.Cause(ctx))
			}
			if errors.Is(err, errPlanning) {
				return c.failRun(ctx, lease, run, err)
			}
			return m, err
		}
		beat()
		sent := time.Now()
		r := runOf(m)
		r.Epoch = lease.Epoch
		bctx, batch := c.cfg.Telemetry.StartBatch(ctx, r, b.Batch, b.First, len(b.Partitions))
		c.createDone(bctx, log, m, b)
		err = c.send(bctx, m, b, lease.Epoch, 0)
		batch.End(err)
		if pause := pace.observe(len(b.Partitions), time.Since(sent), err); pause > 0 {
			log.Debug("enqueue paced: storage shows strain", "pause", pause.String(), "batch", b.Batch)
			paused += pause
			if !pace.wait(ctx, pause, beat) {
				return m, fmt.Errorf("enqueue %s stopped: %w", run, context.Cause(ctx))
			}
		}
		switch {
		case errors.Is(err, errPlanning):
			return c.failRun(ctx, lease, run, err)
		case transport.IsTransient(err) && failedSends < maxFailedSends:
			// Send the same stored batch again after the pause (same message IDs).
			failedSends++
			stored = true
			log.Warn("enqueue: send failed; sending the batch again", "batch", b.Batch, "try", failedSends, "err", err)
			continue
		case err != nil:
			return m, err
		}
		failedSends = 0
		if ctx.Err() != nil { // leadership ended while sending: leave the checkpoint alone
			return m, fmt.Errorf("enqueue %s stopped: %w", run, context.Cause(ctx))
		}
		now := c.cfg.Now().UTC()
		m, err = c.cfg.Store.UpdateManifest(ctx, run, lease.Epoch, func(m *ledger.Manifest) error {
			if m.State.Final() {
				return fmt.Errorf("run finished as %s while enqueueing: %w", m.State, ledger.ErrFenced)
			}
			if m.Checkpoint.Batches == b.Batch+1 && m.Epoch == lease.Epoch {
				return ledger.ErrNoChange // our own write, whose response was lost and retried
			}
			if m.Checkpoint.Batches != b.Batch {
				return fmt.Errorf("checkpoint moved to batch %d under us (want %d): %w", m.Checkpoint.Batches, b.Batch, ledger.ErrFenced)
			}
			to := ledger.StateEnqueuing
			if b.Last {
				to = ledger.StateRunning
			}
			if err := m.Transition(to); err != nil {
				return err
			}
			m.Checkpoint = ledger.Checkpoint{Batches: b.Batch + 1, Next: b.First + len(b.Partitions), Cursor: b.Cursor,
				Done: m.Checkpoint.Done, Unbounded: m.Checkpoint.Unbounded, Quiet: m.Checkpoint.Quiet}
			// A run overdue in planning is one that stopped making progress: every checkpoint
			// moves its hard deadline a run timeout ahead.
			m.Expires = now.Add(c.runTimeout(*m))
			if b.Last {
				m.PlanDone = true
				m.Partitions = m.Checkpoint.Next
				m.Enqueued = now
				m.Deadline = now.Add(c.runTimeout(*m))
				m.Expires = c.planExpiry(*m, now)
			}
			return nil
		})
		if err != nil {
			return m, err
		}
		stored = false
		if m.Stop != nil && !m.PlanDone {
			// The checkpoint counts the batch just sent; the run's finish counts what was sent.
			log.Warn("run stopped: planning ends", "next", m.Checkpoint.Next, "stoppedBy", m.Stop.By)
			return m, nil
		}
		if budget := c.sliceBudget(ctx); !m.PlanDone && budget > 0 && time.Since(sliceStart) >= budget {
			// No step of a run is bounded by one invocation: hand the rest to a follow-up one.
			if err := c.scheduleCheck(ctx, run, lease.Epoch, continueRound+m.Checkpoint.Batches, c.cfg.Now()); err != nil {
				return m, err
			}
			log.Info("planning slice ended; a follow-up invocation continues from the checkpoint", "next", m.Checkpoint.Next,
				"batches", m.Checkpoint.Batches, "slice", time.Since(sliceStart).Round(time.Millisecond).String())
			return m, nil
		}
	}
	log.Info("run enqueued", "partitions", m.Partitions, "batches", m.Checkpoint.Batches,
		"ms", c.cfg.Now().Sub(start).Milliseconds(), "pacedMs", paused.Milliseconds())
	return m, nil
}

// createDone creates the done shards that record plan batch b's partitions and none before
// it, at once, so no worker's first append to one fails for want of it. A shard it could not
// create is created by its first append, as for a run whose layout this code cannot count.
func (c *Coordinator) createDone(ctx context.Context, log *slog.Logger, m ledger.Manifest, b ledger.PlanBatch) {
	lay := m.DoneLayout
	if !lay.Known() || len(b.Partitions) == 0 {
		return
	}
	from, to := lay.Shards(b.First), lay.Shards(b.First+len(b.Partitions))
	if to <= from {
		return
	}
	parallel.Each(to-from, to-from, func(k int) bool {
		if err := c.cfg.Store.CreateDone(ctx, m.RunID, from+k); err != nil {
			log.Debug("done shard not created ahead; its first append creates it", "shard", from+k, "err", err)
		}
		return true
	})
}

// DefaultFinishGrace is Config.FinishGrace's default: a quarter second longer than a worker's
// copy of a planning manifest may be old (work.PlanningCopyTTL).
const DefaultFinishGrace = work.PlanningCopyTTL + 250*time.Millisecond

// finishAfterPlanning tries to finish a run whose planning this invocation has just ended
// (workers could not know the count before), and once more FinishGrace later for a worker whose
// cached manifest still said planning. It runs after the run's lease is released; its errors
// are logged, since the run's supervision finishes it otherwise.
func (c *Coordinator) finishAfterPlanning(ctx context.Context, log *slog.Logger, run string) {
	done, err := c.cfg.Finisher.TryFinish(ctx, run)
	if err != nil {
		log.Warn("finish after planning", "err", err)
	}
	if done {
		return
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(c.cfg.FinishGrace):
	}
	if _, err := c.cfg.Finisher.TryFinish(ctx, run); err != nil {
		log.Warn("finish after planning, second try", "err", err)
	}
}

// continueRound numbers the checks that continue a sliced planning (continueRound plus the
// checkpoint's batch count), apart from the check chain's own rounds.
const continueRound = 1_000_000

// maxFailedSends bounds how often in a row the leader sends a batch again after a transient
// failure before it gives up (the check chain resumes the run later).
const maxFailedSends = 8

// errPlanning marks a failure of the job's planner (the run fails; retrying will not help).
var errPlanning = errors.New("planning failed")

// planBatch returns plan batch m.Checkpoint.Batches, reusing a stored one (a previous leader
// may have stored it before dying) or planning it from the checkpoint's cursor. Unless stored
// says one may exist, it plans without looking: storing is create-once, so a batch stored
// meanwhile (a leader that took the run over) is read and reused then.
func (c *Coordinator) planBatch(ctx context.Context, job work.Job, m *ledger.Manifest, stored bool) (ledger.PlanBatch, error) {
	idx := m.Checkpoint.Batches
	if stored {
		b, err := c.cfg.Store.ReadPlanBatch(ctx, m.RunID, idx)
		if err == nil {
			return b, nil
		}
		if !errors.Is(err, ledger.ErrNotFound) {
			return b, err
		}
	}
	b := ledger.PlanBatch{Batch: idx, First: m.Checkpoint.Next, Cursor: m.Checkpoint.Cursor}
	perr := job.Plan(ctx, m.Params, m.Checkpoint.Cursor, func(payload json.RawMessage, next string) error {
		if len(b.Partitions) == m.BatchSize {
			return errBatchFull
		}
		if err := fits(m.RunID, b.First+len(b.Partitions), payload); err != nil {
			return err
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
	// A run's later batches are bundled as full ones: the batches before them spread the run
	// over the instances, so a short last batch needs no more, smaller messages.
	n := len(b.Partitions)
	if idx > 0 {
		n = max(n, m.BatchSize)
	}
	if k := c.bundleSize(*m, n); k > 1 {
		b.Bundle = k // the batch's spans: fixed with the batch, whoever sends it later
	}
	if err := c.cfg.Store.PutPlanBatch(ctx, m.RunID, b); errors.Is(err, ledger.ErrExists) {
		return c.cfg.Store.ReadPlanBatch(ctx, m.RunID, idx)
	} else if err != nil {
		return b, err
	}
	return b, nil
}

// bundleSize is the bundle size of a plan batch of n partitions of run m: its job's cap, the
// batch spread over at least BatchSpread messages.
func (c *Coordinator) bundleSize(m ledger.Manifest, n int) int {
	return work.SpreadBundleSize(c.cfg.Jobs.MaxBundle(m.Job), n, c.cfg.BatchSpread)
}

// send enqueues the partitions of a plan batch (or the given subset, one per message) with the
// given epoch and re-enqueue round: the whole batch goes in bundles of consecutive partitions
// (bundles).
func (c *Coordinator) send(ctx context.Context, m ledger.Manifest, b ledger.PlanBatch, epoch int64, round int, only ...int) error {
	parts := 0
	switch {
	case m.PlanDone:
		parts = m.Partitions
	case b.Last:
		// The planner is done: the last batch's messages tell their workers the count, so
		// the appends that end the run need no copy of the manifest saying so.
		parts = b.First + len(b.Partitions)
	}
	size := 1
	switch {
	case len(only) > 0:
	case b.Bundle > 0:
		size = b.Bundle
	default: // a batch planned before blocks: its bundles as then, each result its own
		size = work.BundleSize(c.cfg.Jobs.MaxBundle(m.Job), len(b.Partitions))
	}
	envs := bundles(work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindPartition, Run: m.RunID, Epoch: epoch,
		Parts: parts, Round: round, Block: b.Bundle, Trace: c.cfg.Telemetry.Traceparent(ctx)}, b, size, only)
	msgs := make([]transport.Message, 0, len(envs))
	for _, env := range envs {
		body, err := env.Encode()
		if errors.Is(err, work.ErrTooLarge) && env.Count > 1 {
			// bundles keeps a bundle's payloads well inside the limit; should it still not
			// fit, its partitions go one per message (each fits: see fits).
			for _, one := range env.Singles() {
				if body, err = one.Encode(); err != nil {
					return fmt.Errorf("%w: partition %d of run %s cannot be sent: %w", errPlanning, one.Part, m.RunID, err)
				}
				msgs = append(msgs, transport.Message{ID: one.MessageID(), Body: body, Properties: one.Properties()})
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("%w: partition %d of run %s cannot be sent: %w", errPlanning, env.Part, m.RunID, err)
		}
		msgs = append(msgs, transport.Message{ID: env.MessageID(), Body: body, Properties: env.Properties()})
	}
	if err := c.cfg.Sender.Send(ctx, msgs); errors.Is(err, transport.ErrTooLarge) || errors.Is(err, transport.ErrInvalid) {
		return fmt.Errorf("%w: the transport refuses partitions of %s batch %d: %w", errPlanning, m.RunID, b.Batch, err)
	} else if err != nil {
		return fmt.Errorf("send %d partitions of %s batch %d: %w", len(msgs), m.RunID, b.Batch, err)
	}
	return nil
}

// bundles turns plan batch b's partitions (or only the listed indexes, one per message) into
// envelopes like head: bundles of up to size consecutive partitions, each starting at a
// multiple of size or at the batch's start and ending before its payloads together would pass
// work.MaxPayloadBytes (the room a message leaves for payloads); a bundle of one is a message of
// one partition.
func bundles(head work.Envelope, b ledger.PlanBatch, size int, only []int) []work.Envelope {
	var out []work.Envelope
	if len(only) > 0 {
		want := map[int]bool{}
		for _, i := range only {
			want[i] = true
		}
		for k, payload := range b.Partitions {
			if want[b.First+k] {
				one := head
				one.Part, one.Payload = b.First+k, payload
				out = append(out, one)
			}
		}
		return out
	}
	var (
		cur   work.Envelope
		bytes int
	)
	flush := func() {
		switch n := len(cur.Payloads); {
		case n == 1:
			cur.Count, cur.Payload, cur.Payloads = 0, b.Partitions[cur.Part-b.First], nil
		case n > 1:
			cur.Count = n
			if allEmpty(cur.Payloads) {
				cur.Payloads = nil
			}
		default:
			return
		}
		out = append(out, cur)
		cur, bytes = work.Envelope{}, 0
	}
	for k, payload := range b.Partitions {
		idx := b.First + k
		// A payload costs its bytes and a comma; none is sent as null.
		cost := max(len(payload), len("null")) + 1
		if len(cur.Payloads) > 0 && (idx%size == 0 || bytes+cost > work.MaxPayloadBytes) {
			flush()
		}
		if len(cur.Payloads) == 0 {
			cur = head
			cur.Part = idx
		}
		p := payload
		if len(p) == 0 {
			p = json.RawMessage("null")
		}
		cur.Payloads = append(cur.Payloads, p)
		bytes += cost
	}
	flush()
	return out
}

// allEmpty reports whether no payload is more than null.
func allEmpty(ps []json.RawMessage) bool {
	for _, p := range ps {
		if string(p) != "null" {
			return false
		}
	}
	return true
}

// fits checks that partition index of run, with this payload, encodes within the message limit
// whatever epoch, round and partition count it is later sent with: the size is measured on
// the exact bytes a send produces, with the largest header values. A partition that does not
// fit never will, so planning fails (permanently) and names it.
func fits(run string, index int, payload json.RawMessage) error {
	probe := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindPartition, Run: run, Epoch: 1 << 53,
		Part: index, Parts: max(index+1, 1<<30), Round: 1 << 20, Payload: payload,
		Trace: strings.Repeat("f", work.MaxTraceBytes)}
	if _, err := probe.Encode(); err != nil {
		return fmt.Errorf("partition %d (payload %d bytes) cannot be sent: %w", index, len(payload), err)
	}
	return nil
}

// scheduleCheck sends the run's check message for delivery at `at`.
func (c *Coordinator) scheduleCheck(ctx context.Context, run string, epoch int64, round int, at time.Time) error {
	env := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindCheck, Run: run, Epoch: epoch, Round: round,
		Trace: c.cfg.Telemetry.Traceparent(ctx)}
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

// failRun records a run that cannot be planned as failed, with cause's short form as its
// reason (ledger.Cause: the ledger is readable with a function key); the log gets all of it.
// A run already final (timed out meanwhile) keeps its state.
func (c *Coordinator) failRun(ctx context.Context, lease election.Lease, run string, cause error) (ledger.Manifest, error) {
	reason := ledger.Cause(cause)
	c.log(run, lease.Epoch).Error("run failed", "reason", reason, "err", cause)
	now := c.cfg.Now().UTC()
	changed := false
	m, err := c.cfg.Store.UpdateManifest(ctx, run, lease.Epoch, func(m *ledger.Manifest) error {
		if m.State.Final() {
			changed = false
			return ledger.ErrNoChange // it ended another way first; its outcome stands
		}
		if err := m.Transition(ledger.StateFailed); err != nil {
			return err
		}
		changed = true
		m.Reason, m.Finished = reason, now
		return nil
	})
	if err == nil && changed {
		c.finished(ctx, m)
	}
	return m, err
}

// finished counts m, which this process has just made final.
func (c *Coordinator) finished(ctx context.Context, m ledger.Manifest) {
	c.cfg.Telemetry.RunFinished(ctx, m.Schedule, m.Job, string(m.State), m.Created, m.Finished)
}

// runOf is m as spans describe it.
func runOf(m ledger.Manifest) telemetry.Run {
	return telemetry.Run{ID: m.RunID, Schedule: m.Schedule, Job: m.Job, Epoch: m.Epoch}
}
