package bench

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// hotWindowParts is the stretch of a run over which the hottest entity is measured: every
// hotWindowParts consecutive results (partitions done, as the proxy saw their results created).
const hotWindowParts = 1000

// hotSpot is the entity (one blob or one queue) that took the most calls per partition in
// some stretch of hotWindowParts partitions of a run: in Azure a single blob serves about 500
// requests/s, a storage account 20,000, so an entity's calls per partition bound a run's rate.
type hotSpot struct {
	Entity  string        // blob path or "queue <name>"
	Calls   int64         // its calls in the window
	Parts   int64         // the window's partitions
	PerPart float64       // Calls / the window's partitions
	Window  int           // 0-based window index
	Span    time.Duration // the window's length in time
	Kinds   string        // its calls by kind ("blob GET manifest=12, ...")
}

// String tells the spot: "manifest.json: 13 calls in 1000 partitions (window 0, 3.5s; 0.0130
// per partition: blob GET manifest=9, blob PUT manifest=4)".
func (s hotSpot) String() string {
	return fmt.Sprintf("%s: %d calls in %d partitions (window %d, %s; %.4f per partition: %s)",
		s.Entity, s.Calls, s.Parts, s.Window, s.Span.Round(time.Millisecond), s.PerPart, s.Kinds)
}

// hotTracker counts calls per entity in windows of hotWindowParts results and keeps the worst
// window's hottest entity. Not safe for concurrent use (the proxy holds its lock).
type hotTracker struct {
	kinds   map[string]map[string]int64 // entity → call kind → calls
	start   time.Time                   // the window's first call
	last    time.Time                   // its latest call
	results int64
	window  int
	worst   hotSpot            // any entity
	blob    hotSpot            // blobs only
	busy    hotSpot            // any entity, its empty polls left out
	each    map[string]hotSpot // every entity's worst window, its empty polls left out
}

func newHotTracker() *hotTracker {
	return &hotTracker{kinds: map[string]map[string]int64{}, each: map[string]hotSpot{}}
}

// Call kinds (see callKind) the tracker tells apart: a result, or a block of results, counts
// the partitions it records towards a window's; an empty poll (a dequeue that got no message) comes from each
// instance's listener backing off up to its polling interval, so empty polls grow with
// instances and time, not with partitions, and the busy spot leaves them out.
const (
	kindResult    = "blob PUT result"
	kindBlock     = "blob PUT result block"
	kindEmptyPoll = "queue dequeue empty"
)

// add counts one call of the given kind to entity, made at, that recorded parts partitions'
// results (0 for any other call).
func (h *hotTracker) add(entity, kind string, parts int, at time.Time) {
	if h.start.IsZero() {
		h.start = at
	}
	h.last = at
	if h.kinds[entity] == nil {
		h.kinds[entity] = map[string]int64{}
	}
	h.kinds[entity][kind]++
	h.results += int64(parts)
	if h.results >= hotWindowParts {
		h.close()
	}
}

// close ends the current window (ignored when it saw no result).
func (h *hotTracker) close() {
	if h.results > 0 {
		for e, kinds := range h.kinds {
			var n int64
			for _, c := range kinds {
				n += c
			}
			spot := hotSpot{Entity: e, Calls: n, Parts: h.results, PerPart: float64(n) / float64(h.results), Window: h.window,
				Span: h.last.Sub(h.start), Kinds: kindList(kinds)}
			h.worst = hotter(h.worst, spot)
			if !strings.HasPrefix(e, "queue ") {
				h.blob = hotter(h.blob, spot)
			}
			busy := spot
			busy.Calls -= kinds[kindEmptyPoll]
			busy.PerPart = float64(busy.Calls) / float64(h.results)
			h.busy = hotter(h.busy, busy)
			h.each[e] = hotter(h.each[e], busy)
		}
		h.window++
	}
	h.kinds, h.results = map[string]map[string]int64{}, 0
	h.start, h.last = time.Time{}, time.Time{}
}

// kindList lists calls by kind, most first: "blob GET manifest=12, blob HEAD manifest=3".
func kindList(kinds map[string]int64) string {
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int {
		if kinds[a] != kinds[b] {
			return int(kinds[b] - kinds[a])
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s=%d", k, kinds[k])
	}
	return strings.Join(parts, ", ")
}

// top returns the n entities whose worst window was hottest (their empty polls left out),
// hottest first.
func (h *hotTracker) top(n int) []hotSpot {
	spots := make([]hotSpot, 0, len(h.each))
	for _, s := range h.each {
		spots = append(spots, s)
	}
	slices.SortFunc(spots, func(a, b hotSpot) int {
		if hotter(a, b) == a {
			return -1
		}
		return 1
	})
	return spots[:min(n, len(spots))]
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

// finishWindow is the worst of the windows of hotWindowParts partitions taken in the order
// they finished (ends, their finish times) rather than the order their results were written:
// the most calls (at, when each was answered) between one window's first finish and the next
// window's, per partition of the window, and how long the window lasted. A bundle's results
// are written together when its last partition is done, so windows by written results can
// stretch over seconds in which many more partitions ran; by finish time they cannot.
func finishWindow(ends, at []time.Time) (calls int, perPart float64, span time.Duration) {
	ends, at = slices.Clone(ends), slices.Clone(at)
	slices.SortFunc(ends, time.Time.Compare)
	slices.SortFunc(at, time.Time.Compare)
	k := 0 // the next call to count
	for lo := 0; lo < len(ends); lo += hotWindowParts {
		hi := min(lo+hotWindowParts, len(ends)) // the window is ends[lo:hi]
		n := 0
		for ; k < len(at) && (hi == len(ends) || at[k].Before(ends[hi])); k++ {
			n++
		}
		if p := float64(n) / float64(hi-lo); p > perPart {
			calls, perPart, span = n, p, ends[hi-1].Sub(ends[lo])
		}
	}
	return calls, perPart, span
}
