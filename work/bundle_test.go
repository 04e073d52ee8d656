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
		{32, 9, 2},
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
