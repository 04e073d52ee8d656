package blobstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"golang.org/x/sync/errgroup"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// What retention needs: a run listing that resumes from a page token (the listing's own
// continuation marker, so a pass never relists from the start), the deletion of a run, and
// the sweep's position beside the schedules' states (a name no run ID can take).

const sweepPath = "_retention.json"

// maxBatch is the most sub-requests one blob batch carries.
const maxBatch = 256

// ListRunPage lists at most max run IDs in name order from token (the storage listing's
// continuation marker; "" for the first page) in one listing call, and returns the next
// page's token ("" after the last).
func (s *Store) ListRunPage(ctx context.Context, token string, max int) ([]string, string, error) {
	opts := &container.ListBlobsHierarchyOptions{MaxResults: to.Ptr(int32(max))}
	if token != "" {
		opts.Marker = to.Ptr(token)
	}
	page, err := s.c.NewListBlobsHierarchyPager("/", opts).NextPage(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("list runs: %w", translate("", err))
	}
	var runs []string
	for _, p := range page.Segment.BlobPrefixes {
		if id := strings.TrimSuffix(*p.Name, "/"); ledger.ValidateRunID(id) == nil {
			runs = append(runs, id)
		}
	}
	next := ""
	if page.NextMarker != nil {
		next = *page.NextMarker
	}
	return runs, next, nil
}

// DeleteRun deletes every blob under run/, the manifest last: one flat listing call per 5,000
// blobs, then one blob batch per 256 blobs (a blob delete each where batches are refused),
// then one delete of the manifest.
func (s *Store) DeleteRun(ctx context.Context, run string) error {
	if err := ledger.ValidateRunID(run); err != nil {
		return err
	}
	prefix := run + "/"
	pager := s.c.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix})
	var names []string
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("delete run %s: list its records: %w", run, translate(prefix, err))
		}
		for _, item := range page.Segment.BlobItems {
			if *item.Name != manifestPath(run) {
				names = append(names, *item.Name)
			}
		}
	}
	for len(names) > 0 {
		n := min(len(names), maxBatch)
		if err := s.deleteBlobs(ctx, names[:n]); err != nil {
			return fmt.Errorf("delete run %s: %w", run, err)
		}
		names = names[n:]
	}
	if err := s.deleteBlob(ctx, manifestPath(run)); err != nil {
		return fmt.Errorf("delete run %s: %w", run, err)
	}
	s.manifests.Delete(run)
	return nil
}

// deleteBlobs deletes names (at most maxBatch) in one blob batch; a blob already gone is
// fine. A batch refused as a whole (not a storage outage) falls back to one delete per blob.
func (s *Store) deleteBlobs(ctx context.Context, names []string) error {
	if len(names) == 1 {
		return s.deleteBlob(ctx, names[0])
	}
	bb, err := s.c.NewBatchBuilder()
	if err == nil {
		for _, n := range names {
			if err = bb.Delete(n, nil); err != nil {
				break
			}
		}
	}
	if err == nil {
		var resp container.SubmitBatchResponse
		resp, err = s.c.SubmitBatch(ctx, bb, nil)
		if err == nil {
			var errs []error
			for _, item := range resp.Responses {
				if item.Error != nil && !bloberror.HasCode(item.Error, bloberror.BlobNotFound) {
					name := ""
					if item.BlobName != nil {
						name = *item.BlobName
					}
					errs = append(errs, translate(name, item.Error))
				}
			}
			return errors.Join(errs...)
		}
		if err = translate("", err); errors.Is(err, ledger.ErrUnavailable) || ctx.Err() != nil {
			return fmt.Errorf("batch delete of %d blobs: %w", len(names), err)
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, n := range names {
		g.Go(func() error { return s.deleteBlob(gctx, n) })
	}
	return g.Wait()
}

// deleteBlob deletes one blob; one already gone is fine.
func (s *Store) deleteBlob(ctx context.Context, name string) error {
	_, err := s.c.NewBlobClient(name).Delete(ctx, &blob.DeleteOptions{})
	if err = translate(name, err); err != nil && !errors.Is(err, ledger.ErrNotFound) {
		return err
	}
	return nil
}

// ReadSweep reads the retention sweep's position (the zero Sweep before the first write).
func (s *Store) ReadSweep(ctx context.Context) (ledger.Sweep, error) {
	return readState[ledger.Sweep](ctx, s, sweepPath, "the retention sweep")
}

// WriteSweep replaces the retention sweep's position.
func (s *Store) WriteSweep(ctx context.Context, sw ledger.Sweep) error {
	return s.writeState(ctx, sweepPath, sw, "the retention sweep")
}
