package api

import (
	"context"
	"errors"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/lib/memo"
)

// What a process remembers of runs between requests, so listings and the occurrence strip do
// not read again what cannot have changed: keyed runs' creation times and final manifests.
// Both memories are bounded (memo.Map): what they forget costs a read, never a wrong answer.

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
