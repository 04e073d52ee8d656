package work

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/lib/parallel"
)

// complete appends the done records of recorded results (a message's consecutive partitions),
// one append per done shard, and tries to finish the run when an append's ordinal says its
// shard may be complete; a "maybe" TryFinish verifies, never a wrong "no". The appends run under
// rctx (the bounded recording context), the finish under ctx: if ctx has expired the finish
// fails, and so does the invocation, whose redelivery appends and finishes.
func (w *Worker) complete(rctx, ctx context.Context, m *ledger.Manifest, env Envelope, rs []ledger.Result, log *slog.Logger) error {
	if len(rs) == 0 {
		return nil
	}
	idx := make([]int, len(rs))
	for k, r := range rs {
		idx[k] = r.Index
	}
	lay := m.DoneLayout
	if !lay.Known() {
		// A newer version created the run; its done records cannot be placed here. The results
		// are recorded, and the check message's listing of them finishes the run.
		log.Warn("done records skipped: the run's done layout is unknown to this version", "layout", lay.String())
		return nil
	}
	slices.Sort(idx)
	// The partition count: the manifest's once planned, else the last plan batch's messages
	// carry it, this one or another this process has handled.
	total, counted := m.Partitions, m.PlanDone
	if n := max(env.Parts, w.facts.count(env.Run)); !counted && n > 0 {
		total, counted = n, true
	}
	type reached struct {
		shard int
		ord   int64
	}
	var maybe, unplanned []reached
	from := m // the copy of the manifest the finish may start from
	for _, group := range lay.Groups(idx) {
		shard := lay.Shard(group[0])
		ord, err := w.cfg.Store.AppendDone(rctx, env.Run, lay, env.Epoch, group...)
		if err != nil {
			return fmt.Errorf("partition %s/%d: %w", env.Run, group[0], err)
		}
		switch {
		case counted && ord >= lay.Expected(total, shard):
			if ord == lay.Expected(total, shard) {
				// The count this append left is the count a HEAD would read: the shard is
				// complete, as countsComplete would find it, without reading it.
				w.facts.shardComplete(env.Run, shard)
			}
			maybe = append(maybe, reached{shard, ord})
		case !counted && ord >= max(1, lay.Expected(m.Checkpoint.Next, shard)):
			// The partition count is unknown while planning runs, but the partitions
			// already enqueued are a lower bound.
			unplanned = append(unplanned, reached{shard, ord})
		}
	}
	if len(maybe) == 0 && len(unplanned) > 0 {
		// The leader may have finished planning since the manifest was read, and its own
		// TryFinish may have counted before this append. A copy read less than
		// PlanningCopyTTL ago (the process's, if it is that young) that still says planning
		// leaves this append to the leader's second try, more than PlanningCopyTTL after its
		// first; an older copy must be read again, or nobody finishes. (A process that has
		// handled a message of the last plan batch knows the count and is not here.)
		fresh, err := w.manifest(ctx, env.Run)
		if err != nil {
			return fmt.Errorf("partition %s/%d: %w", env.Run, env.Part, err)
		}
		for _, r := range unplanned {
			if fresh.PlanDone && r.ord >= lay.Expected(fresh.Partitions, r.shard) {
				maybe = append(maybe, r)
			}
		}
		from = &fresh
	}
	if len(maybe) == 0 {
		return nil
	}
	log.Debug("done shard may be complete; trying to finish", "ordinal", maybe[0].ord, "shard", maybe[0].shard)
	if _, err := w.finishFrom(ctx, env.Run, from); err != nil {
		// The results are recorded; failing the invocation makes the redelivery try again.
		return fmt.Errorf("partition %s/%d: finish run: %w", env.Run, env.Part, err)
	}
	return nil
}

// countReaders is how many done shards' counts countsComplete reads at once: a striped run's
// 16 in two rounds, so the report waits two HEADs, not 16.
const countReaders = 8

// countsComplete is the cheap check that runs before any listing of results/ (the proof that
// every partition has a result) and stops soon after a shard falls short: each done shard's
// record count (one HEAD per shard: 16 per 262,144 partitions striped, one per 20,000 in
// blocks; countReaders at once), then, only for a shard holding more records than partitions
// (redeliveries appended duplicates), its distinct indexes (one download). Without that
// distinct check, once duplicates pushed a count past the total, every later completion would
// list the whole run. A shard found complete stays complete (records are only appended), so
// the process remembers it (runFacts) and its later tries read only the others: at a
// striped run's end, where each of 16 shards' last append asks for a finish, a process reads
// each shard's count until it is complete, not on every try.
//
// With lastFirst (a worker's attempt as its append completes a shard, most of which come
// before the run's end) the shard of the run's last partitions, the likeliest still short
// (work completes roughly in the order it was sent), is read alone first: a shard that
// completes early costs one HEAD, not a round. The append that completes the last shard knows
// it complete from its own count, so the run's final attempt still reads the others together.
func (w *Worker) countsComplete(ctx context.Context, m *ledger.Manifest, lastFirst bool) (bool, error) {
	n, lay := m.Partitions, m.DoneLayout
	if !lay.Known() {
		return false, nil
	}
	open := w.facts.openShards(m.RunID, lay.Shards(n))
	if last := lay.Shard(n - 1); lastFirst && len(open) > 1 && slices.Contains(open, last) {
		c, err := w.cfg.Store.DoneCount(ctx, m.RunID, last)
		switch {
		case err != nil:
			return false, err
		case c < lay.Expected(n, last):
			return false, nil
		case c == lay.Expected(n, last):
			w.facts.shardComplete(m.RunID, last)
			open = slices.DeleteFunc(open, func(s int) bool { return s == last })
		}
	}
	counts := make([]int64, len(open))
	var (
		mu    sync.Mutex
		short bool
		ferr  error
	)
	parallel.Each(len(open), countReaders, func(k int) bool {
		s := open[k]
		c, err := w.cfg.Store.DoneCount(ctx, m.RunID, s)
		mu.Lock()
		defer mu.Unlock()
		counts[k] = c
		switch {
		case err != nil:
			ferr = cmp.Or(ferr, err)
		case c < lay.Expected(n, s):
			short = true
		case c == lay.Expected(n, s):
			w.facts.shardComplete(m.RunID, s)
		}
		return ferr == nil && !short
	})
	if ferr != nil {
		return false, ferr
	}
	if short {
		return false, nil
	}
	for k, c := range counts {
		s := open[k]
		if c <= lay.Expected(n, s) {
			continue
		}
		idx, err := w.cfg.Store.ReadDone(ctx, m.RunID, s)
		if err != nil {
			return false, err
		}
		if distinct(lay, idx, s, n) < lay.Expected(n, s) {
			return false, nil
		}
		w.facts.shardComplete(m.RunID, s)
	}
	return true, nil
}

// listedAll reports whether the listing of results/ holds every partition.
func (w *Worker) listedAll(ctx context.Context, m *ledger.Manifest) (bool, error) {
	n := m.Partitions
	seen := make([]bool, n)
	have := 0
	err := w.cfg.Store.ListResults(ctx, m.RunID, func(r ledger.ResultRef) error {
		if i := r.Index; i >= 0 && i < n && !seen[i] {
			seen[i] = true
			have++
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	return have == n, nil
}

// distinct counts the distinct indexes below n that the layout gives shard s.
func distinct(lay ledger.DoneLayout, idx []int, s, n int) int64 {
	seen := make(map[int]struct{}, lay.Expected(n, s))
	for _, i := range idx {
		if i >= 0 && i < n && lay.Shard(i) == s {
			seen[i] = struct{}{}
		}
	}
	return int64(len(seen))
}
