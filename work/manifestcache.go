package work

import (
	"slices"
	"sync"
	"time"

	"github.com/batonfn/baton/ledger"
)

// manifestCache keeps each run's manifest, per process, while nothing a worker reads from it
// can change: once planning is done, the partition count, the segments' epochs, the job and
// its params are fixed, and until the run's deadline its state can only become final by
// every result being in (then any further delivery is a duplicate: its result exists, and
// the one-result rule and the finish's own fresh read absorb it). Past the deadline (cached
// copies keep the earliest one) re-enqueue rounds and timeouts may finish the run with
// partitions missing, so every delivery reads the manifest again; a copy is also read again
// after cacheTTL, whatever the deadline.
//
// This takes the manifest read off most partitions of a planned run: one read per run and
// process every cacheTTL instead of one per delivery.
type manifestCache struct {
	mu   sync.Mutex
	runs map[string]cachedManifest
}

type cachedManifest struct {
	m  ledger.Manifest
	at time.Time
}

const (
	// cacheTTL bounds how old a cached manifest may be.
	cacheTTL = 30 * time.Second
	// cacheMaxRuns bounds the runs cached at once; past it the expired entries go, and if
	// none has expired the cache starts over.
	cacheMaxRuns = 1024
)

// get returns run's cached manifest if it may still be used at now. The copy's params are its
// own, so a job that changes them changes nothing here.
func (c *manifestCache) get(run string, now time.Time) (ledger.Manifest, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.runs[run]
	if !ok {
		return ledger.Manifest{}, false
	}
	if !usable(e, now) {
		delete(c.runs, run)
		return ledger.Manifest{}, false
	}
	m := e.m
	m.Params = slices.Clone(m.Params)
	return m, true
}

// put caches m, read at now, when a worker may use it without reading it again.
func (c *manifestCache) put(m ledger.Manifest, now time.Time) {
	e := cachedManifest{m: m, at: now}
	if !m.PlanDone || m.State.Final() || !usable(e, now) {
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

// usable reports whether e may stand in for a fresh read at now: younger than cacheTTL and
// before the run's deadline.
func usable(e cachedManifest, now time.Time) bool {
	return now.Sub(e.at) < cacheTTL && now.Before(e.m.Deadline)
}
