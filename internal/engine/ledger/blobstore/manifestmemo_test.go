package blobstore_test

import (
	"errors"
	"maps"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/blobstore"
	"github.com/batonfn/baton/internal/tools/azurite"
)

// countingTransport counts requests by method and forwards them.
type countingTransport struct {
	next *http.Client
	mu   sync.Mutex
	n    map[string]int
}

func (c *countingTransport) Do(req *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.n[req.Method]++
	c.mu.Unlock()
	return c.next.Do(req)
}

// take returns the counts since the last take.
func (c *countingTransport) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int{}
	return n
}

// A store updates a manifest it last read or wrote itself with one call, the conditional
// write; a copy that another store has made old costs that write, refused, then the read and
// the write. What the update function decides on the remembered copy other than a write (no
// change, an error, the fence) is decided again on a fresh read.
func TestBlobStore_UpdateManifestStartsFromTheCopyItLastSaw(t *testing.T) {
	ctx := t.Context()
	ct := &countingTransport{next: &http.Client{}, n: map[string]int{}}
	client, err := azclient.Blob(azurite.Shared(t).Storage(), &azblob.ClientOptions{ClientOptions: policy.ClientOptions{Transport: ct}})
	if err != nil {
		t.Fatal(err)
	}
	cc := client.ServiceClient().NewContainerClient(azurite.UniqueName(t, "memo"))
	a, b := blobstore.New(cc, blobstore.Options{}), blobstore.New(cc, blobstore.Options{})
	if err := a.EnsureContainer(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.CreateManifest(ctx, &ledger.Manifest{RunID: "memo", Job: "j", Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	bump := func(s *blobstore.Store, epoch int64) ledger.Manifest {
		t.Helper()
		m, err := s.UpdateManifest(ctx, "memo", epoch, func(m *ledger.Manifest) error {
			m.CheckRound++
			return nil
		})
		if err != nil {
			t.Fatalf("UpdateManifest: %v", err)
		}
		return m
	}
	calls := func(what string, want map[string]int) {
		t.Helper()
		if got := ct.take(); !maps.Equal(got, want) {
			t.Errorf("%s: calls %v, want %v", what, got, want)
		}
	}
	ct.take()

	bump(a, 1)
	calls("after its own create", map[string]int{"PUT": 1})
	bump(a, 1)
	calls("after its own update", map[string]int{"PUT": 1})
	if _, err := b.ReadManifest(ctx, "memo"); err != nil {
		t.Fatal(err)
	}
	ct.take()
	bump(b, 1)
	calls("after its own read", map[string]int{"PUT": 1})

	if m := bump(a, 1); m.CheckRound != 4 {
		t.Errorf("CheckRound %d after four updates by two stores, want 4", m.CheckRound)
	}
	calls("after another store's write", map[string]int{"PUT": 2, "GET": 1})

	// b's copy is old now (CheckRound 3); a decision on it is made again on a fresh read.
	var seen []int
	m, err := b.UpdateManifest(ctx, "memo", ledger.NoFence, func(m *ledger.Manifest) error {
		seen = append(seen, m.CheckRound)
		if m.CheckRound < 4 {
			return ledger.ErrNoChange
		}
		return errors.New("declined")
	})
	if err == nil || err.Error() != "declined" || m.CheckRound != 4 {
		t.Errorf("update declined on a fresh read: %v, manifest at round %d; want the declining error at round 4", err, m.CheckRound)
	}
	if want := []int{3, 4}; !slices.Equal(seen, want) {
		t.Errorf("the update function saw rounds %v, want %v (the remembered copy, then a fresh read)", seen, want)
	}
	calls("a decision on an old copy", map[string]int{"GET": 1})

	// The fence is checked on a fresh read too: a newer epoch that b has not seen fences it.
	if _, err := a.UpdateManifest(ctx, "memo", 5, func(m *ledger.Manifest) error { m.Epoch = 5; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ReadManifest(ctx, "memo"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.UpdateManifest(ctx, "memo", 6, func(m *ledger.Manifest) error { m.Epoch = 6; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := b.UpdateManifest(ctx, "memo", 5, func(m *ledger.Manifest) error { return nil }); !errors.Is(err, ledger.ErrFenced) {
		t.Errorf("an update at epoch 5 after epoch 6 was written: %v, want ErrFenced", err)
	}
}
