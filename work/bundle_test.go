package work

import "testing"

func TestBundleSize(t *testing.T) {
	for _, tc := range []struct{ limit, n, want int }{
		{MaxBundle, 2048, 256}, // the default batch: 8 messages of 256
		{MaxBundle, 250, 32},   // a batch of 250: 7 messages of 32 and one of 26
		{32, 250, 32},
		{32, 5000, 32},
		{64, 5000, 64},
		{256, 5000, 256},
		{1000, 5000, 256}, // never above MaxBundle
		{16, 250, 16},
		{12, 250, 8}, // a power of two within the cap
		{32, 100, 8}, // 100/8 → 13 → 8
		// The last batch of a 10,000-partition run: 14 of 128 and one of 16, spread like a full
		// batch, not 7 of 256 and one of 16.
		{MaxBundle, 1808, 128},
		{MaxBundle, 1000, 64},
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
	} {
		if got := BundleSize(tc.limit, tc.n); got != tc.want {
			t.Errorf("BundleSize(%d, %d) = %d, want %d", tc.limit, tc.n, got, tc.want)
		}
	}
}

// TestBundleSize_AnEighthAndAtLeastEightMessages checks the rule on every batch size up to
// 5,000 and a range of caps: a power of two within the cap, MaxBundle and an eighth of the
// batch (rounded up), sending the batch as at least MinBundlesPerBatch messages when it
// bundles at all, and the largest such.
func TestBundleSize_AnEighthAndAtLeastEightMessages(t *testing.T) {
	ok := func(limit, n, k int) bool {
		eighth := (n + MinBundlesPerBatch - 1) / MinBundlesPerBatch
		return k <= min(max(limit, 1), MaxBundle) && (k == 1 || k <= eighth && (n+k-1)/k >= MinBundlesPerBatch)
	}
	for _, limit := range []int{0, 1, 2, 3, 12, 32, 256, 1000} {
		for n := range 5001 {
			k := BundleSize(limit, n)
			switch {
			case k < 1 || k&(k-1) != 0 || !ok(limit, n, k):
				t.Fatalf("BundleSize(%d, %d) = %d: not a power of two within the cap and an eighth, or fewer than %d messages",
					limit, n, k, MinBundlesPerBatch)
			case ok(limit, n, 2*k):
				t.Fatalf("BundleSize(%d, %d) = %d: %d would do as well", limit, n, k, 2*k)
			}
		}
	}
}
