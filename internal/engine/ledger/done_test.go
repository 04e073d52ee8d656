package ledger_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/batonfn/baton/internal/engine/ledger"
)

func TestDoneLayout_Blocks(t *testing.T) {
	lay := ledger.DoneBlocks
	for _, tc := range []struct{ index, want int }{{0, 0}, {ledger.DoneShardSize - 1, 0}, {ledger.DoneShardSize, 1}, {999_999, 49}} {
		if got := lay.Shard(tc.index); got != tc.want {
			t.Errorf("Shard(%d) = %d, want %d", tc.index, got, tc.want)
		}
	}
	if got := lay.Expected(2*ledger.DoneShardSize+5, 2); got != 5 {
		t.Errorf("Expected(2×size+5, 2) = %d, want 5", got)
	}
}

func TestDoneLayout_Striped(t *testing.T) {
	lay := ledger.DoneStriped
	// Units go round the stripes: partitions 0-255 in shard 0, 256-511 in 1, ..., 4096 (the
	// 17th unit) in 0 again; a group later, the next 16 shards.
	group := ledger.DoneUnit * ledger.DoneStripes * ledger.DoneUnitsPerStripe
	for _, tc := range []struct{ index, want int }{
		{0, 0}, {ledger.DoneUnit - 1, 0}, {ledger.DoneUnit, 1}, {15 * ledger.DoneUnit, 15}, {16 * ledger.DoneUnit, 0},
		{group - 1, 15}, {group, 16}, {group + ledger.DoneUnit, 17}, {10_000_000, 38*16 + 6},
	} {
		if got := lay.Shard(tc.index); got != tc.want {
			t.Errorf("Shard(%d) = %d, want %d", tc.index, got, tc.want)
		}
	}
	// Consecutive units never share a shard.
	for u := range 3 * ledger.DoneStripes * ledger.DoneUnitsPerStripe {
		if lay.Shard(u*ledger.DoneUnit) == lay.Shard((u+1)*ledger.DoneUnit) {
			t.Fatalf("units %d and %d share shard %d", u, u+1, lay.Shard(u*ledger.DoneUnit))
		}
	}
	// A message's partitions (aligned on a power of two up to a unit) are in one shard.
	for _, size := range []int{1, 8, 64, 256} {
		for from := 0; from < 5*ledger.DoneUnit; from += size {
			idx := make([]int, size)
			for k := range idx {
				idx[k] = from + k
			}
			if s, err := lay.ShardOf(idx); err != nil || s != lay.Shard(from) {
				t.Fatalf("ShardOf(%d partitions from %d) = %d, %v; want %d", size, from, s, err, lay.Shard(from))
			}
		}
	}
	if _, err := lay.ShardOf([]int{ledger.DoneUnit - 1, ledger.DoneUnit}); !errors.Is(err, ledger.ErrDoneShards) {
		t.Errorf("ShardOf across two units = %v, want ErrDoneShards", err)
	}
}

// For both layouts and runs of many sizes, Shards and Expected agree with counting Shard over
// every partition, and no shard records more than an append blob can take.
func TestDoneLayout_CountsAgreeWithShard(t *testing.T) {
	group := ledger.DoneUnit * ledger.DoneStripes * ledger.DoneUnitsPerStripe
	sizes := []int{0, 1, 255, 256, 257, 1000, 4095, 4096, 4097, 10_000, 19_999, 20_000, 20_001, 100_000, group - 1, group, group + 1, group + 3*ledger.DoneUnit + 7, 2*group + 70_000}
	for _, lay := range []ledger.DoneLayout{ledger.DoneBlocks, ledger.DoneStriped} {
		for _, n := range sizes {
			count := map[int]int64{}
			for i := range n {
				count[lay.Shard(i)]++
			}
			shards := lay.Shards(n)
			if len(count) != shards {
				t.Errorf("%s, n=%d: Shards = %d, but %d shards hold partitions", lay, n, shards, len(count))
			}
			var sum int64
			for s := range shards + 2 {
				got := lay.Expected(n, s)
				if got != count[s] {
					t.Errorf("%s, n=%d: Expected(shard %d) = %d, counted %d", lay, n, s, got, count[s])
				}
				if s < shards && got == 0 {
					t.Errorf("%s, n=%d: shard %d below Shards records nothing", lay, n, s)
				}
				if got > ledger.DoneShardSize {
					t.Errorf("%s, n=%d: shard %d records %d partitions, more than %d", lay, n, s, got, ledger.DoneShardSize)
				}
				sum += got
			}
			if sum != int64(n) {
				t.Errorf("%s, n=%d: Expected sums to %d", lay, n, sum)
			}
		}
	}
}

func TestDoneLayout_Unknown(t *testing.T) {
	lay := ledger.DoneLayout(7)
	if lay.Known() || lay.String() != "layout(7)" {
		t.Errorf("layout 7: Known %v, String %q", lay.Known(), lay.String())
	}
	if _, err := lay.ShardOf([]int{1}); !errors.Is(err, ledger.ErrDoneShards) {
		t.Errorf("ShardOf in an unknown layout = %v, want ErrDoneShards", err)
	}
}

// countsOf is a DoneCounter over fixed counts, recording the shards it was asked for.
type countsOf struct {
	n    map[int]int64
	read []int
}

func (c *countsOf) DoneCount(_ context.Context, _ string, shard int) (int64, error) {
	c.read = append(c.read, shard)
	return c.n[shard], nil
}

func TestCountDone(t *testing.T) {
	const n = 10_000 // 16 stripes
	c := &countsOf{n: map[int]int64{0: 700, 1: 600, 15: 500, 16: 99}}
	if got, err := ledger.CountDone(context.Background(), c, "r", ledger.DoneStriped, n, 0); err != nil || got != 1800 || len(c.read) != 16 {
		t.Errorf("CountDone = %d, %v after %d reads; want 1800 from the 16 shards of %d partitions", got, err, len(c.read), n)
	}
	c.read = nil
	if got, err := ledger.CountDone(context.Background(), c, "r", ledger.DoneStriped, n, 1000); err != nil || got != 1300 || len(c.read) != 2 {
		t.Errorf("CountDone up to 1000 = %d, %v after %d reads; want 1300 after 2", got, err, len(c.read))
	}
}

// A run counted again as it grows: the shards found holding every partition they record of
// the first n are not read again, until more partitions are enqueued to them.
func TestDoneCounts_ReadsOnlyShardsStillFilling(t *testing.T) {
	ctx := context.Background()
	lay := ledger.DoneStriped
	group := ledger.DoneUnit * ledger.DoneStripes * ledger.DoneUnitsPerStripe
	n := 3*group + 8*ledger.DoneUnit // 48 shards full, 8 shards of the fourth group begun
	c := &countsOf{n: map[int]int64{}}
	doneUpTo := func(k int) { // partitions [0, k) done
		for s := range lay.Shards(n) {
			c.n[s] = lay.Expected(k, s)
		}
	}
	doneUpTo(n - 4*ledger.DoneUnit) // the last 4 units outstanding
	var counts ledger.DoneCounts
	got, err := counts.Count(ctx, c, "r", lay, n, 0)
	if want := int64(n - 4*ledger.DoneUnit); err != nil || got != want || len(c.read) != lay.Shards(n) {
		t.Fatalf("first count = %d, %v after %d reads; want %d after all %d shards", got, err, len(c.read), want, lay.Shards(n))
	}

	// Two units more done: only the 4 shards that were short are read.
	c.read = nil
	doneUpTo(n - 2*ledger.DoneUnit)
	got, err = counts.Count(ctx, c, "r", lay, n, 0)
	if want := int64(n - 2*ledger.DoneUnit); err != nil || got != want || len(c.read) != 4 {
		t.Errorf("second count = %d, %v after reads of %v; want %d after the 4 shards still short", got, err, c.read, want)
	}

	// A batch of 8 more units enqueued (shards 56-63 of the fourth group get their first):
	// the 2 shards still short and the 8 that were given more are read.
	c.read = nil
	n2 := n + 8*ledger.DoneUnit
	got, err = counts.Count(ctx, c, "r", lay, n2, 0)
	if want := int64(n - 2*ledger.DoneUnit); err != nil || got != want || len(c.read) != 10 {
		t.Errorf("count after a batch = %d, %v after reads of %v; want %d after 10", got, err, c.read, want)
	}
}

// A count read elsewhere (the planner's look at one shard) spares Count its read while it says
// the shard is full; a lower one than Count has seen is ignored, and a short one is read again.
func TestDoneCounts_SawSparesARead(t *testing.T) {
	ctx := context.Background()
	lay := ledger.DoneStriped
	n := 4 * ledger.DoneUnit // shards 0-3, a unit each
	c := &countsOf{n: map[int]int64{0: 256, 1: 256, 2: 256, 3: 256}}
	var counts ledger.DoneCounts
	counts.Saw(3, 256)
	got, err := counts.Count(ctx, c, "r", lay, n, 0)
	if err != nil || got != int64(n) || !slices.Equal(c.read, []int{0, 1, 2}) {
		t.Errorf("count = %d, %v after reads of %v; want %d after shards 0-2", got, err, c.read, n)
	}
	counts.Saw(3, 10) // an older look: the higher count stands
	c.read = nil
	if got, err = counts.Count(ctx, c, "r", lay, n, 0); err != nil || got != int64(n) || len(c.read) != 0 {
		t.Errorf("count = %d, %v after reads of %v; want %d after none", got, err, c.read, n)
	}
	var fresh ledger.DoneCounts
	fresh.Saw(1, 100) // short of its 256: read
	c.read = nil
	if got, err = fresh.Count(ctx, c, "r", lay, n, 0); err != nil || got != int64(n) || len(c.read) != 4 {
		t.Errorf("count = %d, %v after reads of %v; want %d after all 4", got, err, c.read, n)
	}
}
