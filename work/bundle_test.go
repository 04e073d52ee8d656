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
		{12, 250, 8},           // a power of two within the cap
		{32, 100, 8},           // 100/8 → 13 → 8
		{MaxBundle, 1808, 256}, // a last batch: 7 messages of 256 and one of 16, not 15 of 128
		{MaxBundle, 1000, 128}, // 7 of 128 and one of 104
		{MaxBundle, 1023, 128},
		{MaxBundle, 1024, 128},
		{MaxBundle, 1025, 128}, // 8 of 128 and one of 1: 5 of 256 would be too few
		{32, 16, 2},
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

// TestBundleSize_TheLargestThatKeepsEightMessages checks the rule on every batch size up to
// 5,000 and a range of caps: a power of two within the cap and MaxBundle, sending the batch as
// at least MinBundlesPerBatch messages when it bundles at all, and the largest such.
func TestBundleSize_TheLargestThatKeepsEightMessages(t *testing.T) {
	for _, limit := range []int{0, 1, 2, 3, 12, 32, 256, 1000} {
		top := min(max(limit, 1), MaxBundle)
		for n := range 5001 {
			k := BundleSize(limit, n)
			msgs := (n + k - 1) / k
			switch {
			case k < 1 || k&(k-1) != 0 || k > top:
				t.Fatalf("BundleSize(%d, %d) = %d: not a power of two from 1 to %d", limit, n, k, top)
			case k > 1 && msgs < MinBundlesPerBatch:
				t.Fatalf("BundleSize(%d, %d) = %d: %d messages, want at least %d", limit, n, k, msgs, MinBundlesPerBatch)
			case 2*k <= top && (n+2*k-1)/(2*k) >= MinBundlesPerBatch:
				t.Fatalf("BundleSize(%d, %d) = %d: %d would still make %d messages", limit, n, k, 2*k, (n+2*k-1)/(2*k))
			}
		}
	}
}
