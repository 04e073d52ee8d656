package work

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// manifestCache keeps each run's manifest, per process, so a worker need not read it per
// delivery: a planned run's copy for WorkerConfig.CopyTTL but never past the run's deadline, a planning
// run's for PlanningCopyTTL. Deliveries that find no usable copy while a read of the same
// manifest is in flight share that read (load). Why a copy this old is safe is in
// docs/design.md (Workers and fan-in).
type manifestCache struct {
	ttl     time.Duration // a planned run's copy: WorkerConfig.CopyTTL (0: ManifestCopyTTL)
	mu      sync.Mutex
	runs    map[string]cachedManifest
	flights map[string]*manifestRead
}

// manifestRead is one read of a run's manifest in flight, shared by the deliveries that need
// it meanwhile.
type manifestRead struct {
	done    chan struct{}
	at      time.Time // when the read began: its answer counts as read then
	m       ledger.Manifest
	err     error
	waiters int // deliveries sharing it, besides the one that reads
}

type cachedManifest struct {
	m  ledger.Manifest
	at time.Time
}

// PlanningCopyTTL bounds how old a worker's copy of the manifest of a run still being planned
// may be: a worker whose done append may complete the run reads it again once its copy is
// older, and the leader tries to finish again this long after its own try, so one of them sees
// every append. It is also how long a worker may still process a message made stale by a
// takeover, or a partition of a run whose planning failed. Its rate budget is in docs/design.md.
const PlanningCopyTTL = 5 * time.Second

// ManifestCopyTTL is WorkerConfig.CopyTTL's default.
const ManifestCopyTTL = 30 * time.Second

const (
	// cacheMaxRuns bounds the runs cached at once; past it the expired entries go, and if
	// none has expired the cache starts over.
	cacheMaxRuns = 1024
)

// getLocked returns run's cached manifest if it may still be used at now; c.mu is held. The
// copy's params are its own, so a job that changes them changes nothing here.
func (c *manifestCache) getLocked(run string, now time.Time) (ledger.Manifest, bool) {
	e, ok := c.runs[run]
	if !ok {
		return ledger.Manifest{}, false
	}
	if !c.usable(e, now) {
		delete(c.runs, run)
		return ledger.Manifest{}, false
	}
	return ownCopy(e.m), true
}

// ownCopy is m with params of its own, so a job that changes them changes no one else's copy.
func ownCopy(m ledger.Manifest) ledger.Manifest {
	m.Params = slices.Clone(m.Params)
	return m
}

// load returns run's manifest: the cached copy while usable at now, otherwise the answer of
// read, cached when it may be. One read per run is registered in flight at a time, and a
// caller that finds one begun less than PlanningCopyTTL before its own now waits for it and
// shares its answer when that answer is usable at its now, exactly as if the read had put it
// in the cache (a copy counts as read when its read began). Otherwise — a read in flight for
// longer (it may have been served before this caller's done append, say), an answer it may not
// use (a run past its deadline), or a read ended by its own caller's context — the caller reads
// for itself. A read that failed otherwise fails its waiters alike.
func (c *manifestCache) load(ctx context.Context, run string, now time.Time, read func(context.Context) (ledger.Manifest, error)) (ledger.Manifest, error) {
	c.mu.Lock()
	if m, ok := c.getLocked(run, now); ok {
		c.mu.Unlock()
		return m, nil
	}
	if f, ok := c.flights[run]; ok {
		if now.Sub(f.at) >= PlanningCopyTTL {
			c.mu.Unlock()
			return c.read(ctx, now, read)
		}
		f.waiters++
		c.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return ledger.Manifest{}, fmt.Errorf("read manifest of run %s: %w", run, context.Cause(ctx))
		}
		switch {
		case f.err == nil && c.usable(cachedManifest{m: f.m, at: f.at}, now):
			return ownCopy(f.m), nil
		case f.err != nil && !errors.Is(f.err, context.Canceled) && !errors.Is(f.err, context.DeadlineExceeded):
			return ledger.Manifest{}, f.err
		}
		return c.read(ctx, now, read)
	}
	if c.flights == nil {
		c.flights = map[string]*manifestRead{}
	}
	f := &manifestRead{done: make(chan struct{}), at: now}
	c.flights[run] = f
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.flights, run)
		c.mu.Unlock()
		close(f.done)
	}()
	f.m, f.err = c.read(ctx, now, read)
	if f.err != nil {
		return ledger.Manifest{}, f.err
	}
	return ownCopy(f.m), nil
}

// read reads a manifest, begun at now, and caches it when it may be.
func (c *manifestCache) read(ctx context.Context, now time.Time, read func(context.Context) (ledger.Manifest, error)) (ledger.Manifest, error) {
	m, err := read(ctx)
	if err == nil {
		c.put(m, now)
	}
	return m, err
}

// put caches m, read at now, when a worker may use it without reading it again.
func (c *manifestCache) put(m ledger.Manifest, now time.Time) {
	e := cachedManifest{m: m, at: now}
	if m.State.Final() || !c.usable(e, now) {
		return
	}
	e.m.Params = slices.Clone(m.Params)
	e.m.Segments = slices.Clone(m.Segments)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runs == nil {
		c.runs = map[string]cachedManifest{}
	}
	if len(c.runs) >= cacheMaxRuns {
		for run, old := range c.runs {
			if !c.usable(old, now) {
				delete(c.runs, run)
			}
		}
		if len(c.runs) >= cacheMaxRuns {
			clear(c.runs)
		}
	}
	c.runs[m.RunID] = e
}

// usable reports whether e may stand in for a fresh read at now: a planned run's copy while
// younger than its ttl and before the run's deadline, a copy taken while planning while
// younger than PlanningCopyTTL.
func (c *manifestCache) usable(e cachedManifest, now time.Time) bool {
	if !e.m.PlanDone {
		return now.Sub(e.at) < PlanningCopyTTL
	}
	ttl := c.ttl
	if ttl <= 0 {
		ttl = ManifestCopyTTL
	}
	return now.Sub(e.at) < ttl && now.Before(e.m.Deadline)
}
