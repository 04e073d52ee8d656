package api

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/lib/memo"
)

// What a process remembers of runs between requests, so listings, the occurrence strip and
// progress do not read again what cannot have changed: keyed runs' creation times, final
// manifests, and the done shards found holding all they record.
// Each memory is bounded (memo.Map): what it forgets costs a read, never a wrong answer.

// manifest reads a run's manifest; a final one is cached (it never changes again), without
// its params.
func (a *API) manifest(ctx context.Context, id string) (ledger.Manifest, error) {
	if m, ok := a.final.get(id); ok {
		return m, nil
	}
	return a.manifestUncached(ctx, id)
}

// manifestUncached reads a run's manifest from the ledger and caches it as manifest does; a
// run found deleted (retention) is forgotten.
func (a *API) manifestUncached(ctx context.Context, id string) (ledger.Manifest, error) {
	m, err := a.cfg.Ledger.ReadManifest(ctx, id)
	if errors.Is(err, ledger.ErrNotFound) {
		a.final.forget(id)
	}
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

// createdCache remembers keyed runs' creation times (immutable once written), so the listing
// reads each such manifest once per process. It is bounded: past maxCreated entries it starts
// over.
type createdCache struct {
	m *memo.Map[time.Time]
}

const maxCreated = 100_000

func newCreatedCache() *createdCache { return &createdCache{memo.New[time.Time](maxCreated)} }

func (c *createdCache) get(id string) (time.Time, bool) { return c.m.Get(id) }

func (c *createdCache) put(id string, t time.Time) { c.m.Put(id, t) }

// finalCache holds the manifests of final runs (which never change again), without params,
// so listings and the occurrence strip read each one once per process. It is bounded: past
// maxFinal entries it starts over.
type finalCache struct {
	m *memo.Map[ledger.Manifest]
}

const maxFinal = 10_000

func newFinalCache() *finalCache { return &finalCache{memo.New[ledger.Manifest](maxFinal)} }

func (c *finalCache) get(id string) (ledger.Manifest, bool) { return c.m.Get(id) }

func (c *finalCache) has(id string) bool {
	_, ok := c.get(id)
	return ok
}

// forget drops id (a run deleted by retention).
func (c *finalCache) forget(id string) { c.m.Delete(id) }

// put remembers m under its run ID.
func (c *finalCache) put(m ledger.Manifest) { c.m.Put(m.RunID, m) }

// doneCache remembers, per unfinished run, its done shards' counts (ledger.DoneCounts), so the
// progress of a run past ExactProgressLimit reads, after the first request, only the shards
// still filling rather than every shard of the run. Keyed by run ID and creation time (a run
// recreated under the same ID starts afresh); bounded: past maxDoneRuns runs it starts over.
type doneCache struct {
	m *memo.Map[*doneEntry]
}

// doneEntry is one run's counts; mu serialises the requests counting it.
type doneEntry struct {
	mu     sync.Mutex
	counts ledger.DoneCounts
}

const maxDoneRuns = 1_000

func newDoneCache() *doneCache { return &doneCache{memo.New[*doneEntry](maxDoneRuns)} }

// count counts m's done records among its first n partitions (ledger.CountDone).
func (c *doneCache) count(ctx context.Context, store ledger.DoneCounter, m ledger.Manifest, n int) (int64, error) {
	var e *doneEntry
	c.m.Update(m.RunID+"@"+m.Created.UTC().Format(time.RFC3339Nano), func(v **doneEntry) {
		if *v == nil {
			*v = &doneEntry{}
		}
		e = *v
	})
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.counts.Count(ctx, store, m.RunID, m.DoneLayout, n, 0)
}
