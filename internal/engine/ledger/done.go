package ledger

import (
	"context"
	"errors"
	"fmt"
)

// DoneRecordSize is the size of one completion record in a done shard.
const DoneRecordSize = 32

// DoneShardSize is the number of partitions per done shard in the DoneBlocks layout. An append
// blob holds at most 50,000 blocks; 20,000 partitions leave room for redelivered appends.
const DoneShardSize = 20000

// The DoneStriped layout: units of DoneUnit consecutive partitions are dealt in turn to
// DoneStripes shards, DoneUnitsPerStripe units each (16,384 partitions); the next
// DoneStripes × DoneUnitsPerStripe units (262,144 partitions) go to the next DoneStripes shards.
const (
	// DoneUnit is a stripe's unit: a bundle of up to 256 consecutive partitions (a job's
	// default cap), aligned on a power of two, never crosses one, so it appends to one
	// shard; a larger bundle (a cap up to 1,024) spans whole units and appends once per unit.
	DoneUnit = 256
	// DoneStripes is the number of shards consecutive units are dealt to.
	DoneStripes = 16
	// DoneUnitsPerStripe is the number of units one striped shard records.
	DoneUnitsPerStripe = 64
)

// doneGroup is the partitions one set of DoneStripes shards records.
const doneGroup = DoneUnit * DoneStripes * DoneUnitsPerStripe

// DoneLayout is how a run's completion records are spread over its done shards (one append
// blob each). A run keeps the layout it was created with (Manifest.DoneLayout), so runs in
// flight when a new layout ships keep theirs.
//
// Why stripes: the messages a run's workers start together finish together, so their appends
// come together. In DoneBlocks they all go to the one shard of their 20,000 partitions, which
// makes it the run's hottest blob at the end of every wave; striped, consecutive messages append
// to DoneStripes different blobs.
type DoneLayout int

const (
	// DoneBlocks records partitions [s×DoneShardSize, (s+1)×DoneShardSize) in shard s: the
	// layout of runs created before DoneStriped (the zero value).
	DoneBlocks DoneLayout = 0
	// DoneStriped deals units of DoneUnit partitions over DoneStripes shards in turn.
	DoneStriped DoneLayout = 1
)

// String names the layout ("blocks", "striped", or "layout(n)" for one this code does not know).
func (l DoneLayout) String() string {
	switch l {
	case DoneBlocks:
		return "blocks"
	case DoneStriped:
		return "striped"
	}
	return fmt.Sprintf("layout(%d)", int(l))
}

// Known reports whether this code knows the layout. A manifest written by a newer version may
// name one it does not; such a run's done shards cannot be counted here (the check message's
// listing of results still finishes it).
func (l DoneLayout) Known() bool { return l == DoneBlocks || l == DoneStriped }

// Shard returns the done shard that records partition i (i ≥ 0).
func (l DoneLayout) Shard(i int) int {
	if l != DoneStriped {
		return i / DoneShardSize
	}
	u := i / DoneUnit
	return u/(DoneStripes*DoneUnitsPerStripe)*DoneStripes + u%DoneStripes
}

// Shards returns how many shards record the first n partitions: shards 0 to Shards(n)-1, each
// recording at least one of them.
func (l DoneLayout) Shards(n int) int {
	if n <= 0 {
		return 0
	}
	if l != DoneStriped {
		return (n + DoneShardSize - 1) / DoneShardSize
	}
	full, rest := n/doneGroup, n%doneGroup
	return full*DoneStripes + min(DoneStripes, (rest+DoneUnit-1)/DoneUnit)
}

// Expected returns how many of the first n partitions shard s records: the count of records
// that, without duplicates, says the shard is complete.
func (l DoneLayout) Expected(n, s int) int64 {
	if n <= 0 || s < 0 {
		return 0
	}
	if l != DoneStriped {
		return int64(min(max(n-s*DoneShardSize, 0), DoneShardSize))
	}
	group, stripe := s/DoneStripes, s%DoneStripes
	in := min(max(n-group*doneGroup, 0), doneGroup) // the group's partitions among the first n
	units, rest := in/DoneUnit, in%DoneUnit         // its whole units, and the partitions of the last one begun
	whole := units / DoneStripes
	if stripe < units%DoneStripes {
		whole++
	}
	c := int64(whole * DoneUnit)
	if rest > 0 && units%DoneStripes == stripe {
		c += int64(rest)
	}
	return c
}

// ErrDoneShards is returned by AppendDone (via ShardOf) for indexes that are not all in one done
// shard of the layout, or none at all, or a negative one.
var ErrDoneShards = errors.New("done records must name at least one partition, all in one done shard")

// ShardOf returns the one done shard that records every index, or ErrDoneShards.
func (l DoneLayout) ShardOf(indexes []int) (int, error) {
	if len(indexes) == 0 {
		return 0, ErrDoneShards
	}
	if !l.Known() {
		return 0, fmt.Errorf("%w: unknown done layout %s", ErrDoneShards, l)
	}
	first := indexes[0]
	if first < 0 {
		return 0, fmt.Errorf("%w: index %d", ErrDoneShards, first)
	}
	s := l.Shard(first)
	for _, i := range indexes {
		if i < 0 || l.Shard(i) != s {
			return 0, fmt.Errorf("%w: %d and %d in the %s layout", ErrDoneShards, first, i, l)
		}
	}
	return s, nil
}

// DoneCounter reads the record count of one done shard (Store.DoneCount).
type DoneCounter interface {
	DoneCount(ctx context.Context, run string, shard int) (int64, error)
}

// CountDone sums the record counts of the done shards that record the first n partitions of a
// run in the layout, one read per shard, stopping once the sum reaches enough (when positive).
// Redeliveries append twice, so the sum may overcount. On an error it returns the sum so far.
func CountDone(ctx context.Context, c DoneCounter, run string, layout DoneLayout, n int, enough int64) (int64, error) {
	var counts DoneCounts
	return counts.Count(ctx, c, run, layout, n, enough)
}

// DoneCounts is CountDone for one run counted again and again as it grows: it remembers each
// shard's count, and a shard whose count already covered every partition of the first n it
// records is not read again (records are only appended), so a count costs the shards still
// filling, not every shard of the run. The zero value is ready; not safe for concurrent use.
type DoneCounts struct {
	seen map[int]int64 // shard → its count when last read
}

// Count is CountDone, reading only the shards not known to hold all they record of the first n
// partitions.
func (d *DoneCounts) Count(ctx context.Context, c DoneCounter, run string, layout DoneLayout, n int, enough int64) (int64, error) {
	var done int64
	for s := range layout.Shards(n) {
		if enough > 0 && done >= enough {
			break
		}
		if k, ok := d.seen[s]; ok && k >= layout.Expected(n, s) {
			done += k
			continue
		}
		k, err := c.DoneCount(ctx, run, s)
		if err != nil {
			return done, err
		}
		d.Saw(s, k)
		done += k
	}
	return done, nil
}

// Saw notes shard's count, read elsewhere (a count only grows), so Count need not read a shard
// already seen to hold all it records.
func (d *DoneCounts) Saw(shard int, count int64) {
	if d.seen == nil {
		d.seen = map[int]int64{}
	}
	d.seen[shard] = max(d.seen[shard], count)
}

// Groups splits sorted partition indexes into the groups one AppendDone each records: those of
// one shard, in order.
func (l DoneLayout) Groups(idx []int) [][]int {
	var groups [][]int
	at := map[int]int{} // shard → its group's position
	for _, i := range idx {
		s := l.Shard(i)
		k, ok := at[s]
		if !ok {
			k = len(groups)
			at[s] = k
			groups = append(groups, nil)
		}
		groups[k] = append(groups[k], i)
	}
	return groups
}
