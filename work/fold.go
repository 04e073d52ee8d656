package work

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/lib/parallel"
)

// Merger is implemented by jobs whose aggregate is associative: the aggregate of a set of
// results can be built from the aggregates of its parts, in any grouping and order. Their runs
// fold each result into one of a fixed number of partial aggregates as it arrives, so finishing
// a run reads those partials instead of every result: the time from the last result to the
// report does not grow with the run. Jobs without it keep the full read at the end.
type Merger interface {
	Job
	// Merge combines partial aggregates — each made by Aggregate over some of the run's
	// results, or by an earlier Merge — into one. run carries the run's final partition count
	// when the report is made (it may be 0 while planning is still going on).
	Merge(ctx context.Context, run RunInfo, parts []json.RawMessage) (json.RawMessage, error)
}

// DefaultFoldShards is the number of partial aggregates of a run whose job is a Merger: enough
// that concurrent workers rarely update the same one, few enough that the report reads them
// in a fraction of a second.
const DefaultFoldShards = 32

// FoldShardsFor is the number of partials a run of job folds into (0: no folding).
func FoldShardsFor(job Job) int {
	if _, ok := job.(Merger); ok {
		return DefaultFoldShards
	}
	return 0
}

// maxFoldTries bounds the conditional-update retries of one fold.
const maxFoldTries = 64

// fold adds results rs to their partial aggregates (Manifest.FoldSlot) with one conditional
// update per partial they fall in (one for a bundle aligned on its size), skipping any already
// folded in: a redelivery folds nothing twice. A crash between recording a result and folding
// it is repaired by the redelivery, or at the end, where results missing from the partials are
// read one by one.
func (w *Worker) fold(ctx context.Context, m *ledger.Manifest, job Job, rs []ledger.Result) error {
	mj, ok := job.(Merger)
	if !ok || m.FoldShards <= 0 || len(rs) == 0 {
		return nil
	}
	byShard := map[int][]ledger.Result{}
	var shards []int
	for _, r := range rs {
		s, _ := m.FoldSlot(r.Index)
		if _, seen := byShard[s]; !seen {
			shards = append(shards, s)
		}
		byShard[s] = append(byShard[s], r)
	}
	var errs []error
	for _, s := range shards {
		if err := w.foldInto(ctx, m, mj, s, byShard[s]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// foldInto folds rs, all of partial shard, into it with one conditional update (retried on
// conflicts).
func (w *Worker) foldInto(ctx context.Context, m *ledger.Manifest, mj Merger, shard int, rs []ledger.Result) error {
	info := RunInfo{Run: m.RunID, Job: m.Job, Params: m.Params, Partitions: m.Partitions}
	ones := make([]json.RawMessage, len(rs))
	for k, r := range rs {
		one, err := partialOf(ctx, mj, info, r)
		if err != nil {
			return err
		}
		ones[k] = one
	}
	name := fmt.Sprintf("%s/%d", m.RunID, rs[0].Index)
	if len(rs) > 1 {
		name += fmt.Sprintf("+%d", len(rs))
	}
	// A fold that starts a partial (rs[0] at position 0: the first partition of one of the
	// run's first FoldShards blocks) creates it without reading it first; only a redelivery
	// finds it there, and reads it then.
	_, pos := m.FoldSlot(rs[0].Index)
	create := pos == 0
	for try := 0; try < maxFoldTries; try++ {
		var (
			p    ledger.Partial
			etag ledger.ETag
			err  error
		)
		if create && try == 0 {
			err = ledger.ErrNotFound
		} else {
			p, etag, err = w.cfg.Store.ReadPartial(ctx, m.RunID, shard)
		}
		switch {
		case errors.Is(err, ledger.ErrNotFound):
			p, etag = ledger.Partial{Run: m.RunID, Shard: shard}, ""
		case err != nil:
			return fmt.Errorf("fold %s: %w", name, err)
		}
		var add []ledger.Result
		var addOnes []json.RawMessage
		for k, r := range rs {
			if _, pos := m.FoldSlot(r.Index); !p.Has(pos) && !slices.ContainsFunc(add, func(a ledger.Result) bool { return a.Index == r.Index }) {
				add, addOnes = append(add, r), append(addOnes, ones[k])
			}
		}
		if len(add) == 0 {
			return nil
		}
		if err := addAll(ctx, mj, info, &p, add, addOnes); err != nil {
			return err
		}
		for _, r := range add {
			_, pos := m.FoldSlot(r.Index)
			p.Mark(pos)
		}
		err = w.cfg.Store.WritePartial(ctx, p, etag)
		if err == nil {
			return nil
		}
		if !errors.Is(err, ledger.ErrConflict) && !errors.Is(err, ledger.ErrExists) {
			return fmt.Errorf("fold %s: %w", name, err)
		}
	}
	return fmt.Errorf("fold %s: %d conflicting updates: %w", name, maxFoldTries, ledger.ErrConflict)
}

// partialOf is the job's aggregate of one result.
func partialOf(ctx context.Context, j Merger, info RunInfo, r ledger.Result) (json.RawMessage, error) {
	one := func(yield func(ledger.Result, error) bool) { yield(r, nil) }
	out, err := runAggregate(ctx, j, info, one)
	if err != nil {
		return nil, fmt.Errorf("aggregate partition %d: %w", r.Index, err)
	}
	return out, nil
}

// addAll folds results rs (whose own aggregates are ones) into p with one Merge.
func addAll(ctx context.Context, j Merger, info RunInfo, p *ledger.Partial, rs []ledger.Result, ones []json.RawMessage) error {
	parts := ones
	if len(p.Aggregate) > 0 {
		parts = append([]json.RawMessage{p.Aggregate}, ones...)
	}
	merged := parts[0]
	if len(parts) > 1 {
		var err error
		if merged, err = runMerge(ctx, j, info, parts); err != nil {
			return err
		}
	}
	p.Aggregate = merged
	var failed []ledger.FailedPart
	for _, r := range rs {
		p.Count++
		if !r.OK {
			p.Failed++
			p.TimedOut = p.TimedOut || r.TimedOut
			failed = append(failed, ledger.FailedPart{Index: r.Index, Error: r.Error})
		}
	}
	if len(failed) > 0 {
		p.FailedList = lowest(append(p.FailedList, failed...))
	}
	return nil
}

// lowest sorts failures by index and keeps the report's cap of them.
func lowest(list []ledger.FailedPart) []ledger.FailedPart {
	slices.SortFunc(list, func(a, b ledger.FailedPart) int { return a.Index - b.Index })
	list = slices.CompactFunc(list, func(a, b ledger.FailedPart) bool { return a.Index == b.Index })
	if len(list) > MaxReportFailures {
		list = list[:MaxReportFailures]
	}
	return list
}

func runMerge(ctx context.Context, j Merger, info RunInfo, parts []json.RawMessage) (out json.RawMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, Permanent(fmt.Errorf("job merge panicked: %v", r))
		}
	}()
	out, err = j.Merge(ctx, info, parts)
	if err == nil && len(out) > 0 && !json.Valid(out) {
		err = Permanent(errors.New("job merge output is not JSON"))
	}
	return out, err
}

// folded is what the partials of a run hold, read once for a finish.
type folded struct {
	parts []ledger.Partial
}

// readFolded reads every partial of m (a missing one is empty), partialReaders at a time.
func (w *Worker) readFolded(ctx context.Context, m *ledger.Manifest) (folded, error) {
	f := folded{parts: make([]ledger.Partial, m.FoldShards)}
	errs := make([]error, m.FoldShards)
	parallel.Each(m.FoldShards, partialReaders, func(s int) bool {
		p, _, err := w.cfg.Store.ReadPartial(ctx, m.RunID, s)
		switch {
		case errors.Is(err, ledger.ErrNotFound):
			p = ledger.Partial{Run: m.RunID, Shard: s}
		case err != nil:
			errs[s] = err
			return false
		}
		f.parts[s] = p
		return true
	})
	for _, err := range errs {
		if err != nil {
			return f, err
		}
	}
	return f, nil
}

// partialReaders is how many partials readFolded reads at once: a run's 32 in four rounds, so
// the report waits four reads, not 32.
const partialReaders = 8

// missing lists the partitions of m's 0..Partitions-1 not folded into any partial.
func (f folded) missing(m *ledger.Manifest) []int {
	var out []int
	for i := range m.Partitions {
		if s, pos := m.FoldSlot(i); !f.parts[s].Has(pos) {
			out = append(out, i)
		}
	}
	return out
}

// aggregateFolded builds the report from the partials, reading only the results that were
// never folded in (their worker crashed between recording and folding). It writes the same
// report the full read would: counts, the lowest-index failures, and the merged aggregate.
func (w *Worker) aggregateFolded(ctx context.Context, job Merger, m *ledger.Manifest, f folded) (ledger.Report, error) {
	rep := ledger.Report{Run: m.RunID, Job: m.Job, Partitions: m.Partitions, Aggregator: w.cfg.Holder}
	info := RunInfo{Run: m.RunID, Job: m.Job, Params: m.Params, Partitions: m.Partitions}
	var (
		aggs     []json.RawMessage
		failures []ledger.FailedPart
		timedOut bool
	)
	for _, p := range f.parts {
		if p.Count == 0 {
			continue
		}
		rep.Failed += p.Failed
		rep.Succeeded += p.Count - p.Failed
		timedOut = timedOut || p.TimedOut
		failures = append(failures, p.FailedList...)
		aggs = append(aggs, p.Aggregate)
	}
	rd := ledger.NewReader(w.cfg.Store, m.RunID)
	for _, i := range f.missing(m) {
		r, err := rd.Read(ctx, i)
		if err != nil {
			return rep, fmt.Errorf("read result %d: %w", i, err)
		}
		if r.Index != i || r.Run != m.RunID {
			return rep, Permanent(fmt.Errorf("result %s/%d names run %s partition %d", m.RunID, i, r.Run, r.Index))
		}
		p := ledger.Partial{}
		one, err := partialOf(ctx, job, info, r)
		if err != nil {
			return rep, err
		}
		if err := addAll(ctx, job, info, &p, []ledger.Result{r}, []json.RawMessage{one}); err != nil {
			return rep, err
		}
		rep.Failed += p.Failed
		rep.Succeeded += p.Count - p.Failed
		timedOut = timedOut || p.TimedOut
		failures = append(failures, p.FailedList...)
		aggs = append(aggs, p.Aggregate)
	}
	out, err := runMerge(ctx, job, info, aggs)
	if err != nil {
		return rep, err
	}
	rep.Aggregate = out
	if len(failures) > 0 {
		rep.FailedList = lowest(failures)
	}
	rep.State = ledger.FinalState(rep.Partitions, rep.Failed, timedOut)
	return rep, nil
}
