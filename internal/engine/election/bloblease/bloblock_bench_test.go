package bloblease

import (
	"errors"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/election/electiontest"
)

// BenchmarkBlobLock measures the lock's storage paths against Azurite next to a plain blob
// GetProperties round trip, in the same run:
//
//	go test -run XXX -bench BlobLock -benchtime 200x ./coordinator/
//
// Goal: a contested Acquire costs at most 1.5× the GetProperties round trip.
func BenchmarkBlobLock(b *testing.B) {
	c := newTestContainer(b, nil, nil)
	holder := newTestBlobLockOn(b, c)
	ctx := b.Context()
	held, err := holder.Acquire(ctx, electiontest.Holder(1))
	if err != nil {
		b.Fatalf("Acquire: %v", err)
	}
	// Keep the lease for the whole run: sub-benchmarks can outlast 15 s.
	renew := func(b *testing.B) {
		if err := holder.Renew(ctx, held); err != nil {
			b.Fatalf("Renew: %v", err)
		}
	}
	blob := c.NewBlockBlobClient("leader")
	// Warm up connections and Azurite before the first measurement.
	for range 50 {
		if _, err := blob.GetProperties(ctx, nil); err != nil {
			b.Fatal(err)
		}
	}

	b.Run("GetProperties", func(b *testing.B) {
		renew(b)
		for b.Loop() {
			if _, err := blob.GetProperties(ctx, nil); err != nil {
				b.Fatal(err)
			}
		}
	})

	b.Run("AcquireContested", func(b *testing.B) {
		renew(b)
		contender := newTestBlobLockOn(b, c)
		for b.Loop() {
			_, err := contender.Acquire(ctx, electiontest.Holder(2))
			if !errors.As(err, new(*election.HeldError)) {
				b.Fatalf("Acquire: got %v, want *HeldError", err)
			}
		}
	})

	b.Run("AcquireContested409Only", func(b *testing.B) {
		// The bare 409 without reading the holder's record, for comparison.
		renew(b)
		lc, err := lease.NewBlobClient(blob, nil)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := lc.AcquireLease(ctx, 15, nil); err == nil {
				b.Fatal("AcquireLease succeeded on a held lease")
			}
		}
	})

	b.Run("Renew", func(b *testing.B) {
		for b.Loop() {
			renew(b)
		}
	})

	b.Run("AcquireRelease", func(b *testing.B) {
		renew(b)
		lk, err := NewBlobLock(c, "bench-acquire-release", BlobLockOptions{Duration: testBlobLockDuration, Logger: quietTestLogger})
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			l, err := lk.Acquire(ctx, electiontest.Holder(3))
			if err != nil {
				b.Fatalf("Acquire: %v", err)
			}
			if err := lk.Release(ctx, l); err != nil {
				b.Fatalf("Release: %v", err)
			}
		}
	})
}
