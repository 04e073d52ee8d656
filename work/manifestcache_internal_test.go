package work

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// waiting reports how many callers wait for the read of run's manifest in flight.
func (c *manifestCache) waiting(run string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.flights[run]; ok {
		return f.waiters
	}
	return 0
}

func plannedManifest(run string, now time.Time) ledger.Manifest {
	return ledger.Manifest{RunID: run, State: ledger.StateRunning, PlanDone: true, Partitions: 8,
		Params: []byte(`{"n":1}`), Deadline: now.Add(time.Hour)}
}

// Deliveries that find no usable copy while a read of the run's manifest is in flight wait for
// it and share its answer: eight bundles starting together make one read, not eight.
func TestManifestCache_ConcurrentLoadsShareOneRead(t *testing.T) {
	var c manifestCache
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	gate := make(chan struct{})
	var reads atomic.Int64
	read := func(context.Context) (ledger.Manifest, error) {
		reads.Add(1)
		<-gate
		return plannedManifest("r", now), nil
	}
	const callers = 8
	var wg sync.WaitGroup
	got := make([]ledger.Manifest, callers)
	errs := make([]error, callers)
	for i := range callers {
		wg.Go(func() { got[i], errs[i] = c.load(t.Context(), "r", now, read) })
	}
	WaitFor(t, "one read with the other callers waiting for it, or a second read", func() bool {
		return reads.Load() > 1 || reads.Load() == 1 && c.waiting("r") == callers-1
	})
	close(gate)
	wg.Wait()
	if n := reads.Load(); n != 1 {
		t.Fatalf("%d concurrent loads made %d reads, want 1", callers, n)
	}
	for i := range callers {
		if errs[i] != nil || got[i].RunID != "r" || string(got[i].Params) != `{"n":1}` {
			t.Errorf("caller %d: %+v, %v; want the manifest of r", i, got[i], errs[i])
		}
	}
	got[0].Params[0] = 'X' // each caller's params are its own
	if m, err := c.load(t.Context(), "r", now, read); err != nil || string(m.Params) != `{"n":1}` || reads.Load() != 1 {
		t.Errorf("after the shared read: %s, %v, %d reads; want the cached copy, unchanged, and no read", m.Params, err, reads.Load())
	}
}

// A read that ended with its own caller's context (that delivery's invocation ended) does not
// fail the deliveries waiting for it: a waiter whose context is live reads for itself. An error
// of the store itself is shared.
func TestManifestCache_WaiterReadsAgainWhenTheReadersContextEnded(t *testing.T) {
	var c manifestCache
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	var reads atomic.Int64
	read := func(ctx context.Context) (ledger.Manifest, error) {
		if reads.Add(1) == 1 {
			<-ctx.Done()
			return ledger.Manifest{}, ctx.Err()
		}
		return plannedManifest("r", now), nil
	}
	rctx, cancel := context.WithCancel(t.Context())
	var readerErr error
	var wg sync.WaitGroup
	wg.Go(func() { _, readerErr = c.load(rctx, "r", now, read) })
	WaitFor(t, "the first read", func() bool { return reads.Load() == 1 })
	var waiterM ledger.Manifest
	var waiterErr error
	wg.Go(func() { waiterM, waiterErr = c.load(t.Context(), "r", now, read) })
	WaitFor(t, "the waiter", func() bool { return c.waiting("r") == 1 })
	cancel()
	wg.Wait()
	if !errors.Is(readerErr, context.Canceled) {
		t.Errorf("reader: %v; want its context's end", readerErr)
	}
	if waiterErr != nil || waiterM.RunID != "r" || reads.Load() != 2 {
		t.Errorf("waiter: %+v, %v after %d reads; want the manifest from a read of its own (2 reads)", waiterM, waiterErr, reads.Load())
	}

	broken := errors.New("store unreachable")
	gate := make(chan struct{})
	failing := func(context.Context) (ledger.Manifest, error) { <-gate; return ledger.Manifest{}, broken }
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() { _, errs[i] = c.load(t.Context(), "s", now, failing) })
	}
	WaitFor(t, "a waiter on the failing read", func() bool { return c.waiting("s") == 1 })
	close(gate)
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, broken) {
			t.Errorf("caller %d: %v; want the store's error", i, err)
		}
	}
}

// A caller shares only a read it could have taken from the cache: one begun less than
// PlanningCopyTTL before its own now (a slower read may have been served before this caller's
// done append, and a copy counts as read when its read began), and only an answer usable at its
// now (not a run past its deadline). Otherwise it reads for itself.
func TestManifestCache_SharesOnlyWhatTheCacheWouldGive(t *testing.T) {
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	planning := plannedManifest("r", now)
	planning.PlanDone = false
	for _, tc := range []struct {
		name      string
		answer    ledger.Manifest
		later     time.Duration // the second caller's now, after the first's
		joins     bool          // the second caller waits for the first read
		wantReads int64
	}{
		{"a read begun just inside PlanningCopyTTL is shared", planning, PlanningCopyTTL - time.Millisecond, true, 1},
		{"a read begun PlanningCopyTTL before is not waited for", planning, PlanningCopyTTL, false, 2},
		{"an answer past the run's deadline is not shared", func() ledger.Manifest {
			m := plannedManifest("r", now)
			m.Deadline = now.Add(time.Millisecond)
			return m
		}(), time.Millisecond, true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c manifestCache
			gate := make(chan struct{})
			var reads atomic.Int64
			read := func(context.Context) (ledger.Manifest, error) {
				if reads.Add(1) == 1 {
					<-gate
				}
				return tc.answer, nil
			}
			var wg sync.WaitGroup
			wg.Go(func() {
				if _, err := c.load(t.Context(), "r", now, read); err != nil {
					t.Errorf("first caller: %v", err)
				}
			})
			WaitFor(t, "the first read", func() bool { return reads.Load() == 1 })
			var second error
			wg.Go(func() { _, second = c.load(t.Context(), "r", now.Add(tc.later), read) })
			if tc.joins {
				WaitFor(t, "the second caller waiting", func() bool { return c.waiting("r") == 1 })
			} else {
				WaitFor(t, "the second caller's own read", func() bool { return reads.Load() == 2 })
			}
			close(gate)
			wg.Wait()
			if second != nil || reads.Load() != tc.wantReads {
				t.Errorf("second caller: %v after %d reads; want the manifest after %d", second, reads.Load(), tc.wantReads)
			}
		})
	}
}
