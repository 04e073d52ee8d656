package e2e_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/enginejob"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/tools/devhost"
	"github.com/batonfn/baton/work"
	"github.com/batonfn/baton/work/synthetic"
)

// TestSlices_RunSpansInvocations: with a 100 ms budget per invocation, planning a run of
// 750 partitions (30 batches) spans several invocations (each slice checkpoints and a control message
// continues it), the leader of the first slice is killed right after it, and results are folded
// into partial aggregates by many worker invocations. The run still has exactly one result per
// partition, every partition was enqueued exactly once (no batch sent twice across slices),
// and the report is exactly the one a single full read of the results writes.
func TestSlices_RunSpansInvocations(t *testing.T) {
	t.Parallel()
	// Each slice plans at least one batch, so on a loaded machine the run may take one
	// invocation per batch: 30 of them, not 120 as 3,000 partitions would.
	const n = 750
	c := startCluster(t, clusterOpts{params: fmt.Sprintf(`{"partitions":%d}`, n), batch: 25,
		// 20 ms: a few batches a slice however fast the machine (at 100 ms a quiet machine
		// planned the run in three slices).
		extra: map[string]string{"BATON_SLICE_BUDGET": "20ms"}})
	ctx := testCtx(t, 4*time.Minute)
	run := c.startRun(ctx)
	first, err := c.h.WaitLine(ctx, func(l devhost.LogLine) bool {
		return l.Msg == "planning slice ended; a follow-up invocation continues from the checkpoint" && l.Str("run") == run
	})
	if err != nil {
		t.Fatal(err)
	}
	// Kill the leader of the first slice between slices: the continuation it sent carries on.
	if err := c.h.Instance(first.Instance).Kill(); err != nil {
		t.Fatal(err)
	}
	m, err := c.waitFinal(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	ts := checkLeadership(t, c)
	checkNoPolling(t, c, ts)
	fig := checkRun(t, c, run, runWant{partitions: n, state: ledger.StateSucceeded}, ts)

	sliceEnds := 0
	for _, l := range c.h.Lines() {
		if l.Msg == "planning slice ended; a follow-up invocation continues from the checkpoint" && l.Str("run") == run {
			sliceEnds++
		}
	}
	if sliceEnds < 3 || len(m.Segments) < 2 {
		t.Errorf("planning ended %d slices over %d segments; want it spread over several invocations", sliceEnds, len(m.Segments))
	}

	// Every partition was enqueued by the leaders exactly once: in one message (one distinct
	// message ID). Messages of a later try are a worker's: a retry, or a bundle in flight on the
	// killed instance that came back and was split one partition per message.
	ids := map[int]map[string]bool{}
	for _, r := range c.Records() {
		env, _, ok := envelopeOf(r)
		if !ok || env.Kind != work.KindPartition || env.Run != run || env.Attempt > 1 {
			continue
		}
		for _, one := range env.Singles() { // a bundle enqueues each of its partitions
			if ids[one.Part] == nil {
				ids[one.Part] = map[string]bool{}
			}
			ids[one.Part][env.MessageID()] = true
		}
	}
	for i := range n {
		if len(ids[i]) != 1 {
			t.Errorf("partition %d was enqueued as %d messages %v, want exactly one", i, len(ids[i]), ids[i])
		}
	}

	// The report equals the full read, and was made from the partials the workers folded.
	rep, _, err := c.store.ReadReport(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	var all []ledger.Result
	results := ledger.NewReader(c.store, run) // results on their own and in blocks
	for i := range n {
		r, err := results.Read(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, r)
	}
	want, err := enginejob.Of(synthetic.New()).Aggregate(ctx, work.RunInfo{Run: run, Job: m.Job, Params: m.Params, Partitions: n},
		func(yield func(ledger.Result, error) bool) {
			for _, r := range all {
				if !yield(r, nil) {
					return
				}
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	if string(rep.Aggregate) != string(want) || rep.Succeeded != n || len(rep.FailedList) != 0 {
		t.Errorf("report aggregate %s (succeeded %d), the full read gives %s", rep.Aggregate, rep.Succeeded, want)
	}
	folded := 0
	for s := range m.FoldShards {
		p, _, err := c.store.ReadPartial(ctx, run, s)
		if errors.Is(err, ledger.ErrNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		folded += p.Count
	}
	if m.FoldShards == 0 || folded < n*9/10 {
		t.Errorf("%d of %d results folded into %d partials; want the report built from the partials", folded, n, m.FoldShards)
	}
	var sum synthetic.Summary
	_ = json.Unmarshal(rep.Aggregate, &sum)
	figures(t, "run=%s partitions=%d slices=%d segments=%d killed=%s after the first slice, folded=%d/%d into %d partials, duplicates=%d redeliveries=%d, sumV=%d",
		run, n, sliceEnds+1, len(m.Segments), first.Instance, folded, n, m.FoldShards, fig.Duplicates, fig.Redelivered, sum.SumV)
}
