package work

import (
	"slices"
	"sync"
	"time"

	"github.com/batonfn/baton/ledger"
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
// the same stored plan payload, and the one-result rule keeps one), and its done append may be
// the last one while its copy still says planning (the leader looks again PlanningCopyTTL after
// planning ends; see PlanningCopyTTL).
//
// This takes the manifest read off most partitions: one read per run and process every
// cacheTTL once planned, every PlanningCopyTTL before, instead of one or two per delivery.
type manifestCache struct {
	mu   sync.Mutex
	runs map[string]cachedManifest
}

type cachedManifest struct {
	m  ledger.Manifest
	at time.Time
}

// PlanningCopyTTL bounds how old a worker's copy of the manifest of a run still being planned
// may be. A worker whose done append may complete the run while its copy says planning reads
// the manifest again only when its copy is older than this; the leader, having finished
// planning, tries to finish the run again once this long has passed since its own try, so one
// of them sees every append. It is also how long after a takeover records its segment a
// worker may still process a message the takeover made stale.
const PlanningCopyTTL = time.Second

const (
	// cacheTTL bounds how old a cached copy of a planned run's manifest may be.
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
