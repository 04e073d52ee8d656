package api

import (
	"context"
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// Listing order and cost: the order GET /api/runs pages through.
//
// The ledger keeps no index: ListRuns returns run IDs in name order, one listing call per
// 5,000 runs, and the IDs of different schedules (nightly-<time>, tick-<time>), runs now
// (<schedule>-now-...) and ad-hoc runs (manual-...) interleave wrongly in that order. So the
// listing sorts every run by its start time, newest first, taking the time from the ID when
// the ID carries it (an occurrence, a generated ID's creation second) and from the manifest's
// Created otherwise (runs named by an Idempotency-Key). Those manifest reads are done once per
// process per run (Created never changes; see createdCache) and in parallel (readConcurrency).
// A page then reads its own manifests, plus the results listing or done shards of each
// unfinished run on it.
//
// Cost of one page: ceil(R/5000) listing calls for R runs in the container, one GET per keyed
// manual run this instance has not seen yet, and `limit` manifest GETs. The listing calls grow
// with the ledger (no retention yet); an index written at run creation (a zero-length blob per
// run named by inverted time) would make a page O(limit), at the price of a second write in
// the coordinator. Measured on Azurite with 1,000 runs, half of them keyed
// (BenchmarkAPI_ListRuns in the handler): about 40 ms per page once warm, about 0.5 s for an
// instance's first page.

// entry is a run's position in the newest-first order.
type entry struct {
	t  time.Time
	id string
}

// before reports whether x comes before y in the listing: newer first, then by ID, descending.
func (x entry) before(y entry) bool {
	if !x.t.Equal(y.t) {
		return x.t.After(y.t)
	}
	return x.id > y.id
}

const idTimeLayout = "20060102T150405Z"

// idTime returns the start time a run ID carries (ledger.ParseRunID): a schedule's occurrence
// (<schedule>-<yyyymmddthhmmssz>), or the creation second of a generated ID
// (manual-<yyyymmddthhmmssz>-<8 hex>, <schedule>-now-<yyyymmddthhmmssz>-<8 hex>). IDs made
// from an Idempotency-Key carry none.
func idTime(id string) (time.Time, bool) {
	n, ok := ledger.ParseRunID(id)
	switch {
	case !ok:
		return time.Time{}, false
	case !n.Occurrence.IsZero():
		return n.Occurrence, true
	}
	const tail = len("20060102t150405z-0123abcd")
	if len(id) <= tail || id[len(id)-tail-1] != '-' {
		return time.Time{}, false
	}
	t, err := time.Parse(idTimeLayout, strings.ToUpper(id[len(id)-tail:len(id)-len("-0123abcd")]))
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}

// index lists every run with its start time, newest first.
func (a *API) index(ctx context.Context) ([]entry, error) {
	var entries []entry
	var unknown []string
	err := a.cfg.Ledger.ListRuns(ctx, func(id string) bool {
		if t, ok := idTime(id); ok {
			entries = append(entries, entry{t: t, id: id})
		} else if t, ok := a.created.get(id); ok {
			entries = append(entries, entry{t: t, id: id})
		} else {
			unknown = append(unknown, id)
		}
		return true
	})
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, nil // no run was ever started: the coordinator creates the container lazily
	}
	if err != nil {
		return nil, err
	}
	found := make([]*entry, len(unknown))
	err = forEach(ctx, len(unknown), func(ctx context.Context, i int) error {
		m, err := a.cfg.Ledger.ReadManifest(ctx, unknown[i])
		if errors.Is(err, ledger.ErrNotFound) {
			return nil // a prefix without a manifest is not a run (yet)
		}
		if err != nil {
			return err
		}
		a.created.put(unknown[i], m.Created)
		found[i] = &entry{t: m.Created, id: unknown[i]}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, e := range found {
		if e != nil {
			entries = append(entries, *e)
		}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].before(entries[j]) })
	return entries, nil
}
