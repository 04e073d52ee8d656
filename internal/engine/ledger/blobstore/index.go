package blobstore

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// This file holds read-side helpers for the HTTP API (package api). The API lists runs from
// ListRuns (names only: one listing call per 5,000 runs) and reads manifests and reports for
// the page it shows; nothing here writes.

// ReadReportBounded reads a run's report in one download, but only decodes it when it is at
// most maxBytes long; a larger one is left unread (its size comes from the response
// headers, before the body), so a job with a huge aggregate cannot make a status request
// hold it in memory. ledger.ErrNotFound when there is no report.
func (s *Store) ReadReportBounded(ctx context.Context, run string, maxBytes int64) (ledger.Report, ledger.ReportRead, error) {
	var r ledger.Report
	var info ledger.ReportRead
	if err := ledger.ValidateRunKey(run); err != nil {
		return r, info, err
	}
	resp, err := s.c.NewBlobClient(reportPath(run)).DownloadStream(ctx, nil)
	if err != nil {
		return r, info, fmt.Errorf("read report %s: %w", run, translate(reportPath(run), err))
	}
	defer resp.Body.Close()
	if resp.ContentLength != nil {
		info.Size = *resp.ContentLength
	}
	if info.Size > maxBytes {
		return r, info, nil
	}
	// Read one byte past the bound: a missing or wrong length header cannot defeat it.
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBytes+1))
	if err != nil {
		return r, info, fmt.Errorf("read report %s: %w", run, err)
	}
	if int64(len(b)) > maxBytes {
		info.Size = max(info.Size, int64(len(b)))
		return r, info, nil
	}
	info.Size = int64(len(b))
	if err := json.Unmarshal(b, &r); err != nil {
		return r, info, fmt.Errorf("decode report %s: %w", run, err)
	}
	info.Decoded = true
	return r, info, nil
}
