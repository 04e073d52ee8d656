package blobstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// Each schedule's state lives beside the runs under a name that can never be a run ID (run IDs
// never start with '_'), so ListRuns never reports it. The single-schedule ledger of earlier
// versions kept its cursor and its latest run in the two legacy blobs, read once when the
// settings' schedule takes them over.
const (
	schedulesPrefix  = "_schedules/"
	legacyCursorPath = "_schedule.json"
	legacyActivePath = "active.json"
)

func schedulePath(name string) string { return schedulesPrefix + name + ".json" }

// ReadSchedule reads a schedule's state; ledger.ErrNotFound before its first heartbeat.
func (s *Store) ReadSchedule(ctx context.Context, name string) (ledger.ScheduleState, error) {
	var st ledger.ScheduleState
	if err := ledger.ValidateScheduleName(name); err != nil {
		return st, err
	}
	if _, err := s.getJSON(ctx, schedulePath(name), &st); err != nil {
		return st, fmt.Errorf("read schedule %s: %w", name, err)
	}
	return st, nil
}

// UpdateSchedule applies fn to the schedule's state and writes it with the ETag read (created
// once when missing), retrying on conflicts.
func (s *Store) UpdateSchedule(ctx context.Context, name string, fn func(*ledger.ScheduleState) error) (ledger.ScheduleState, error) {
	if err := ledger.ValidateScheduleName(name); err != nil {
		return ledger.ScheduleState{}, err
	}
	for attempt := 0; ; attempt++ {
		var st ledger.ScheduleState
		etag, err := s.getJSON(ctx, schedulePath(name), &st)
		cond := ifMatch(etag)
		switch {
		case errors.Is(err, ledger.ErrNotFound):
			st, cond = ledger.ScheduleState{Schedule: name}, ifAbsent
		case err != nil:
			return st, fmt.Errorf("read schedule %s: %w", name, err)
		}
		if err := fn(&st); errors.Is(err, ledger.ErrNoChange) {
			return st, nil
		} else if err != nil {
			return st, err
		}
		st.Schedule, st.Updated = name, s.now().UTC()
		_, err = s.putJSON(ctx, schedulePath(name), &st, cond)
		if err == nil {
			return st, nil
		}
		if !errors.Is(err, errETagMismatch) && !errors.Is(err, ledger.ErrExists) {
			return st, fmt.Errorf("update schedule %s: %w", name, err)
		}
		if attempt+1 >= s.retries {
			return st, fmt.Errorf("update schedule %s: %d attempts: %w", name, attempt+1, ledger.ErrConflict)
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 5 * time.Millisecond):
		}
	}
}

// ReadLegacySchedule reads the single-schedule ledger's cursor and latest run, if it kept them.
func (s *Store) ReadLegacySchedule(ctx context.Context) (ledger.LegacySchedule, bool, error) {
	var (
		l      ledger.LegacySchedule
		cursor struct {
			Last time.Time `json:"last"`
		}
		active struct {
			Run string `json:"run"`
		}
	)
	found := false
	for _, r := range []struct {
		path string
		v    any
	}{{legacyCursorPath, &cursor}, {legacyActivePath, &active}} {
		if _, err := s.getJSON(ctx, r.path, r.v); err == nil {
			found = true
		} else if !errors.Is(err, ledger.ErrNotFound) {
			return l, false, fmt.Errorf("read the legacy schedule: %w", err)
		}
	}
	if !cursor.Last.IsZero() {
		l.Cursor = cursor.Last.UTC()
	}
	l.Latest = active.Run
	return l, found, nil
}
