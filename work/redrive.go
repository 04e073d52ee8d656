package work

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// handleRedrive processes one partition of redrive round env.Redrive (m's round): as a
// partition of one, recording its outcome under the round's key (ledger.RoundRun), with its
// retries under the job's policy; then its done record in the round, and the round's finish
// when its records say it may be complete.
func (w *Worker) handleRedrive(ctx context.Context, m *ledger.Manifest, job Job, env Envelope, delivery int, log *slog.Logger) error {
	key := ledger.RoundRun(env.Run, env.Redrive)
	one := env
	one.Run = key
	wctx, unwatch := w.watch(ctx, env.Run)
	o := w.handleOne(wctx, m, job, one, delivery, nil, nil, log.With("redrive", env.Redrive))
	unwatch()
	rctx, cancel := w.recording(ctx)
	defer cancel()
	if p := o.retry; p != nil {
		o.retry = nil
		p.one.Run = env.Run // the retry is a message of the run, in the same round
		w.scheduleRetry(rctx, ctx, &o, p, delivery)
	}
	if o.record != nil {
		recs, _ := ledger.Record(rctx, w.cfg.Store, key, ledger.Span{}, []ledger.Result{*o.record}, nil)
		var t tally
		w.settleRecorded(&o, recs[0], &t, log)
		t.report(rctx, w.cfg.Telemetry, m.Job)
	}
	errs := []error{o.gaveUp, o.err}
	if o.stored != nil {
		errs = append(errs, w.roundDone(rctx, m, o.stored.Index))
	}
	return errors.Join(errs...)
}

// roundDone appends index's done record in m's redrive round and, when its done shard has as
// many records as the round has partitions in it, tries to finish the round.
func (w *Worker) roundDone(ctx context.Context, m *ledger.Manifest, index int) error {
	rd := m.Redriving()
	if rd == nil {
		return nil
	}
	key := ledger.RoundRun(m.RunID, m.Round)
	ord, err := w.cfg.Store.AppendDone(ctx, key, ledger.DoneBlocks, m.Epoch, index)
	if err != nil {
		return fmt.Errorf("partition %s/%d: %w", key, index, err)
	}
	// A blocks-layout shard is a range of DoneShardSize indexes, and rd.Indexes are sorted: the
	// round's partitions in it are a run of them.
	shard := ledger.DoneBlocks.Shard(index)
	lo, _ := slices.BinarySearch(rd.Indexes, shard*ledger.DoneShardSize)
	hi, _ := slices.BinarySearch(rd.Indexes, (shard+1)*ledger.DoneShardSize)
	if ord < int64(hi-lo) {
		return nil
	}
	_, err = w.FinishRound(ctx, m.RunID)
	return err
}

// FinishRound finishes run's redrive round once every partition it runs again has a result in
// it: the one aggregator of the round (its report claim, at the round's key) aggregates the
// run's results, each partition's latest round's standing for it, into the round's report, and
// the run ends in the state that report gives. false, nil when the run is in no round, the
// round is not complete, or another aggregator holds a fresh claim.
func (w *Worker) FinishRound(ctx context.Context, run string) (bool, error) {
	return w.finishing.finish(ctx, run, false, func(bool) (bool, error) { return w.finishRound(ctx, run) })
}

func (w *Worker) finishRound(ctx context.Context, run string) (bool, error) {
	m, err := w.cfg.Store.ReadManifest(ctx, run)
	if err != nil {
		return false, fmt.Errorf("finish %s: %w", run, err)
	}
	rd := m.Redriving()
	if m.State.Final() || rd == nil || m.Stop != nil {
		return false, nil
	}
	key := ledger.RoundRun(run, m.Round)
	have := map[int]bool{}
	if err := w.cfg.Store.ListResults(ctx, key, func(r ledger.ResultRef) error { have[r.Index] = true; return nil }); err != nil {
		return false, fmt.Errorf("finish %s: %w", key, err)
	}
	for _, i := range rd.Indexes {
		if !have[i] {
			return false, nil
		}
	}
	job, err := w.cfg.Jobs.Lookup(m.Job)
	if err != nil {
		return false, fmt.Errorf("finish %s: %w", key, err)
	}
	rm := m
	rm.RunID = key // the round's report, claim and settlement
	return w.finishClaimed(ctx, job, &rm, nil, &folded{})
}

// redriven reads the results of run's redrive rounds 1 to round, by index: each partition's
// latest round's result, its attempts and errors added to those of the rounds before.
func (w *Worker) redriven(ctx context.Context, run string, round int) (map[int]ledger.Result, error) {
	out := map[int]ledger.Result{}
	for r := 1; r <= round; r++ {
		if err := ledger.ReadAll(ctx, w.cfg.Store, ledger.RoundRun(run, r), func(res ledger.Result) {
			if prev, ok := out[res.Index]; ok {
				res.Attempts += prev.Attempts
				res.Errors = append(slices.Clip(prev.Errors), res.Errors...)
			}
			out[res.Index] = res
		}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// overlay is r with a later round's result o for its partition: o's outcome, the attempts of
// both, and every failed try's error, oldest first.
func overlay(r, o ledger.Result) ledger.Result {
	earlier := r.Errors
	if len(earlier) == 0 && r.Error != "" {
		earlier = []string{r.Error} // a permanent failure keeps its error only there
	}
	o.Run, o.Attempts = r.Run, r.Attempts+o.Attempts
	o.Errors = append(slices.Clip(earlier), o.Errors...)
	return o
}
