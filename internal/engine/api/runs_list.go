package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// GET /api/runs: the handler and the loop that fills a page. The order it pages through is in
// runs_index.go, the continuation token in runs_cursor.go, the filters in runs_filter.go and
// the manifest caches in runs_cache.go.

// ListReply is GET /api/runs: a page of runs, newest first, and the token for the next page
// (absent on the last page).
type ListReply struct {
	Runs         []RunView `json:"runs"`
	Continuation string    `json:"continuation,omitempty"`
}

func parseLimit(s string) (int, error) {
	if s == "" {
		return DefaultLimit, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxLimit {
		return 0, fmt.Errorf("limit must be an integer from 1 to %d, got %q", MaxLimit, s)
	}
	return n, nil
}

// query returns a query parameter, matching its name case-insensitively.
func (r Request) query(name string) string {
	if v, ok := r.Query[name]; ok {
		return v
	}
	for k, v := range r.Query {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

func (a *API) listRuns(ctx context.Context, r Request) Reply {
	limit, err := parseLimit(r.query("limit"))
	if err != nil {
		return errorReply(http.StatusBadRequest, CodeInvalidLimit, err.Error())
	}
	after, err := decodeCursor(r.query("continuation"))
	if err != nil {
		return errorReply(http.StatusBadRequest, CodeInvalidContinuation, err.Error())
	}
	f, bad := parseFilter(r)
	if bad != nil {
		return *bad
	}
	if r.query("occurrences") != "" {
		return errorReply(http.StatusBadRequest, CodeBadRequest,
			"occurrences is no longer a parameter of GET /api/runs: each schedule's occurrences are at GET /api/schedules/{name}?occurrences=N")
	}
	entries, err := a.index(ctx)
	if err != nil {
		return a.storageError(r, "list runs", err)
	}
	start := 0
	if after != nil {
		start = sort.Search(len(entries), func(i int) bool { return after.before(entries[i]) })
	}
	page, last, err := a.page(ctx, entries, start, limit, f)
	if err != nil {
		return a.storageError(r, "read runs", err)
	}
	out := ListReply{Runs: page}
	if last >= 0 && last < len(entries)-1 {
		out.Continuation = encodeCursor(entries[last])
	}
	return jsonReply(http.StatusOK, out)
}

// page returns up to limit runs from entries[start:] that pass the filter, and the index of
// the last entry it examined (-1 for none): the next page starts after it. Without a filter
// it reads the page's manifests. With one it reads manifests in order until the page is full
// or it has read MaxScanReads from storage (final runs read before come from a cache, and the
// schedule and trigger filters skip runs by their ID), so a filtered page may hold fewer than
// limit runs and still have a next page.
func (a *API) page(ctx context.Context, entries []entry, start, limit int, f filter) ([]RunView, int, error) {
	last := start - 1
	var picked []ledger.Manifest
	reads := 0
	for i := start; i < len(entries) && len(picked) < limit; {
		if f.any() && reads >= MaxScanReads {
			break
		}
		// The next batch: as many candidates as the page still needs (more when filtering by
		// state, since some will not match), skipping runs whose ID excludes them.
		want := limit - len(picked)
		if len(f.states) > 0 {
			want = min(max(want, readConcurrency), MaxScanReads-reads)
		}
		var batch []int
		for ; i < len(entries) && len(batch) < want; i++ {
			if !f.idMayMatch(entries[i].id) {
				last = i
				continue
			}
			batch = append(batch, i)
			if !a.final.has(entries[i].id) {
				reads++
			}
		}
		ms := make([]*ledger.Manifest, len(batch))
		err := forEach(ctx, len(batch), func(ctx context.Context, k int) error {
			m, err := a.manifest(ctx, entries[batch[k]].id)
			if errors.Is(err, ledger.ErrNotFound) {
				return nil // deleted since the listing
			}
			if err != nil {
				return err
			}
			ms[k] = &m
			return nil
		})
		if err != nil {
			return nil, last, err
		}
		for k, m := range ms {
			if len(picked) == limit {
				break
			}
			last = batch[k]
			if m != nil && f.match(*m) {
				picked = append(picked, *m)
			}
		}
	}
	views := make([]RunView, len(picked))
	err := forEach(ctx, len(picked), func(ctx context.Context, i int) error {
		v, err := a.view(ctx, picked[i])
		views[i] = v
		return err
	})
	if err != nil {
		return nil, last, err
	}
	return views, last, nil
}
