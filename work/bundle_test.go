package work

import "testing"

func TestBundleSize(t *testing.T) {
	for _, tc := range []struct{ limit, n, want int }{
		{DefaultMaxBundle, 2048, 256}, // the default batch: 8 messages of 256
		{DefaultMaxBundle, 250, 32},   // a batch of 250: 7 messages of 32 and one of 26
		{32, 250, 32},
		{32, 5000, 32},
		{64, 5000, 64},
		{256, 5000, 256},
		{300, 5000, 256}, // a power of two within the cap
		{16, 250, 16},
		{12, 250, 8}, // a power of two within the cap
		{32, 100, 8}, // 100/8 → 13 → 8
		// The last batch of a 10,000-partition run: 14 of 128 and one of 16, spread like a full
		// batch, not 7 of 256 and one of 16.
		{DefaultMaxBundle, 1808, 128},
		{DefaultMaxBundle, 1000, 64},
		{32, 16, 2},
		{32, 25, 2}, // bundles of 4 would make 7 messages
		{32, 15, 2}, // 7 of 2 and one of 1
		{32, 14, 1}, // bundles of 2 would make 7 messages
		{32, 9, 1},
		{32, 8, 1}, // small batches spread one partition per message
		{32, 1, 1},
		{32, 0, 1},
		{1, 5000, 1}, // bundling off
		{0, 5000, 1},
		// Caps above the default trade spread for fewer messages: at 1,024 a batch goes as
		// at least 2, at 512 as at least 4.
		{MaxBundle, 2048, 1024},
		{MaxBundle, 5000, 1024},
		{MaxBundle, 1808, 512}, // 1808/2 → 904 → 512: 4 messages
		{MaxBundle, 100, 32},   // 100/2 → 50 → 32: 4 messages
		{MaxBundle, 3, 2},      // one of 2 and one of 1
		{MaxBundle, 2, 1},
		{512, 2048, 512},
		{512, 1024, 256},
		{1000, 2048, 512},  // a spread of 2 (8×256/1000), a power of two within the cap
		{5000, 5000, 1024}, // never above MaxBundle
	} {
		if got := BundleSize(tc.limit, tc.n); got != tc.want {
			t.Errorf("BundleSize(%d, %d) = %d, want %d", tc.limit, tc.n, got, tc.want)
		}
	}
}

// TestBundleSize_ASpreadAndAtLeastThatManyMessages checks the rule on every batch size up to
// 5,000, a range of caps and spreads: a power of two within the cap, MaxBundle and the batch
// divided by the cap's spread (rounded up; the spread up to DefaultMaxBundle, less above),
// sending the batch as at least that many messages when it bundles at all, and the largest
// such. BundleSize is the default spread's.
func TestBundleSize_ASpreadAndAtLeastThatManyMessages(t *testing.T) {
	spreads := map[int]int{0: 8, 1: 8, 2: 8, 3: 8, 12: 8, 32: 8, 256: 8, 300: 6, 512: 4, 1000: 2, 1024: 2, 5000: 2}
	for _, base := range []int{MinBundlesPerBatch, 1, 2, 4, 64} {
		for limit, spread8 := range spreads {
			// The cap's share of this spread: the whole up to DefaultMaxBundle, less above.
			spread := max(min(base, base*DefaultMaxBundle/min(max(limit, 1), MaxBundle)), 1)
			if base == MinBundlesPerBatch && spread != spread8 {
				t.Fatalf("cap %d: spread %d, want %d", limit, spread, spread8)
			}
			ok := func(n, k int) bool {
				share := (n + spread - 1) / spread
				return k <= min(max(limit, 1), MaxBundle) && (k == 1 || k <= share && (n+k-1)/k >= spread)
			}
			for n := range 5001 {
				k := SpreadBundleSize(limit, n, base)
				if base == MinBundlesPerBatch && k != BundleSize(limit, n) {
					t.Fatalf("BundleSize(%d, %d) = %d, SpreadBundleSize at %d: %d", limit, n, BundleSize(limit, n), base, k)
				}
				switch {
				case k < 1 || k&(k-1) != 0 || !ok(n, k):
					t.Fatalf("SpreadBundleSize(%d, %d, %d) = %d: not a power of two within the cap and a share of %d, or fewer than %d messages",
						limit, n, base, k, spread, spread)
				case ok(n, 2*k):
					t.Fatalf("SpreadBundleSize(%d, %d, %d) = %d: %d would do as well", limit, n, base, k, 2*k)
				}
			}
		}
	}
}

// A spread of 4 sends a batch of 1,024 as 4 messages of 256 at the default cap, where the
// default spread sends 8 of 128; the cap still bounds a bundle.
func TestSpreadBundleSize(t *testing.T) {
	for _, tc := range []struct{ limit, n, spread, want int }{
		{DefaultMaxBundle, 1024, 4, 256},
		{DefaultMaxBundle, 1024, MinBundlesPerBatch, 128},
		{DefaultMaxBundle, 2048, 4, 256}, // the cap: 8 messages
		{DefaultMaxBundle, 1000, 4, 128}, // 1000/4 → 250 → 128
		{DefaultMaxBundle, 1024, 1, 256},
		{MaxBundle, 2048, 4, 1024}, // a spread of 1 at a cap of 1,024
		{DefaultMaxBundle, 2048, 64, 32},
		{DefaultMaxBundle, 1024, 0, 256}, // at least 1
	} {
		if got := SpreadBundleSize(tc.limit, tc.n, tc.spread); got != tc.want {
			t.Errorf("SpreadBundleSize(%d, %d, %d) = %d, want %d", tc.limit, tc.n, tc.spread, got, tc.want)
		}
	}
}
