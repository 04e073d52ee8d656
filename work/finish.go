package work

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/telemetry"
	"go.opentelemetry.io/otel/trace"
)

// TryFinish aggregates the run if every partition has a result and nobody else is doing it, and
// reports whether this call finished it (final report written, manifest final); at most one
// call per run does, across processes. It returns false, nil when the run is not complete or
// not yet provably so, another aggregator holds a fresh claim, the run is already finished, or
// another call in this process is trying (which tries once more for this one). Workers call it
// when a done append reaches its shard's count; the coordinator after planning and from checks.
func (w *Worker) TryFinish(ctx context.Context, run string) (finished bool, err error) {
	return w.finishing.finish(ctx, run, true, func(countFirst bool) (bool, error) { return w.tryFinish(ctx, run, countFirst, nil, false) })
}

// FinishStopped finishes a run that has a Stop (a cancel, or its failure budget) in the Stop's
// state, aggregating the results it has: partitions without one are counted cancelled. Like
// TryFinish, at most one call per run finishes it; false, nil when the run has no Stop, is
// final, or another aggregator holds a fresh claim. Callers wait for the partitions in flight
// at the Stop to end first (coordinator: the stop grace).
func (w *Worker) FinishStopped(ctx context.Context, run string) (finished bool, err error) {
	return w.finishing.finish(ctx, run, false, func(bool) (bool, error) { return w.tryFinish(ctx, run, false, nil, true) })
}

// TryFinishByListing is TryFinish without the done-count pre-check: the listing of results/
// alone decides. It costs a listing of the run's results on every call, so it is meant for the
// check message once a listing has shown every result present: a result whose done record was
// lost (the worker crashed between the two writes on the message's last delivery, so no
// redelivery appends it) cannot then strand the run.
func (w *Worker) TryFinishByListing(ctx context.Context, run string) (finished bool, err error) {
	return w.finishing.finish(ctx, run, false, func(countFirst bool) (bool, error) { return w.tryFinish(ctx, run, countFirst, nil, false) })
}

// finishFrom is TryFinish for a delivery holding m, its copy of run's manifest: when m says
// planning is done, the first attempt starts from it instead of reading the manifest.
// Everything a finish takes from the manifest (the partition count, the job, the done and fold
// layouts) stays as it is once planning is done, and the report's create-once claim decides
// who finishes; a run that finished since the copy costs the attempt its counts and its claim,
// which find it so. The appends that complete a run's done shards all ask for a finish at the
// end of a run, so the copy saves the manifest one read each.
func (w *Worker) finishFrom(ctx context.Context, run string, m *ledger.Manifest) (bool, error) {
	if !m.PlanDone {
		return w.TryFinish(ctx, run)
	}
	known := m
	return w.finishing.finish(ctx, run, true, func(countFirst bool) (bool, error) {
		first := known
		known = nil // an attempt made again for the calls handed over reads the manifest
		return w.tryFinish(ctx, run, countFirst, first, false)
	})
}

// tryFinish is one finish attempt, from a copy of known when given, else from a manifest read
// now: of a complete run, or with stopped of a run that has a Stop (which only that finishes).
func (w *Worker) tryFinish(ctx context.Context, run string, countFirst bool, known *ledger.Manifest, stopped bool) (bool, error) {
	var m ledger.Manifest
	if known != nil {
		m = *known
	} else {
		var err error
		if m, err = w.cfg.Store.ReadManifest(ctx, run); err != nil {
			return false, fmt.Errorf("finish %s: %w", run, err)
		}
	}
	if m.State.Final() || stopped != (m.Stop != nil) || !stopped && (!m.PlanDone || m.Round > 0) {
		return false, nil // a redrive round is FinishRound's
	}
	job, err := w.cfg.Jobs.Lookup(m.Job)
	if err != nil {
		return false, fmt.Errorf("finish %s: %w", run, err)
	}
	if stopped {
		m.RunID = ledger.RoundRun(run, m.Round) // a round stopped: its report, at the round's key
		return w.finishClaimed(ctx, job, &m, nil, &folded{})
	}
	// A folding run proves completeness from its partials (FoldShards reads) instead of
	// listing every result; results never folded in are listed and read one by one.
	mj, folding := job.(Merger)
	folding = folding && m.FoldShards > 0
	var fo folded
	ok := true
	if countFirst {
		// An attempt from a delivery's copy is a worker's whose append reached its shard's
		// count: most such come before the run's end, so the run's last shard is read first.
		ok, err = w.countsComplete(ctx, &m, known != nil)
	}
	switch {
	case err != nil || !ok:
	case folding && countFirst:
		// The counts say every partition is recorded: claim first, so that of the workers
		// whose appends end the run together only the aggregator reads the partials
		// (finishClaimed proves the run complete from them, or lets go).
		return w.finishClaimed(ctx, job, &m, mj, nil)
	case folding:
		fo, ok, err = w.proveFolded(ctx, &m)
	default:
		ok, err = w.listedAll(ctx, &m)
	}
	if err != nil || !ok {
		if err != nil {
			err = fmt.Errorf("finish %s: %w", run, err)
		}
		return false, err
	}
	if !folding {
		mj = nil
	}
	return w.finishClaimed(ctx, job, &m, mj, &fo)
}

// proveFolded reads m's partials and reports whether the run is complete: every partition
// folded in, or else every result listed.
func (w *Worker) proveFolded(ctx context.Context, m *ledger.Manifest) (folded, bool, error) {
	fo, err := w.readFolded(ctx, m)
	if err != nil {
		return fo, false, err
	}
	if len(fo.missing(m)) == 0 {
		return fo, true, nil
	}
	ok, err := w.listedAll(ctx, m)
	return fo, ok, err
}

// finishClaimed claims m's report and, as its one aggregator, aggregates the run (from the
// partials fo when mj is not nil, else from every result), writes the final report and settles
// the manifest. With fo nil (claimed on the done counts alone) it first reads the partials and
// proves the run complete (proveFolded), else releases the claim and reports false, nil.
func (w *Worker) finishClaimed(ctx context.Context, job Job, mp *ledger.Manifest, mj Merger, fo *folded) (finished bool, err error) {
	m, run := *mp, mp.RunID
	if w.cfg.Telemetry.On() {
		var span telemetry.Span
		ctx, span = w.cfg.Telemetry.StartFinish(ctx, m.Trace, telemetry.Run{ID: run, Schedule: m.Schedule, Job: m.Job, Epoch: m.Epoch})
		defer func() {
			if !finished {
				span.SetState("not-finished")
			}
			span.End(err)
		}()
	}
	log := w.logger().With("run", run, "partitions", m.Partitions)
	// One finish per run at a time in this process (finishGate): the claim's token is this
	// process's, so two of its callers at once would both take the claim for their own.
	mine, outcome, err := w.claim(ctx, &m)
	if err != nil || outcome != claimed {
		return false, err
	}

	start := w.now()
	hold := w.holdClaim(ctx, mine)
	var rep ledger.Report
	var aerr error
	complete := true
	if fo == nil {
		var f folded
		if f, complete, aerr = w.proveFolded(hold.ctx, &m); complete && aerr == nil {
			fo = &f
		}
	}
	switch {
	case aerr != nil || !complete:
	case mj != nil && len(fo.missing(&m)) <= maxUnfoldedReads:
		rep, aerr = w.aggregateFolded(hold.ctx, mj, &m, *fo)
	default:
		rep, aerr = w.aggregate(hold.ctx, job, &m)
	}
	etag, lost := hold.stop()
	if lost {
		log.Warn("lost the report claim while aggregating: another worker took it over and finishes the run",
			"aggregation", w.now().Sub(start).String())
		return false, nil
	}
	if !complete || aerr != nil && !errors.Is(aerr, ErrPermanent) {
		// Release the claim so the next attempt (a redelivery or a check) takes it over at once.
		release := ledger.Report{Run: run, Job: m.Job, State: ledger.StateRunning, Partitions: m.Partitions, Aggregator: w.cfg.Holder}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.RecordTimeout)
		defer cancel()
		if _, err := w.cfg.Store.WriteReport(rctx, release, etag); err != nil {
			log.Warn("could not release the report claim; it is taken over once stale", "err", err)
		}
		if !complete && aerr == nil {
			// Duplicate done records made the counts look complete.
			log.Info("the done counts said complete but a result is missing; released the report claim")
			return false, nil
		}
		return false, fmt.Errorf("finish %s: aggregate: %w", run, aerr)
	}
	reason := ""
	if aerr != nil {
		// The job says aggregating these results can never work: the run failed.
		log.Error("aggregation failed permanently; the run failed", "err", aerr)
		rep.State, reason = ledger.StateFailed, "aggregate: "+ledger.Cause(aerr)
		rep.Aggregate, _ = json.Marshal(map[string]string{"error": ledger.Cause(aerr)})
	} else if m.Stop != nil {
		reason = m.Stop.Reason(rep.Cancelled)
	}
	// The claim's token stays in the final report: a retry of this process that finds the
	// report final knows its own write took effect (see claim).
	rep.Created, rep.Claim = w.now(), mine.report.Claim
	if _, err := w.cfg.Store.WriteReport(ctx, rep, etag); err != nil {
		return false, fmt.Errorf("finish %s: %w", run, err)
	}
	// The final report is the run's outcome, written once under the claim: this call
	// aggregated the run, whatever happens to the manifest's copy below. (Its update may take
	// effect with its answer lost, so that the retry finds the manifest final already; or fail,
	// and the next try finds the report and settles the manifest from it.)
	log.Info("run finished", "state", rep.State, "succeeded", rep.Succeeded, "failed", rep.Failed,
		"aggregation", rep.Created.Sub(start).String())
	w.ended.add(run)
	if _, err := w.settle(ctx, rep, reason); err != nil {
		return false, err
	}
	w.ended.take(run)
	return true, nil
}

// endedRuns are the runs whose end this process logged ("run finished") and whose manifest it
// has yet to settle: a retry that settles one from the report says so, and does not log the
// end again.
type endedRuns struct {
	mu   sync.Mutex
	runs map[string]bool
}

func (e *endedRuns) add(run string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.runs == nil {
		e.runs = map[string]bool{}
	}
	e.runs[run] = true
}

// take forgets run and reports whether its end was logged here.
func (e *endedRuns) take(run string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	logged := e.runs[run]
	delete(e.runs, run)
	return logged
}

// maxUnfoldedReads is how many results a folding finish reads one by one (those never folded
// in); past it, the concurrent full read is faster.
const maxUnfoldedReads = 256

type claimOutcome int

const (
	busy    claimOutcome = iota // another worker holds a fresh claim, or finished
	claimed                     // this worker is the aggregator
	settled                     // the report was final; this call copied it into the manifest (its writer finished the run)
)

// claim makes this worker the run's one aggregator: it creates report.json with an
// in-progress report, or takes over a stale claim. It returns the claim as written.
func (w *Worker) claim(ctx context.Context, m *ledger.Manifest) (heldClaim, claimOutcome, error) {
	mine := ledger.Report{Run: m.RunID, Job: m.Job, State: ledger.StateRunning, Partitions: m.Partitions,
		Aggregator: w.cfg.Holder, Claim: w.claimToken(m.RunID), Created: w.now()}
	etag, err := w.cfg.Store.ClaimReport(ctx, mine)
	if err == nil {
		return heldClaim{mine, etag}, claimed, nil
	}
	if !errors.Is(err, ledger.ErrExists) {
		return heldClaim{}, busy, fmt.Errorf("finish %s: %w", m.RunID, err)
	}
	cur, curTag, err := w.cfg.Store.ReadReport(ctx, m.RunID)
	if err != nil {
		return heldClaim{}, busy, fmt.Errorf("finish %s: %w", m.RunID, err)
	}
	if cur.Claim == mine.Claim && !cur.State.Final() {
		// Our own create: its response was lost and the retry found the blob.
		w.logger().Info("report claim answered 'exists' but the claim is ours (a lost response); aggregating",
			"run", m.RunID)
		return heldClaim{cur, curTag}, claimed, nil
	}
	log := w.logger().With("run", m.RunID, "claimedBy", cur.Aggregator, "claimed", cur.Created, "renewed", cur.Renewed)
	if cur.State.Final() {
		// The aggregator wrote the report and stopped before the manifest: finish its work.
		changed, err := w.settle(ctx, cur, "")
		if err != nil {
			return heldClaim{}, busy, err
		}
		logged := w.ended.take(m.RunID)
		if !changed {
			return heldClaim{}, busy, nil
		}
		if cur.Claim == mine.Claim && !logged {
			// This process aggregated: its report's write took effect with its answer lost.
			log.Info("run finished", "state", cur.State, "succeeded", cur.Succeeded, "failed", cur.Failed)
		} else {
			log.Warn("report was written but the manifest was not final; settled it",
				"state", cur.State, "succeeded", cur.Succeeded, "failed", cur.Failed)
		}
		return heldClaim{}, settled, nil
	}
	age := mine.Created.Sub(cur.ClaimedAt())
	if !cur.Created.IsZero() && age < w.cfg.StaleClaim {
		return heldClaim{}, busy, nil // someone else is aggregating
	}
	etag, err = w.cfg.Store.WriteReport(ctx, mine, curTag)
	if err != nil {
		// Most likely another worker took it over first, or its aggregator renewed it; or our
		// write took effect and its answer was lost. Look before calling it an error. (The token
		// tells our claim apart from another takeover by this same process.)
		again, againTag, rerr := w.cfg.Store.ReadReport(ctx, m.RunID)
		switch {
		case rerr == nil && again.Claim == mine.Claim && !again.State.Final():
			etag = againTag
		case rerr == nil && (again.State.Final() || again.Claim != cur.Claim || !again.ClaimedAt().Equal(cur.ClaimedAt())):
			return heldClaim{}, busy, nil
		default:
			return heldClaim{}, busy, fmt.Errorf("finish %s: take over the report claim: %w", m.RunID, err)
		}
	}
	log.Warn("took over a stale report claim", "age", age.String())
	return heldClaim{mine, etag}, claimed, nil
}

// settle moves the manifest to the report's final state and reports whether it changed it. It
// is idempotent: a final manifest is left alone.
func (w *Worker) settle(ctx context.Context, rep ledger.Report, reason string) (bool, error) {
	switch {
	case reason != "":
	case rep.State == ledger.StatePartial:
		reason = fmt.Sprintf("%d of %d partitions failed", rep.Failed, rep.Partitions)
	case rep.State == ledger.StateTimedOut:
		reason = fmt.Sprintf("the run passed its deadline: %d of %d partitions failed or had no result", rep.Failed, rep.Partitions)
	}
	finished := rep.Created
	if finished.IsZero() {
		finished = w.now()
	}
	changed := false
	run, round := ledger.SplitRunKey(rep.Run) // a redrive round's report settles its run
	m, err := w.cfg.Store.UpdateManifest(ctx, run, ledger.NoFence, func(m *ledger.Manifest) error {
		if m.State.Final() || m.Round != round {
			changed = false
			return ledger.ErrNoChange
		}
		if err := m.Transition(rep.State); err != nil {
			return err
		}
		changed = true
		m.Finished = finished
		m.Succeeded, m.Failed = rep.Succeeded, rep.Failed
		switch {
		case reason != "":
			m.Reason = reason
		case m.Stop != nil && rep.State == m.Stop.State:
			// Settled from a report another worker wrote: the stop says why.
			m.Reason = m.Stop.Reason(rep.Cancelled)
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("finish %s: %w", rep.Run, err)
	}
	if changed {
		w.cfg.Telemetry.RunFinished(ctx, m.Schedule, m.Job, string(m.State), m.Created, m.Finished)
		trace.SpanFromContext(ctx).SetAttributes(telemetry.KeyState.String(string(m.State)))
	}
	return changed, nil
}

// claimToken tells this process's claim on run's report from every other: the same for every
// try of this process (so a retry after an outage recognises a claim whose answer was lost;
// the process finishes a run once at a time), different for every other process and run.
func (w *Worker) claimToken(run string) string {
	sum := sha256.Sum256(append(w.salt[:], run...))
	return hex.EncodeToString(sum[:12])
}
