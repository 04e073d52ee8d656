package work_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/ledgertest"
	"github.com/batonfn/baton/internal/enginejob"
	"github.com/batonfn/baton/work"
	"github.com/batonfn/baton/work/synthetic"
)

// blockBundle is bundle with the span size of its plan batch: its results go in blocks.
func blockBundle(run string, first, count, span int) work.Envelope {
	env := bundle(run, first, count)
	env.Block = span
	return env
}

// outcomes lists where each partition's result is recorded, failing on a partition recorded
// twice, and reads every one.
func (e *bundleEnv) outcomes(run string, n int) map[int]ledger.Result {
	e.t.Helper()
	l, err := ledger.List(e.ctx, e.fake, run)
	if err != nil {
		e.t.Fatal(err)
	}
	rd := ledger.NewReader(e.fake, run)
	out := map[int]ledger.Result{}
	for _, ref := range l.Refs {
		if _, dup := out[ref.Index]; dup {
			e.t.Errorf("partition %d has two recorded outcomes", ref.Index)
		}
		r, err := rd.Read(e.ctx, ref.Index)
		if err != nil {
			e.t.Fatalf("read %d: %v", ref.Index, err)
		}
		out[ref.Index] = r
	}
	if len(out) != n {
		e.t.Errorf("%d partitions recorded, want %d", len(out), n)
	}
	return out
}

func (e *bundleEnv) report(run string) (ledger.Report, synthetic.Summary) {
	e.t.Helper()
	rep, _, err := e.fake.ReadReport(e.ctx, run)
	if err != nil {
		e.t.Fatalf("report of %s: %v", run, err)
	}
	var s synthetic.Summary
	if err := json.Unmarshal(rep.Aggregate, &s); err != nil {
		e.t.Fatal(err)
	}
	return rep, s
}

// A bundle records its partitions' results in one block: one write for all of them, besides
// the one done append and the one partial update it made before; the report is the same.
func TestWorker_BundleRecordsItsResultsInOneBlock(t *testing.T) {
	e := newBundleEnv(t, true)
	e.run("blk", synthetic.Params{Partitions: 24})
	for first := 0; first < 24; first += 8 {
		ops := e.counting(func() {
			if err := e.deliver(blockBundle("blk", first, 8, 8), 1); err != nil {
				t.Fatalf("bundle at %d: %v", first, err)
			}
		})
		if ops["PutBlock"] != 1 || ops["PutResult"] != 0 || ops["ReadBlock"] != 0 || ops["AppendDone"] != 1 || ops["WritePartial"] != 1 {
			t.Errorf("bundle at %d: store calls %v; want 1 block, no result of its own, 1 append, 1 partial write", first, ops)
		}
	}
	got := e.outcomes("blk", 24)
	for i, r := range got {
		if !r.OK || r.Index != i {
			t.Errorf("partition %d: %+v", i, r)
		}
	}
	rep, s := e.report("blk")
	if rep.State != ledger.StateSucceeded || rep.Succeeded != 24 || s.SumV != sumSquares(24) {
		t.Errorf("report %s, %d succeeded, summary %+v", rep.State, rep.Succeeded, s)
	}
}

// A partition of a bundle whose try failed is left out of the block and retried alone, its
// retry sent after the block exists; the retry records its own result. A partition that
// failed for good is in the block.
func TestWorker_BlockLeavesOutTheRetriedPartition(t *testing.T) {
	e := newBundleEnv(t, true)
	e.run("rt", synthetic.Params{Partitions: 8, FailAlways: []int{3}, Permanent: []int{5}})
	if err := e.deliver(blockBundle("rt", 0, 8, 8), 1); err != nil {
		t.Fatal(err)
	}
	b, err := e.fake.ReadBlock(e.ctx, "rt", ledger.Span{First: 0, Size: 8})
	if err != nil {
		t.Fatal(err)
	}
	if _, in := b.Find(3); in || len(b.Results) != 7 {
		t.Errorf("block holds %d results (3 in it: %v), want the 7 others", len(b.Results), in)
	}
	if r, _ := b.Find(5); r.OK {
		t.Errorf("partition 5 (failed permanently) recorded as %+v", r)
	}
	sent := e.sender.Sent()
	if len(sent) != 1 {
		t.Fatalf("sent %d messages, want partition 3's retry", len(sent))
	}
	retry, err := work.DecodeEnvelope(sent[0].Body)
	if err != nil || retry.Part != 3 || retry.Attempt != 2 || retry.Block != 0 {
		t.Fatalf("retry %+v, %v; want partition 3's try 2, recording its own result", retry, err)
	}
	e.drain(0)
	got := e.outcomes("rt", 8)
	if r := got[3]; r.OK || r.Attempts < 2 {
		t.Errorf("partition 3: %+v, want the failure of its last try", r)
	}
	if _, err := e.fake.ReadResult(e.ctx, "rt", 3); err != nil {
		t.Errorf("partition 3 has no result of its own: %v", err)
	}
	rep, _ := e.report("rt")
	if rep.Succeeded != 6 || rep.Failed != 2 || rep.State != ledger.StatePartial {
		t.Errorf("report %s: %d succeeded, %d failed; want partial, 6 and 2", rep.State, rep.Succeeded, rep.Failed)
	}
}

// drain delivers every message the worker sent from the from-th on (retries, splits), and
// those they send, each until it succeeds or its last delivery.
func (e *bundleEnv) drain(from int) {
	e.t.Helper()
	for k := from; k < len(e.sender.Sent()); k++ {
		msg := e.sender.Sent()[k]
		one, err := work.DecodeEnvelope(msg.Body)
		if err != nil {
			e.t.Fatal(err)
		}
		for d := 1; d <= e.cfg.MaxDeliveries; d++ {
			if e.w.HandlePartition(e.ctx, one, work.Delivery{MessageID: msg.ID, Count: d}) == nil {
				break
			}
		}
	}
}

// A bundle's redelivery after its first delivery wrote the block and died before counting
// it: the split counts the block's partitions itself and sends out only the one left out.
func TestWorker_SplitCountsTheBlockAndSendsTheRest(t *testing.T) {
	e := newBundleEnv(t, true)
	e.run("sp", synthetic.Params{Partitions: 8})
	var rs []ledger.Result
	for i := range 8 {
		if i != 6 {
			rs = append(rs, ledger.Result{Run: "sp", Index: i, Epoch: 1, OK: true, Attempts: 1, Output: json.RawMessage(fmt.Sprintf(`{"v":%d}`, i*i))})
		}
	}
	if err := e.fake.PutBlock(e.ctx, ledger.Block{Run: "sp", Span: ledger.Span{First: 0, Size: 8}, Results: rs}); err != nil {
		t.Fatal(err)
	}
	if err := e.deliver(blockBundle("sp", 0, 8, 8), 2); err != nil {
		t.Fatalf("split: %v", err)
	}
	sent := e.sender.Sent()
	if len(sent) != 1 {
		t.Fatalf("split sent %d messages, want partition 6 alone", len(sent))
	}
	one, err := work.DecodeEnvelope(sent[0].Body)
	if err != nil || one.Part != 6 || one.Block != 0 {
		t.Fatalf("sent %+v, %v", one, err)
	}
	if n, _ := e.fake.DoneCount(e.ctx, "sp", 0); n != 7 {
		t.Errorf("%d done records after the split, want the block's 7", n)
	}
	if err := e.w.HandlePartition(e.ctx, one, work.Delivery{MessageID: sent[0].ID, Count: 1}); err != nil {
		t.Fatal(err)
	}
	e.outcomes("sp", 8)
	if rep, _ := e.report("sp"); rep.Succeeded != 8 {
		t.Errorf("report: %d succeeded, want 8", rep.Succeeded)
	}
}

// The split of a bundle whose first delivery is still running (its lock was lost) takes the
// span first; the first delivery's block then loses, and it records its results one by one:
// whatever the order, each partition has one recorded outcome and the run one report.
func TestWorker_SlowDeliveryLosesTheSpanToTheSplit(t *testing.T) {
	e := newBundleEnv(t, true)
	e.run("slow", synthetic.Params{Partitions: 8})
	if err := e.deliver(blockBundle("slow", 0, 8, 8), 2); err != nil {
		t.Fatalf("split: %v", err)
	}
	if b, err := e.fake.ReadBlock(e.ctx, "slow", ledger.Span{First: 0, Size: 8}); err != nil || len(b.Results) != 0 {
		t.Fatalf("after the split the span's block is %+v, %v; want an empty one", b, err)
	}
	// The slow first delivery ends now.
	ops := e.counting(func() {
		if err := e.another().HandlePartition(e.ctx, blockBundle("slow", 0, 8, 8), work.Delivery{MessageID: "x", Count: 1}); err != nil {
			t.Fatalf("slow delivery: %v", err)
		}
	})
	if ops["PutResult"] != 8 {
		t.Errorf("slow delivery's store calls %v; want its 8 results recorded on their own", ops)
	}
	// The split's singles find them.
	for _, msg := range e.sender.Sent() {
		one, err := work.DecodeEnvelope(msg.Body)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.w.HandlePartition(e.ctx, one, work.Delivery{MessageID: msg.ID, Count: 1}); err != nil {
			t.Fatal(err)
		}
	}
	e.outcomes("slow", 8)
	if rep, s := e.report("slow"); rep.Succeeded != 8 || s.SumV != sumSquares(8) {
		t.Errorf("report: %d succeeded, summary %+v", rep.Succeeded, s)
	}
}

// Copies of one bundle delivered at once (a re-enqueued message beside the first, on the
// Storage queue) race for the block: one wins, the others read it, and nobody writes a result
// of its own for a partition in it.
func TestWorker_CopiesOfABundleRaceForTheBlock(t *testing.T) {
	for _, retries := range []bool{true, false} {
		t.Run(fmt.Sprintf("retries=%v", retries), func(t *testing.T) {
			e := newBundleEnv(t, retries)
			e.run("race", synthetic.Params{Partitions: 16, FailAlways: []int{2}})
			var wg sync.WaitGroup
			for k := range 6 {
				wg.Go(func() {
					_ = e.another().HandlePartition(e.ctx, blockBundle("race", 0, 16, 16), work.Delivery{MessageID: fmt.Sprint(k), Count: 1})
				})
			}
			wg.Wait()
			if retries {
				e.drain(0)
			} else {
				// Partition 2 fails every delivery: the host redelivers up to the last.
				for d := 2; d <= e.cfg.MaxDeliveries; d++ {
					_ = e.deliver(blockBundle("race", 0, 16, 16), d)
				}
			}
			got := e.outcomes("race", 16)
			if got[2].OK {
				t.Errorf("partition 2 recorded as %+v, want its failure", got[2])
			}
			if rep, _ := e.report("race"); rep.Succeeded != 15 || rep.Failed != 1 {
				t.Errorf("report: %d succeeded, %d failed; want 15 and 1", rep.Succeeded, rep.Failed)
			}
		})
	}
}

// A batch planned before blocks (its messages carry no span) records a result per partition,
// as before: runs in flight at an upgrade finish as they started.
func TestWorker_BatchWithoutSpansRecordsResultsOfTheirOwn(t *testing.T) {
	e := newBundleEnv(t, true)
	e.run("old", synthetic.Params{Partitions: 16})
	// Half the run was recorded by the earlier version, one result each.
	if err := e.deliver(bundle("old", 0, 8), 1); err != nil {
		t.Fatal(err)
	}
	ops := e.counting(func() {
		if err := e.deliver(bundle("old", 8, 8), 1); err != nil {
			t.Fatal(err)
		}
	})
	if ops["PutBlock"] != 0 || ops["PutResult"] != 8 {
		t.Errorf("store calls %v; want 8 results of their own, no block", ops)
	}
	l, err := ledger.List(e.ctx, e.fake, "old")
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Refs) != 16 || slices.ContainsFunc(l.Refs, func(r ledger.ResultRef) bool { return !r.Block.IsZero() }) {
		t.Errorf("listing %v, want 16 results of their own", l.Refs)
	}
	if rep, _ := e.report("old"); rep.Succeeded != 16 {
		t.Errorf("report: %d succeeded", rep.Succeeded)
	}
}

// A block write that took effect while its answer was lost fails the delivery; the redelivery
// (split) finds the block, counts it, and sends nothing: one outcome each, one report.
func TestWorker_BlockWrittenWhileItsAnswerWasLost(t *testing.T) {
	for _, fault := range []ledgertest.Fault{ledgertest.LoseResponse, ledgertest.LoseAndRetry} {
		t.Run(fmt.Sprint(fault), func(t *testing.T) {
			e := newBundleEnv(t, true)
			faulty := &ledgertest.Faulty{Store: e.fake, Decide: ledgertest.FaultOnce(fault, "PutBlock", "")}
			e.cfg.Store = faulty
			e.w = e.another()
			e.run("lost", synthetic.Params{Partitions: 8})
			err := e.deliver(blockBundle("lost", 0, 8, 8), 1)
			if fault == ledgertest.LoseResponse && err == nil {
				t.Fatal("the delivery whose block write answered an outage succeeded")
			}
			if err != nil {
				if err := e.deliver(blockBundle("lost", 0, 8, 8), 2); err != nil {
					t.Fatalf("redelivery: %v", err)
				}
			}
			if sent := e.sender.Sent(); len(sent) != 0 {
				t.Errorf("sent %d messages; want none: every partition is in the block", len(sent))
			}
			e.outcomes("lost", 8)
			if rep, _ := e.report("lost"); rep.Succeeded != 8 {
				t.Errorf("report: %d succeeded, want 8", rep.Succeeded)
			}
			if faulty.Injected(fault) != 1 {
				t.Errorf("the fault was injected %d times, want 1", faulty.Injected(fault))
			}
		})
	}
}

// A job without a merge reads every result at the end: a block whose partitions interleave
// with one that recorded its own (retried) is read once and handed out in index order.
func TestWorker_FullReadInterleavesBlocksAndResultsOfTheirOwn(t *testing.T) {
	var failed sync.Map // partitions of a bundle run concurrently
	job := gatedJob{Job: enginejob.Of(synthetic.New()), gate: func(_ context.Context, p work.Partition) error {
		if p.Index%5 == 2 && p.Attempt == 1 {
			failed.Store(p.Index, true)
			return errors.New("flaky")
		}
		return nil
	}}
	e := newBundleEnv(t, true, withJob(job), func(cfg *work.WorkerConfig) { cfg.ReadConcurrency = 2 })
	e.run("full", synthetic.Params{Partitions: 32})
	for first := 0; first < 32; first += 8 {
		if err := e.deliver(blockBundle("full", first, 8, 8), 1); err != nil {
			t.Fatal(err)
		}
	}
	e.drain(0)
	e.outcomes("full", 32)
	rep, s := e.report("full")
	retried := 0
	failed.Range(func(any, any) bool { retried++; return true })
	if rep.State != ledger.StateSucceeded || rep.Succeeded != 32 || s.SumV != sumSquares(32) || s.Retried != retried {
		t.Errorf("report %s, %d succeeded, summary %+v; want succeeded, 32, sumV %d, %d retried", rep.State, rep.Succeeded, s, sumSquares(32), retried)
	}
}
