package coordinator

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/ledgertest"
)

// doneCounting is the ledger fake counting DoneCount calls.
type doneCounting struct {
	*ledgertest.Fake
	counts atomic.Int64
}

func (d *doneCounting) DoneCount(ctx context.Context, run string, shard int) (int64, error) {
	d.counts.Add(1)
	return d.Fake.DoneCount(ctx, run, shard)
}

// The backlog check reads the done shards' counts only until they show the backlog below the
// bound; a full backlog needs them all.
func TestBacklogFull_CountsUntilTheBacklogIsBelowTheBound(t *testing.T) {
	const next, backlog = 32 * ledger.DoneUnit, 4096 // 16 stripes of 512 enqueued partitions
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	store := &doneCounting{Fake: e.fake}
	c := e.instanceWith("a", func(cfg *Config) { cfg.MaxBacklog, cfg.Store = backlog, store })
	m := ledger.Manifest{RunID: "r", Epoch: 1, Checkpoint: ledger.Checkpoint{Next: next}, DoneLayout: ledger.DoneStriped}
	ctx := context.Background()
	lay := m.DoneLayout
	if shards := lay.Shards(next); shards != ledger.DoneStripes {
		t.Fatalf("Shards(%d) = %d", next, shards)
	}

	// Nothing done: full, after reading every shard.
	if full, err := c.backlogFull(ctx, m); err != nil || !full {
		t.Fatalf("nothing done: backlogFull = %v, %v; want true", full, err)
	}
	if got := store.counts.Swap(0); got != ledger.DoneStripes {
		t.Errorf("nothing done: %d counts read, want all %d", got, ledger.DoneStripes)
	}

	// Everything done: below the bound once 4,097 records are counted, 9 shards of 512.
	for i := range next {
		if _, err := e.fake.AppendDone(ctx, "r", lay, 1, i); err != nil {
			t.Fatal(err)
		}
	}
	if full, err := c.backlogFull(ctx, m); err != nil || full {
		t.Fatalf("all done: backlogFull = %v, %v; want false", full, err)
	}
	if got, want := store.counts.Load(), int64((next-backlog)/512+1); got != want {
		t.Errorf("all done: %d counts read, want %d", got, want)
	}
}
