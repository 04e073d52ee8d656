package batontest

import (
	"context"
	"errors"
	"sync"

	"github.com/batonfn/baton/internal/engine/limit"
)

// memLimits is limit.Store in memory, with the blob store's semantics: Update applies fn to a
// copy of the state read and writes it only if no other write came in between (the version
// read is still the current one), trying again otherwise.
type memLimits struct {
	mu     sync.Mutex
	states map[string]versioned
}

type versioned struct {
	st      limit.State
	version int64
}

func newMemLimits() *memLimits { return &memLimits{states: map[string]versioned{}} }

func (s *memLimits) Read(ctx context.Context, name string) (limit.State, error) {
	if err := ctx.Err(); err != nil {
		return limit.State{}, context.Cause(ctx)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.states[name].st.Clone(), nil
}

func (s *memLimits) Update(ctx context.Context, name string, fn func(*limit.State) error) (limit.State, error) {
	for {
		if err := ctx.Err(); err != nil {
			return limit.State{}, context.Cause(ctx)
		}
		s.mu.Lock()
		cur := s.states[name]
		s.mu.Unlock()
		st := cur.st.Clone()
		if err := fn(&st); errors.Is(err, limit.ErrNoChange) {
			return st, nil
		} else if err != nil {
			return st, err
		}
		s.mu.Lock()
		if s.states[name].version == cur.version {
			s.states[name] = versioned{st: st.Clone(), version: cur.version + 1}
			s.mu.Unlock()
			return st, nil
		}
		s.mu.Unlock() // another write came first: read again
	}
}
