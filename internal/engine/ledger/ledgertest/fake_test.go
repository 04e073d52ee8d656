package ledgertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// The fake keeps the same contract as the blob store (ledger/blobstore runs this suite on
// Azurite).
func TestFake_Contract(t *testing.T) {
	RunContract(t, func(t *testing.T, opts Options) ledger.Store { return NewFake(opts) })
}

// Faulty injects each kind of fault with the effect it promises.
func TestFaulty(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		fault      Fault
		wantErr    error
		wantStored bool
	}{
		{Fail, ledger.ErrUnavailable, false},
		{LoseResponse, ledger.ErrUnavailable, true},
		{LoseAndRetry, ledger.ErrExists, true},
	} {
		f := &Faulty{Store: NewFake(Options{}), Decide: FaultOnce(c.fault, "CreateManifest", "")}
		err := f.CreateManifest(ctx, runningManifest("run-x", 1))
		if !errors.Is(err, c.wantErr) {
			t.Errorf("fault %d: got %v, want %v", c.fault, err, c.wantErr)
		}
		_, rerr := f.ReadManifest(ctx, "run-x")
		if stored := rerr == nil; stored != c.wantStored {
			t.Errorf("fault %d: manifest stored %v, want %v", c.fault, stored, c.wantStored)
		}
		if f.Injected(c.fault) != 1 {
			t.Errorf("fault %d injected %d times, want once", c.fault, f.Injected(c.fault))
		}
		if err := f.CreateManifest(ctx, runningManifest("run-y", 1)); err != nil {
			t.Errorf("fault %d: the next call was not passed through: %v", c.fault, err)
		}
	}
}

// SetLegacySchedule writes what ReadLegacySchedule reads back.
func TestFake_LegacySchedule(t *testing.T) {
	ctx := context.Background()
	f := NewFake(Options{})
	at := time.Date(2026, 11, 21, 2, 0, 0, 0, time.UTC)
	if err := f.SetLegacySchedule(ctx, ledger.LegacySchedule{Cursor: at, Latest: "tick-20261121t020000z"}); err != nil {
		t.Fatal(err)
	}
	l, ok, err := f.ReadLegacySchedule(ctx)
	if err != nil || !ok || !l.Cursor.Equal(at) || l.Latest != "tick-20261121t020000z" {
		t.Fatalf("ReadLegacySchedule = %+v, %v, %v", l, ok, err)
	}
}
