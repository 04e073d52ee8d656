package ledger_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/batonfn/baton/internal/azurite"
	"github.com/batonfn/baton/ledger"
)

// TestMain stops the package's shared Azurite after the tests.
func TestMain(m *testing.M) { os.Exit(azurite.Main(m)) }

// newStore returns a store over a fresh container of the shared Azurite.
func newStore(t testing.TB, opts ledger.StoreOptions) (*ledger.Store, *container.Client) {
	t.Helper()
	srv := azurite.Shared(t)
	client, err := srv.Storage().NewBlobClient(nil)
	if err != nil {
		t.Fatal(err)
	}
	cc := client.ServiceClient().NewContainerClient(azurite.UniqueName(t, "ledger"))
	s := ledger.NewStore(cc, opts)
	if err := s.EnsureContainer(testContext(t)); err != nil {
		t.Fatal(err)
	}
	return s, cc
}

// testContext is cancelled when the test ends and bounded generously (2 shared cores).
func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// runningManifest is a minimal valid manifest for run.
func runningManifest(run string, partitions int) *ledger.Manifest {
	return &ledger.Manifest{RunID: run, Trigger: ledger.TriggerManual, Epoch: 1,
		Segments: []ledger.Segment{{Epoch: 1, From: 0}}, Job: "synthetic", State: ledger.StateRunning,
		Partitions: partitions, PlanDone: true, BatchSize: 100}
}
