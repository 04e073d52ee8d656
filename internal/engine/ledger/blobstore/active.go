package blobstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// The index of runs that are not final: an empty blob _active/<run> per run, whose metadata
// carries the entry, so one listing reads up to 5,000 entries.
const activePrefix = "_active/"

func activePath(run string) string { return activePrefix + run }

// Metadata keys of an index entry (lower case: Azure keeps them as given, Azurite lowers them).
const (
	metaTrigger  = "trigger"
	metaSchedule = "schedule"
	metaJob      = "job"
	metaCreated  = "created"
)

// AddActive writes a's entry, replacing any.
func (s *Store) AddActive(ctx context.Context, a ledger.ActiveRun) error {
	if err := ledger.ValidateRunID(a.Run); err != nil {
		return err
	}
	return s.putActive(ctx, a)
}

// putActive writes a's entry, replacing any.
func (s *Store) putActive(ctx context.Context, a ledger.ActiveRun) error {
	path := activePath(a.Run)
	meta := map[string]*string{metaTrigger: to.Ptr(string(a.Trigger)), metaJob: to.Ptr(a.Job),
		metaCreated: to.Ptr(a.Created.UTC().Format(time.RFC3339Nano))}
	if a.Schedule != "" {
		meta[metaSchedule] = to.Ptr(a.Schedule)
	}
	_, err := s.c.NewBlockBlobClient(path).UploadBuffer(ctx, nil, &blockblob.UploadBufferOptions{Metadata: meta})
	if err != nil {
		return translate(path, err)
	}
	return nil
}

// ListActive calls fn with every entry of the index of runs that are not final, in run-ID
// order, until fn returns false.
func (s *Store) ListActive(ctx context.Context, fn func(ledger.ActiveRun) bool) error {
	pager := s.c.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: to.Ptr(activePrefix),
		Include: container.ListBlobsInclude{Metadata: true}})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("list active runs: %w", translate(activePrefix, err))
		}
		for _, item := range page.Segment.BlobItems {
			run := strings.TrimPrefix(*item.Name, activePrefix)
			if ledger.ValidateRunID(run) != nil {
				continue
			}
			a := ledger.ActiveRun{Run: run}
			for k, v := range item.Metadata {
				if v == nil {
					continue
				}
				switch strings.ToLower(k) {
				case metaTrigger:
					a.Trigger = ledger.Trigger(*v)
				case metaSchedule:
					a.Schedule = *v
				case metaJob:
					a.Job = *v
				case metaCreated:
					a.Created, _ = time.Parse(time.RFC3339Nano, *v)
				}
			}
			if !fn(a) {
				return nil
			}
		}
	}
	return nil
}

// RemoveActive removes run's index entry (nil when it has none).
func (s *Store) RemoveActive(ctx context.Context, run string) error {
	if err := ledger.ValidateRunID(run); err != nil {
		return err
	}
	path := activePath(run)
	_, err := s.c.NewBlobClient(path).Delete(ctx, &blob.DeleteOptions{})
	if err = translate(path, err); err != nil && !errors.Is(err, ledger.ErrNotFound) {
		return fmt.Errorf("remove %s from the active runs: %w", run, err)
	}
	return nil
}

// backfillPath keeps the index's backfill state beside its entries; it is no run ID, so
// ListActive passes over it.
const backfillPath = activePrefix + "_backfill.json"

// ReadBackfill reads how far the index has been filled from older runs.
func (s *Store) ReadBackfill(ctx context.Context) (ledger.Backfill, error) {
	return readState[ledger.Backfill](ctx, s, backfillPath, "the index backfill")
}

// WriteBackfill replaces the backfill state.
func (s *Store) WriteBackfill(ctx context.Context, b ledger.Backfill) error {
	return s.writeState(ctx, backfillPath, b, "the index backfill")
}

// readState reads a record of the store's own bookkeeping at path (the zero T when there is
// none); what names it in errors.
func readState[T any](ctx context.Context, s *Store, path, what string) (T, error) {
	var v T
	if _, err := s.getJSON(ctx, path, &v); err != nil && !errors.Is(err, ledger.ErrNotFound) {
		return v, fmt.Errorf("read %s: %w", what, err)
	}
	return v, nil
}

// writeState replaces the bookkeeping record at path with v.
func (s *Store) writeState(ctx context.Context, path string, v any, what string) error {
	if _, err := s.putJSON(ctx, path, v, nil); err != nil {
		return fmt.Errorf("write %s: %w", what, err)
	}
	return nil
}
