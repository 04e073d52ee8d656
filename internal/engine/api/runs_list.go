package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// ListReply is GET /api/runs: a page of runs, newest first, and the token for the next page
// (absent on the last page).
type ListReply struct {
	Runs         []RunView `json:"runs"`
	Continuation string    `json:"continuation,omitempty"`
}

// Listing order and cost.
//
// The ledger keeps no index: ListRuns returns run IDs in name order, one listing call per
// 5,000 runs, and the IDs of different schedules (nightly-<time>, tick-<time>), runs now
// (<schedule>-now-...) and ad-hoc runs (manual-...) interleave wrongly in that order. So the
// listing sorts every run by its start time, newest first, taking the time from the ID when
// the ID carries it (an occurrence, a generated ID's creation second) and from the manifest's
// Created otherwise (runs named by an Idempotency-Key). Those manifest reads are done once per process per run (Created never
// changes; see createdCache) and in parallel (readConcurrency). A page then reads its own
// manifests, plus the results listing or done shards of each unfinished run on it.
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

// cursor is the decoded continuation token: the last entry of the previous page.
type cursor struct {
	V  int    `json:"v"`
	T  int64  `json:"t"` // Unix nanoseconds
	ID string `json:"id"`
}

const maxTokenLength = 512

func encodeCursor(e entry) string {
	b, _ := json.Marshal(cursor{V: 1, T: e.t.UnixNano(), ID: e.id})
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeCursor validates a continuation token; "" is the first page.
func decodeCursor(tok string) (*entry, error) {
	if tok == "" {
		return nil, nil
	}
	bad := errors.New("continuation is not a token from a previous page")
	if len(tok) > maxTokenLength {
		return nil, bad
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return nil, bad
	}
	var c cursor
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil || c.V != 1 || c.T < 0 || ledger.ValidateRunID(c.ID) != nil {
		return nil, bad
	}
	return &entry{t: time.Unix(0, c.T).UTC(), id: c.ID}, nil
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

// manifest reads a run's manifest; a final one is cached (it never changes again), without
// its params.
func (a *API) manifest(ctx context.Context, id string) (ledger.Manifest, error) {
	if m, ok := a.final.get(id); ok {
		return m, nil
	}
	m, err := a.cfg.Ledger.ReadManifest(ctx, id)
	if err != nil {
		return m, err
	}
	if m.State.Final() {
		c := m
		c.Params = nil
		a.final.put(c)
	}
	return m, nil
}

// filter is the ?state=, ?trigger= and ?schedule= of a listing; an empty set lets everything
// through.
type filter struct {
	states    map[ledger.State]bool
	triggers  map[ledger.Trigger]bool
	schedules map[string]bool
}

// States and triggers a listing can filter on.
var (
	allStates = []ledger.State{ledger.StateQueued, ledger.StatePlanning, ledger.StateEnqueuing, ledger.StateRunning,
		ledger.StateSucceeded, ledger.StatePartial, ledger.StateFailed, ledger.StateTimedOut, ledger.StateSkipped,
		ledger.StateMissed, ledger.StatePaused}
	allTriggers = []ledger.Trigger{ledger.TriggerTimer, ledger.TriggerManual}
)

// parseFilter reads state, trigger and schedule: comma-separated lists of known values (any
// valid schedule name: a schedule the app no longer declares still has its runs).
func parseFilter(r Request) (filter, *Reply) {
	var f filter
	if s := r.query("state"); s != "" {
		f.states = map[ledger.State]bool{}
		for _, v := range strings.Split(s, ",") {
			st := ledger.State(strings.TrimSpace(v))
			if !slices.Contains(allStates, st) {
				rep := errorReply(http.StatusBadRequest, CodeInvalidState,
					fmt.Sprintf("state must be a comma-separated list of %s; got %q", joinValues(allStates), v))
				return f, &rep
			}
			f.states[st] = true
		}
	}
	if s := r.query("trigger"); s != "" {
		f.triggers = map[ledger.Trigger]bool{}
		for _, v := range strings.Split(s, ",") {
			tr := ledger.Trigger(strings.TrimSpace(v))
			if !slices.Contains(allTriggers, tr) {
				rep := errorReply(http.StatusBadRequest, CodeInvalidTrigger,
					fmt.Sprintf("trigger must be a comma-separated list of %s; got %q", joinValues(allTriggers), v))
				return f, &rep
			}
			f.triggers[tr] = true
		}
	}
	if s := r.query("schedule"); s != "" {
		f.schedules = map[string]bool{}
		for _, v := range strings.Split(s, ",") {
			name := strings.TrimSpace(v)
			if err := ledger.ValidateScheduleName(name); err != nil {
				rep := errorReply(http.StatusBadRequest, CodeInvalidSchedule, "schedule must be a comma-separated list of schedule names: "+err.Error())
				return f, &rep
			}
			f.schedules[name] = true
		}
	}
	return f, nil
}

func joinValues[T ~string](vs []T) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
}

func (f filter) any() bool { return len(f.states) > 0 || len(f.triggers) > 0 || len(f.schedules) > 0 }

func (f filter) match(m ledger.Manifest) bool {
	return (len(f.states) == 0 || f.states[m.State]) && (len(f.triggers) == 0 || f.triggers[m.Trigger])
}

// idMayMatch rules a run out by its ID alone (ledger.ParseRunID): its schedule, and its
// trigger (a schedule's occurrence is a timer run; a run now and an ad-hoc run are manual).
// An ID of no known format is read and matched by its manifest.
func (f filter) idMayMatch(id string) bool {
	if len(f.triggers) == 0 && len(f.schedules) == 0 {
		return true
	}
	n, ok := ledger.ParseRunID(id)
	if !ok {
		return len(f.schedules) == 0
	}
	if len(f.schedules) > 0 && !f.schedules[n.Schedule] {
		return false
	}
	if len(f.triggers) > 0 {
		tr := ledger.TriggerManual
		if !n.Occurrence.IsZero() {
			tr = ledger.TriggerTimer
		}
		return f.triggers[tr]
	}
	return true
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

// forEach calls fn for 0..n-1 with at most readConcurrency calls in flight and returns the
// first error; the context passed to fn is cancelled after it.
func forEach(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	if n == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	sem := make(chan struct{}, readConcurrency)
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(ctx, i); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return first
}

// createdCache remembers keyed runs' creation times (immutable once written), so the listing
// reads each such manifest once per process. It is bounded: past maxCreated entries it starts
// over.
type createdCache struct {
	mu sync.Mutex
	m  map[string]time.Time
}

const maxCreated = 100_000

func newCreatedCache() *createdCache { return &createdCache{m: map[string]time.Time{}} }

func (c *createdCache) get(id string) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.m[id]
	return t, ok
}

func (c *createdCache) put(id string, t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxCreated {
		c.m = map[string]time.Time{}
	}
	c.m[id] = t
}

// finalCache holds the manifests of final runs (which never change again), without params,
// so listings and the occurrence strip read each one once per process. It is bounded: past
// maxFinal entries it starts over.
type finalCache struct {
	mu sync.Mutex
	m  map[string]ledger.Manifest
}

const maxFinal = 10_000

func newFinalCache() *finalCache { return &finalCache{m: map[string]ledger.Manifest{}} }

func (c *finalCache) get(id string) (ledger.Manifest, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.m[id]
	return m, ok
}

func (c *finalCache) has(id string) bool {
	_, ok := c.get(id)
	return ok
}

func (c *finalCache) put(m ledger.Manifest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxFinal {
		c.m = map[string]ledger.Manifest{}
	}
	c.m[m.RunID] = m
}
