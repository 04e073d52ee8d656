package blobstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// ReadDone returns the partition index of every completion record in a done shard, in append
// order, duplicates included; a shard that does not exist has none. One download of 32 bytes
// per record (at most about 1.6 MB for a full shard): far cheaper than listing results/, so
// the fan-in uses it to count distinct completions before it lists.
func (s *Store) ReadDone(ctx context.Context, run string, shard int) ([]int, error) {
	out, err := s.readLog(ctx, donePath(run, shard))
	if err != nil {
		return nil, fmt.Errorf("read done %s/%d: %w", run, shard, err)
	}
	return out, nil
}

// ReadFailed returns the partition index of every record of the run's failure log, in append
// order, duplicates included (none when it has no log).
func (s *Store) ReadFailed(ctx context.Context, run string) ([]int, error) {
	out, err := s.readLog(ctx, failedPath(run))
	if err != nil {
		return nil, fmt.Errorf("read failed %s: %w", run, err)
	}
	return out, nil
}

// readLog reads the partition index of every record of the append blob at path (none when it
// does not exist).
func (s *Store) readLog(ctx context.Context, path string) ([]int, error) {
	resp, err := s.c.NewBlobClient(path).DownloadStream(ctx, nil)
	if err != nil {
		if err = translate(path, err); errors.Is(err, ledger.ErrNotFound) {
			return nil, nil
		}
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := make([]int, 0, len(b)/ledger.DoneRecordSize)
	for off := 0; off+ledger.DoneRecordSize <= len(b); off += ledger.DoneRecordSize {
		i, err := strconv.Atoi(strings.TrimSpace(string(b[off : off+12])))
		if err != nil {
			return nil, fmt.Errorf("record at %d: %w", off, err)
		}
		out = append(out, i)
	}
	return out, nil
}
