package soak

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/blobstore"
	"github.com/batonfn/baton/internal/tools/azurite"
)

func TestMain(m *testing.M) { os.Exit(azurite.Main(m)) }

// TestReadLedger reads back what the ledger wrote, against Azurite: a finished run with its
// results and report, a skipped record with neither, and a run whose results exist without a
// manifest.
func TestReadLedger(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := azclient.Blob(azurite.Shared(t).Storage(), nil)
	if err != nil {
		t.Fatal(err)
	}
	cc := client.ServiceClient().NewContainerClient(azurite.UniqueName(t, "soak"))
	store := blobstore.New(cc, blobstore.Options{})
	if err := store.EnsureContainer(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = cc.Delete(context.Background(), nil) })

	done := &ledger.Manifest{RunID: "tick-20261125t010000z", Trigger: ledger.TriggerTimer, Occurrence: t0, State: ledger.StateSucceeded,
		Partitions: 2, PlanDone: true, Job: "synthetic"}
	skip := &ledger.Manifest{RunID: "tick-20261125t010005z", Trigger: ledger.TriggerTimer, Occurrence: t0.Add(5 * time.Second),
		State: ledger.StateSkipped, Reason: "busy"}
	for _, m := range []*ledger.Manifest{done, skip} {
		if err := store.CreateManifest(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	for i, ok := range []bool{true, false} {
		if err := store.PutResult(ctx, ledger.Result{Run: done.RunID, Index: i, OK: ok}); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.PutResult(ctx, ledger.Result{Run: "orphan-run", Index: 0, OK: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.ClaimReport(ctx, ledger.Report{Run: done.RunID, State: ledger.StateSucceeded, Partitions: 2, Succeeded: 1, Failed: 1}); err != nil {
		t.Fatal(err)
	}

	runs, err := ReadLedger(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 3 {
		t.Fatalf("read %d runs, want 3: %v", len(runs), runs)
	}
	d := runs[done.RunID]
	if !slices.Equal(d.Indexes, []int{0, 1}) || !d.Results[0].OK || d.Results[1].OK || d.Report == nil || d.Report.Failed != 1 ||
		d.Manifest.State != ledger.StateSucceeded || !d.Manifest.Occurrence.Equal(t0) {
		t.Errorf("finished run read as %+v", d)
	}
	if s := runs[skip.RunID]; s.Report != nil || len(s.Indexes) != 0 || s.Manifest.Reason != "busy" {
		t.Errorf("skipped record read as %+v", s)
	}
	if o := runs["orphan-run"]; o.Manifest.RunID != "orphan-run" || o.Manifest.State != "" || len(o.Indexes) != 1 {
		t.Errorf("results without a manifest read as %+v", o)
	}
}
