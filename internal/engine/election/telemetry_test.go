package election_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/election/electiontest"
	"github.com/batonfn/baton/internal/engine/telemetry"
	"github.com/batonfn/baton/internal/engine/telemetry/otlptest"
)

// leaseCounts collects the lease counters by name and kind.
func leaseCounts(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	return otlptest.Sums(t, reader, telemetry.KeyLeaseKind)
}

// TestLeader_Telemetry: acquisitions of the scheduler's and a run's lease, a leadership lost to
// a stall and one handed over are counted, each under its kind.
func TestLeader_Telemetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		tel, err := telemetry.New(nil, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
		if err != nil {
			t.Fatal(err)
		}
		lk := election.NewMemoryLock(testLeaseDuration)
		locks := election.NewMemoryLocks(testLeaseDuration)
		ld, _ := electiontest.NewLeader(t, lk, election.LeaderConfig{Locks: locks.Lock, Telemetry: tel, StallTimeout: 20 * time.Second})

		// The scheduler's lease, a quick task.
		if err := ld.RunAsLeader(t.Context(), func(context.Context, election.Lease, func()) error { return nil }); err != nil {
			t.Fatal(err)
		}
		// A run's lease whose task stalls: lost.
		err = ld.RunAsLeaderOf(t.Context(), "runs/r1", func(ctx context.Context, _ election.Lease, _ func()) error {
			<-ctx.Done()
			return ctx.Err()
		})
		if !errors.Is(err, election.ErrStalled) {
			t.Fatalf("stalled task: %v, want ErrStalled", err)
		}
		// A run's lease handed over at shutdown.
		started, errc := make(chan struct{}), make(chan error, 1)
		go func() {
			errc <- ld.RunAsLeaderOf(t.Context(), "runs/r2", func(ctx context.Context, _ election.Lease, beat func()) error {
				close(started)
				<-ctx.Done()
				return ctx.Err()
			})
		}()
		<-started
		if err := ld.ReleaseAll(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; !errors.Is(err, election.ErrHandover) {
			t.Fatalf("handed over task: %v, want ErrHandover", err)
		}
		got := leaseCounts(t, reader)
		want := map[string]int64{"baton.lease.acquisitions/scheduler": 1, "baton.lease.acquisitions/run": 2,
			"baton.lease.losses/run": 1, "baton.lease.handovers/run": 1}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s = %d, want %d (all: %v)", k, got[k], v, got)
			}
		}
		if len(got) != len(want) {
			t.Errorf("counters %v, want exactly %v", got, want)
		}
	})
}
