package api

import (
	"context"
	"sync"

	"github.com/batonfn/baton/internal/lib/parallel"
)

// The bounded fan-out of one request's storage reads.

// forEach calls fn for 0..n-1, starting them in index order, with at most readConcurrency
// calls in flight. It returns the first error fn returns, else the context's error if it ended;
// after either it starts no more calls, and the context passed to fn is cancelled on an error.
func forEach(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	if n == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		once  sync.Once
		first error
	)
	parallel.Each(n, readConcurrency, func(i int) bool {
		if ctx.Err() != nil {
			return false
		}
		if err := fn(ctx, i); err != nil {
			once.Do(func() { first = err; cancel() })
			return false
		}
		return true
	})
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return first
}
