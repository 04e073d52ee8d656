package soak

import (
	"context"
	"errors"
	"fmt"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// ReadLedger reads every run in the runs container: its manifest, the results/ listing, each
// result and the report.
func ReadLedger(ctx context.Context, store ledger.Store) (map[string]Run, error) {
	var ids []string
	if err := store.ListRuns(ctx, func(id string) bool { ids = append(ids, id); return true }); err != nil {
		return nil, err
	}
	runs := make(map[string]Run, len(ids))
	for _, id := range ids {
		m, err := store.ReadManifest(ctx, id)
		if errors.Is(err, ledger.ErrNotFound) {
			// A prefix without a manifest (results written for a run that was never created):
			// keep it visible to the checker as a run in no state.
			m = ledger.Manifest{RunID: id}
		} else if err != nil {
			return nil, fmt.Errorf("run %s: %w", id, err)
		}
		r := Run{Manifest: m, Results: map[int]ledger.Result{}}
		// Every record is listed, a partition twice if it were recorded twice (in its span's
		// block and on its own): the checker counts them.
		if err := store.ListResults(ctx, id, func(ref ledger.ResultRef) error {
			r.Indexes = append(r.Indexes, ref.Index)
			if !ref.Block.IsZero() {
				r.InBlocks++
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("run %s: %w", id, err)
		}
		rd := ledger.NewReader(store, id)
		for _, i := range r.Indexes {
			res, err := rd.Read(ctx, i)
			if err != nil {
				return nil, fmt.Errorf("run %s result %d: %w", id, i, err)
			}
			r.Results[i] = res
		}
		rep, _, err := store.ReadReport(ctx, id)
		switch {
		case err == nil:
			r.Report = &rep
		case !errors.Is(err, ledger.ErrNotFound):
			return nil, fmt.Errorf("run %s report: %w", id, err)
		}
		for _, rd := range m.Redrives {
			round, err := readRound(ctx, store, id, rd.Round)
			if err != nil {
				return nil, err
			}
			r.Rounds = append(r.Rounds, round)
		}
		runs[id] = r
	}
	return runs, nil
}

// readRound reads redrive round n of run: its results listing, its results and its report.
func readRound(ctx context.Context, store ledger.Store, run string, n int) (Round, error) {
	key := ledger.RoundRun(run, n)
	out := Round{Round: n, Results: map[int]ledger.Result{}}
	if err := store.ListResults(ctx, key, func(ref ledger.ResultRef) error {
		out.Indexes = append(out.Indexes, ref.Index)
		return nil
	}); err != nil {
		return out, fmt.Errorf("run %s: %w", key, err)
	}
	for _, i := range out.Indexes {
		res, err := store.ReadResult(ctx, key, i)
		if err != nil {
			return out, fmt.Errorf("run %s result %d: %w", key, i, err)
		}
		out.Results[i] = res
	}
	rep, _, err := store.ReadReport(ctx, key)
	switch {
	case err == nil:
		out.Report = &rep
	case !errors.Is(err, ledger.ErrNotFound):
		return out, fmt.Errorf("run %s report: %w", key, err)
	}
	return out, nil
}
