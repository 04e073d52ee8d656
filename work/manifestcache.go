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

// manifestCache keeps each run's manifest, per process, while a worker may use it instead of
// reading it again.
//
// Once planning is done, the partition count, the segments' epochs, the job and its params
// are fixed, and until the run's deadline its state can only become final by every result
// being in (then any further delivery is a duplicate: its result exists, and the one-result
// rule and the finish's own fresh read absorb it). So a planned run's copy is kept for
// cacheTTL, but not past the run's deadline (cached copies keep the earliest one): past it,
// re-enqueue rounds and timeouts may finish the run with partitions missing, so every delivery
// reads the manifest again.
//
// While planning goes on, a copy is kept for PlanningCopyTTL only. In that time the leader may
// record a takeover's segment, finish planning or fail the run, and a worker with an older copy
// does not see it yet: it processes a message a takeover has made stale (its result carries
// the same stored plan payload, and the one-result rule keeps one) or a partition of a run
// whose planning failed (its result changes nothing), and its done append may be the last one
// while its copy still says planning (the leader looks again PlanningCopyTTL after planning
// ends; see PlanningCopyTTL). The messages of the last plan batch carry the run's partition
// count, and the process remembers it (runFacts) for the appends of its other deliveries.
//
// This takes the manifest read off most partitions: one read per run and process every
// cacheTTL once planned, every PlanningCopyTTL before, instead of one or two per delivery.
// The deliveries that find no usable copy while a read of the run's manifest is in flight
// wait for that read and share its answer (load), so a process's bundles that start together,
// or whose copy expires together, make one read, not one each.
type manifestCache struct {
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
// may be. A worker whose done append may complete the run while its copy says planning (and
// that knows no partition count from a message) reads the manifest again only when its copy
// is older than this; the leader, having finished planning, tries to finish the run again once
// this long has passed since its own try, so one of them sees every append. It is also how
// long after a takeover records its segment, or the leader fails the run, a worker may still
// process a message the takeover made stale or a partition of the failed run.
//
// Reads per process and per PlanningCopyTTL add up over instances to one blob's rate: with
// done records striped, nearly every append catches its shard up with the partitions planned
// so far, so while a run's waves go on each instance may read its manifest once per
// PlanningCopyTTL. At 5 s, 200 instances make 40 reads/s, against one blob's target of about
// 500. The price: a run whose last append came from a process with a younger copy that still
// said planning, and no message with the count, is finished by the leader's second try, about
// 5 s after planning ended.
const PlanningCopyTTL = 5 * time.Second

const (
	// cacheTTL bounds how old a cached copy of a planned run's manifest may be.
	cacheTTL = 30 * time.Second
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
	if !usable(e, now) {
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
		case f.err == nil && usable(cachedManifest{m: f.m, at: f.at}, now):
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
	if m.State.Final() || !usable(e, now) {
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
			if !usable(old, now) {
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
// younger than cacheTTL and before the run's deadline, a copy taken while planning while
// younger than PlanningCopyTTL.
func usable(e cachedManifest, now time.Time) bool {
	if !e.m.PlanDone {
		return now.Sub(e.at) < PlanningCopyTTL
	}
	return now.Sub(e.at) < cacheTTL && now.Before(e.m.Deadline)
}
