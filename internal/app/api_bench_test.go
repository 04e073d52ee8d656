package app

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/engine/api"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
)

// seedFinishedRuns stores n finished runs straight into the ledger, half timer runs and half
// keyed manual runs (whose order needs their manifests).
func seedFinishedRuns(b *testing.B, e *apiEnv, n int) {
	b.Helper()
	ctx := testCtx(b)
	if err := e.store.EnsureContainer(ctx); err != nil {
		b.Fatal(err)
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		at := base.Add(time.Duration(i) * time.Minute)
		m := ledger.Manifest{RunID: ledger.ScheduleRunID(coordinator.LegacySchedule, at), Trigger: ledger.TriggerTimer, Epoch: 1, Job: "synthetic",
			State: ledger.StateSucceeded, Partitions: 2, PlanDone: true, Succeeded: 2, Created: at, Finished: at.Add(time.Second)}
		if i%2 == 1 {
			m.RunID, m.Trigger = ledger.ManualRunID(fmt.Sprintf("bench-%d", i), at), ledger.TriggerManual
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := e.store.CreateManifest(ctx, &m); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// decideUpToNow moves every test schedule's cursor to now, as its first heartbeat does: the
// occurrences before have no record and never will.
func decideUpToNow(b *testing.B, e *apiEnv) {
	b.Helper()
	for _, s := range testSchedules {
		if _, err := e.store.UpdateSchedule(testCtx(b), s.Name, func(st *ledger.ScheduleState) error { st.Cursor = time.Now(); return nil }); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAPI_ListRuns measures one page of GET /api/runs (limit 20) over 1,000 finished runs
// on Azurite: warm (this instance has cached the keyed runs' creation times) through the
// handler, and cold (a fresh API that must read the 500 keyed manifests first).
func BenchmarkAPI_ListRuns(b *testing.B) {
	e := newAPIEnv(b)
	seedFinishedRuns(b, e, 1000)
	payload := goldenHTTP(b, "http-runs-list.json", withQuery("limit", "20"))

	b.Run("warm", func(b *testing.B) {
		if out := e.invoke(fnRuns, payload); out.Status != http.StatusOK {
			b.Fatalf("GET /api/runs: %d %s", out.Status, out.Body)
		}
		b.ResetTimer()
		for b.Loop() {
			if out := e.invoke(fnRuns, payload); out.Status != http.StatusOK {
				b.Fatalf("GET /api/runs: %d", out.Status)
			}
		}
	})
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			a, err := api.New(api.Config{Ledger: e.store, Leader: noLeader{}})
			if err != nil {
				b.Fatal(err)
			}
			r := a.Runs(context.Background(), api.Request{Method: http.MethodGet, Query: map[string]string{"limit": "20"}})
			if r.Status != http.StatusOK {
				b.Fatalf("status %d", r.Status)
			}
		}
	})
}

type noLeader struct{}

func (noLeader) State(context.Context) (election.LeaderState, error) {
	return election.LeaderState{}, nil
}
