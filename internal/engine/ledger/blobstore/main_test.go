package blobstore_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/blobstore"
	"github.com/batonfn/baton/internal/engine/ledger/ledgertest"
	"github.com/batonfn/baton/internal/tools/azurite"
)

// TestMain stops the package's shared Azurite after the tests.
func TestMain(m *testing.M) { os.Exit(azurite.Main(m)) }

// newStore returns a store over a fresh container of the shared Azurite.
func newStore(t testing.TB, opts blobstore.Options) (*blobstore.Store, *container.Client) {
	t.Helper()
	srv := azurite.Shared(t)
	client, err := azclient.Blob(srv.Storage(), nil)
	if err != nil {
		t.Fatal(err)
	}
	cc := client.ServiceClient().NewContainerClient(azurite.UniqueName(t, "ledger"))
	s := blobstore.New(cc, opts)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.EnsureContainer(ctx); err != nil {
		t.Fatal(err)
	}
	return s, cc
}

// The blob store keeps the ledger's contract, on Azurite.
func TestBlobStore_Contract(t *testing.T) {
	ledgertest.RunContract(t, func(t *testing.T, opts ledgertest.Options) ledger.Store {
		s, _ := newStore(t, blobstore.Options{Now: opts.Now, UpdateRetries: opts.UpdateRetries})
		return s
	})
}

// Blobs under results/ that are not results (a stray file) are not listed as results, and a
// block whose metadata lacks its members (copied by a tool that drops metadata) is listed by
// reading it.
func TestBlobStore_ListResultsSkipsStrayBlobs(t *testing.T) {
	s, cc := newStore(t, blobstore.Options{})
	ctx := context.Background()
	if err := s.PutResult(ctx, ledger.Result{Run: "list", Index: 3, OK: true}); err != nil {
		t.Fatal(err)
	}
	for _, stray := range []string{"list/results/notes.txt", "list/results/a+b.json"} {
		if _, err := cc.NewBlockBlobClient(stray).UploadBuffer(ctx, []byte("x"), &blockblob.UploadBufferOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bare := `{"run":"list","span":{"first":8,"size":4},"results":[{"run":"list","index":9,"ok":true}]}`
	if _, err := cc.NewBlockBlobClient("list/results/0000008+4.json").UploadBuffer(ctx, []byte(bare), &blockblob.UploadBufferOptions{}); err != nil {
		t.Fatal(err)
	}
	var got []ledger.ResultRef
	if err := s.ListResults(ctx, "list", func(r ledger.ResultRef) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	got = ledgertest.WrittenNow(t, got)
	if want := []ledger.ResultRef{{Index: 3}, {Index: 9, Block: ledger.Span{First: 8, Size: 4}}}; !slices.Equal(got, want) {
		t.Errorf("listed %v, want %v", got, want)
	}
}

// Storage errors are one line naming the blob and what storage answered, and match the
// ledger's sentinels.
func TestBlobStore_ErrorsAreOneLine(t *testing.T) {
	s, _ := newStore(t, blobstore.Options{})
	ctx := context.Background()
	_, err := s.ReadManifest(ctx, "nope")
	if !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") || !strings.Contains(msg, "nope/manifest.json") || !strings.Contains(msg, "404 BlobNotFound") {
		t.Errorf("error %q: want one line naming the blob and 404 BlobNotFound", msg)
	}
	var se *ledger.StorageError
	if !errors.As(err, &se) || se.Status != http.StatusNotFound {
		t.Errorf("errors.As StorageError: %+v", se)
	}

	// Unreachable storage is ErrUnavailable, still one line.
	dead, err := container.NewClientWithNoCredential("http://127.0.0.1:1/devstoreaccount1/runs", &container.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = blobstore.New(dead, blobstore.Options{}).ReadManifest(dctx, "run")
	if !errors.Is(err, ledger.ErrUnavailable) || strings.Contains(err.Error(), "\n") {
		t.Errorf("unreachable storage: %q, want one line wrapping ErrUnavailable", err)
	}
}

// A ledger written by the single-schedule versions (its cursor in _schedule.json, its latest
// run in active.json, byte for byte as they wrote them) is read back for the settings'
// schedule to take over.
func TestBlobStore_ReadLegacySchedule(t *testing.T) {
	s, cc := newStore(t, blobstore.Options{})
	ctx := context.Background()
	for name, body := range map[string]string{
		"_schedule.json": `{"last":"2026-11-21T02:00:00Z","updated":"2026-11-21T02:00:41.123Z"}`,
		"active.json":    `{"run":"tick-20261121t020000z","epoch":17,"started":"2026-11-21T02:00:00.5Z"}`,
	} {
		if _, err := cc.NewBlockBlobClient(name).UploadBuffer(ctx, []byte(body), nil); err != nil {
			t.Fatal(err)
		}
	}
	l, ok, err := s.ReadLegacySchedule(ctx)
	if err != nil || !ok || !l.Cursor.Equal(time.Date(2026, 11, 21, 2, 0, 0, 0, time.UTC)) || l.Latest != "tick-20261121t020000z" {
		t.Fatalf("ReadLegacySchedule = %+v, %v, %v", l, ok, err)
	}
}
