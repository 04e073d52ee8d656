package coordinator

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/batonfn/baton/internal/azurite"
)

// testBlobLockDuration is the shortest lease storage allows, to keep expiry tests short.
const testBlobLockDuration = 15 * time.Second

// newTestContainer returns a client for a container unique to this test (not created: the
// lock creates it) on the shared Azurite, deleted at cleanup. transport, when not nil,
// replaces the HTTP transport (fault injection); retry, when not nil, replaces the SDK's
// retry options.
func newTestContainer(t testing.TB, transport policy.Transporter, retry *policy.RetryOptions) *container.Client {
	t.Helper()
	srv := azurite.Shared(t)
	opts := &azblob.ClientOptions{}
	if transport != nil {
		opts.Transport = transport
	}
	if retry != nil {
		opts.Retry = *retry
	}
	cl, err := srv.Storage().NewBlobClient(opts)
	if err != nil {
		t.Fatalf("blob client: %v", err)
	}
	c := cl.ServiceClient().NewContainerClient(azurite.UniqueName(t, "lease"))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = c.Delete(ctx, nil)
	})
	return c
}

// newTestBlobLock returns a BlobLock with 15 s leases in a fresh container.
func newTestBlobLock(t testing.TB) *BlobLock {
	t.Helper()
	return newTestBlobLockOn(t, newTestContainer(t, nil, nil))
}

// newTestBlobLockOn returns a BlobLock with 15 s leases over the lease blob "leader" in c.
func newTestBlobLockOn(t testing.TB, c *container.Client) *BlobLock {
	t.Helper()
	lk, err := NewBlobLock(c, "leader", BlobLockOptions{Duration: testBlobLockDuration})
	if err != nil {
		t.Fatalf("NewBlobLock: %v", err)
	}
	return lk
}

func TestBlobLock_Contract(t *testing.T) {
	t.Parallel()
	runLockContract(t, func(t *testing.T) Lock { return newTestBlobLock(t) })
}

var _ = azcore.ETagAny
