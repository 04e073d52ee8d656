package blobstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/batonfn/baton/ledger"
)

// The schedule's bookkeeping lives beside the runs under names that can never be run IDs (run
// IDs never start with '_'), so ListRuns never reports them.
const (
	pendingPrefix = "_pending/"
	cursorPath    = "_schedule.json"
)

func pendingPath(run string) string { return pendingPrefix + run + ".json" }

// PutPending records a fired occurrence in the inbox. Several instances may record the same
// occurrence; the first record stays and later ones succeed without writing.
func (s *Store) PutPending(ctx context.Context, p ledger.Pending) error {
	if err := ledger.ValidateRunID(p.Run); err != nil {
		return err
	}
	if _, err := s.putJSON(ctx, pendingPath(p.Run), p, ifAbsent); err != nil && !errors.Is(err, ledger.ErrExists) {
		return fmt.Errorf("record pending occurrence %s: %w", p.Run, err)
	}
	return nil
}

// ListPending returns the inbox, oldest occurrence first.
func (s *Store) ListPending(ctx context.Context) ([]ledger.Pending, error) {
	var out []ledger.Pending
	pager := s.c.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: to.Ptr(pendingPrefix)})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list pending occurrences: %w", translate(pendingPrefix, err))
		}
		for _, b := range page.Segment.BlobItems {
			run := strings.TrimSuffix(strings.TrimPrefix(*b.Name, pendingPrefix), ".json")
			if ledger.ValidateRunID(run) != nil {
				continue
			}
			var p ledger.Pending
			if _, err := s.getJSON(ctx, pendingPath(run), &p); errors.Is(err, ledger.ErrNotFound) {
				continue // decided and removed since the listing
			} else if err != nil {
				return nil, fmt.Errorf("read pending occurrence %s: %w", run, err)
			}
			out = append(out, p)
		}
	}
	// Names sort by run ID, and timer run IDs sort by occurrence; keep that order explicit.
	slices.SortStableFunc(out, func(a, b ledger.Pending) int { return a.Occurrence.Compare(b.Occurrence) })
	return out, nil
}

// DeletePending removes a decided occurrence from the inbox; a missing entry is not an error.
func (s *Store) DeletePending(ctx context.Context, run string) error {
	if err := ledger.ValidateRunID(run); err != nil {
		return err
	}
	if _, err := s.c.NewBlobClient(pendingPath(run)).Delete(ctx, nil); err != nil {
		if err := translate(pendingPath(run), err); !errors.Is(err, ledger.ErrNotFound) {
			return fmt.Errorf("remove pending occurrence %s: %w", run, err)
		}
	}
	return nil
}

// ReadCursor returns the schedule cursor; ok is false before the first occurrence is decided.
func (s *Store) ReadCursor(ctx context.Context) (c ledger.Cursor, ok bool, err error) {
	if _, err := s.getJSON(ctx, cursorPath, &c); err != nil {
		if errors.Is(err, ledger.ErrNotFound) {
			return c, false, nil
		}
		return c, false, fmt.Errorf("read schedule cursor: %w", err)
	}
	return c, true, nil
}

// AdvanceCursor moves the cursor forward to last; it never moves it back.
func (s *Store) AdvanceCursor(ctx context.Context, last time.Time) error {
	last = last.UTC()
	for attempt := 0; ; attempt++ {
		var cur ledger.Cursor
		etag, err := s.getJSON(ctx, cursorPath, &cur)
		cond := ifAbsent
		switch {
		case errors.Is(err, ledger.ErrNotFound):
		case err != nil:
			return fmt.Errorf("read schedule cursor: %w", err)
		default:
			if !last.After(cur.Last) {
				return nil
			}
			cond = ifMatch(etag)
		}
		_, err = s.putJSON(ctx, cursorPath, ledger.Cursor{Last: last, Updated: s.now().UTC()}, cond)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errETagMismatch) && !errors.Is(err, ledger.ErrExists) {
			return fmt.Errorf("advance schedule cursor: %w", err)
		}
		if attempt+1 >= s.retries {
			return fmt.Errorf("advance schedule cursor: %d attempts: %w", attempt+1, ledger.ErrConflict)
		}
	}
}
