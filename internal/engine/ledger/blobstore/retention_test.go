package blobstore_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/blobstore"
	"github.com/batonfn/baton/internal/tools/azurite"
)

// requestCounter counts the HTTP requests a client sends, by method and whether the URL is a
// batch (comp=batch).
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (c *requestCounter) Do(req *policy.Request) (*http.Response, error) {
	key := req.Raw().Method
	if strings.Contains(req.Raw().URL.RawQuery, "comp=batch") {
		key += " batch"
	} else if strings.Contains(req.Raw().URL.RawQuery, "comp=list") {
		key += " list"
	}
	c.mu.Lock()
	c.counts[key]++
	c.mu.Unlock()
	return req.Next()
}

// DeleteRun of a run of 600 results costs one listing, three blob batches (256 + 256 + the
// rest with the other records) and the manifest's delete, on Azurite: batches are not refused
// there, and no blob is left.
func TestBlobStore_DeleteRunUsesBatches(t *testing.T) {
	srv := azurite.Shared(t)
	counter := &requestCounter{counts: map[string]int{}}
	client, err := azclient.Blob(srv.Storage(), &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{
		PerCallPolicies: []policy.Policy{counter}}})
	if err != nil {
		t.Fatal(err)
	}
	cc := client.ServiceClient().NewContainerClient(azurite.UniqueName(t, "ledger"))
	s := blobstore.New(cc, blobstore.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := s.EnsureContainer(ctx); err != nil {
		t.Fatal(err)
	}
	const run, n = "big", 600
	m := &ledger.Manifest{RunID: run, Trigger: ledger.TriggerManual, Job: "synthetic", State: ledger.StateSucceeded, Partitions: n}
	if err := s.CreateManifest(ctx, m); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := s.PutResult(ctx, ledger.Result{Run: run, Index: i, OK: true}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.ClaimReport(ctx, ledger.Report{Run: run, State: ledger.StateSucceeded}); err != nil {
		t.Fatal(err)
	}
	counter.mu.Lock()
	clear(counter.counts)
	counter.mu.Unlock()
	if err := s.DeleteRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	counter.mu.Lock()
	got := map[string]int{}
	for k, v := range counter.counts {
		got[k] = v
	}
	counter.mu.Unlock()
	if got["GET list"] != 1 || got["POST batch"] != 3 || got["DELETE"] != 1 || len(got) != 3 {
		t.Errorf("DeleteRun of %d results + report + manifest sent %v, want 1 listing, 3 batches, 1 delete", n, got)
	}
	left := 0
	pager := cc.NewListBlobsFlatPager(nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range page.Segment.BlobItems {
			if strings.HasPrefix(*b.Name, run+"/") {
				left++
			}
		}
	}
	if left != 0 {
		t.Errorf("%d blobs of the run left after DeleteRun", left)
	}
}
