package bench

import (
	"net/http"
	"strings"
)

// hotWindowParts is the stretch of a run over which the hottest entity is measured: every
// hotWindowParts consecutive results (partitions done, as the proxy saw their results created).
const hotWindowParts = 1000

// hotSpot is the entity (one blob or one queue) that took the most calls per partition in
// some stretch of hotWindowParts partitions of a run: in Azure a single blob serves about 500
// requests/s, a storage account 20,000, so an entity's calls per partition bound a run's rate.
type hotSpot struct {
	Entity  string  // blob path or "queue <name>"
	Calls   int64   // its calls in the window
	Parts   int64   // the window's partitions
	PerPart float64 // Calls / the window's partitions
	Window  int     // 0-based window index
}

// hotTracker counts calls per entity in windows of hotWindowParts results and keeps the worst
// window's hottest entity. Not safe for concurrent use (the proxy holds its lock).
type hotTracker struct {
	counts  map[string]int64
	idle    map[string]int64 // the empty polls among counts
	results int64
	window  int
	worst   hotSpot // any entity
	blob    hotSpot // blobs only
	busy    hotSpot // any entity, its empty polls left out
}

func newHotTracker() *hotTracker {
	return &hotTracker{counts: map[string]int64{}, idle: map[string]int64{}}
}

// add counts one call to entity; result says it created a partition's result, idle that it
// was a poll of an empty queue (a dequeue that got no message). Empty polls come from each
// instance's listener backing off up to its polling interval, so they grow with instances and
// time, not with partitions: the busy spot leaves them out.
func (h *hotTracker) add(entity string, result, idle bool) {
	h.counts[entity]++
	if idle {
		h.idle[entity]++
	}
	if result {
		h.results++
	}
	if h.results >= hotWindowParts {
		h.close()
	}
}

// close ends the current window (ignored when it saw no result).
func (h *hotTracker) close() {
	if h.results > 0 {
		for e, n := range h.counts {
			spot := hotSpot{Entity: e, Calls: n, Parts: h.results, PerPart: float64(n) / float64(h.results), Window: h.window}
			h.worst = hotter(h.worst, spot)
			if !strings.HasPrefix(e, "queue ") {
				h.blob = hotter(h.blob, spot)
			}
			busy := spot
			busy.Calls -= h.idle[e]
			busy.PerPart = float64(busy.Calls) / float64(h.results)
			h.busy = hotter(h.busy, busy)
		}
		h.window++
	}
	h.counts, h.idle, h.results = map[string]int64{}, map[string]int64{}, 0
}

// hotter returns the hotter of two spots (the first entity by name on a tie).
func hotter(a, b hotSpot) hotSpot {
	if b.PerPart > a.PerPart || b.PerPart == a.PerPart && b.Entity < a.Entity {
		return b
	}
	return a
}

// callEntity names what a call reaches: "queue <name>" for any call on a queue or its
// messages; for a blob, its path below the account ("container/name"), or the container's
// name for a container call.
func callEntity(r *http.Request, queue bool) string {
	parts := strings.SplitN(strings.Trim(r.URL.Path, "/"), "/", 3)
	if len(parts) < 2 {
		return r.URL.Path
	}
	if queue {
		return "queue " + parts[1]
	}
	if len(parts) == 2 {
		return parts[1]
	}
	return parts[1] + "/" + parts[2]
}
