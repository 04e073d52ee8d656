package blobstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/batonfn/baton/ledger"
)

// activePath holds a pointer to the run most recently started by a leader. It is not a run
// prefix, so ListRuns never reports it.
const activePath = "active.json"

// SetActive records run as the latest started run. Only the lease holder calls it, so a plain
// overwrite is enough; a deposed leader's late write is harmless because readers confirm the
// run's state from its manifest.
func (s *Store) SetActive(ctx context.Context, a ledger.Active) error {
	if _, err := s.putJSON(ctx, activePath, a, nil); err != nil {
		return fmt.Errorf("record active run %s: %w", a.Run, err)
	}
	return nil
}

// ReadActive returns the latest started run; ok is false when none was recorded.
func (s *Store) ReadActive(ctx context.Context) (a ledger.Active, ok bool, err error) {
	if _, err := s.getJSON(ctx, activePath, &a); err != nil {
		if errors.Is(err, ledger.ErrNotFound) {
			return a, false, nil
		}
		return a, false, fmt.Errorf("read active run: %w", err)
	}
	return a, true, nil
}
