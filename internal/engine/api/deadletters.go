package api

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/transport"
)

// DeadLetterCounter counts one queue's dead letters (transport.DeadLetterQueue: the Service
// Bus dead-letter subqueue or the Storage poison queue).
type DeadLetterCounter interface {
	Queue() string
	Count(ctx context.Context) (transport.DeadLetterCount, error)
}

const (
	// DeadLetterCacheTTL is how long GET /api/leader reuses a dead-letter count: counting
	// peeks on Service Bus (a receive operation, billed against the namespace's throughput),
	// and the dashboard polls the endpoint.
	DeadLetterCacheTTL = 30 * time.Second
	// deadLetterTimeout bounds one count, so a slow queue cannot hold the reply up.
	deadLetterTimeout = 5 * time.Second
)

// DeadLetterReply is one queue's dead letters in GET /api/leader. Every key is always present.
type DeadLetterReply struct {
	transport.DeadLetterCount
	// Counted is when the count was taken (it may be up to DeadLetterCacheTTL old).
	Counted time.Time `json:"counted"`
	// Error says why the queue could not be counted ("" when it was); Count is then 0. It is
	// shortened as a run's reason is (ledger.Cause: no URL, response body or request ID); the
	// full error is in the log.
	Error string `json:"error"`
}

// deadLetterCache keeps the last counts for DeadLetterCacheTTL; one refresh at a time.
type deadLetterCache struct {
	mu   sync.Mutex
	at   time.Time
	last []DeadLetterReply
}

// counts returns the dead-letter count of every queue, counted afresh when the cached ones
// are older than DeadLetterCacheTTL, and logs each count that fails in full to log. Never
// nil: an empty list when no queue is configured.
func (c *deadLetterCache) counts(ctx context.Context, queues []DeadLetterCounter, now func() time.Time, log *slog.Logger) []DeadLetterReply {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last != nil && now().Sub(c.at) < DeadLetterCacheTTL {
		return c.last
	}
	out := make([]DeadLetterReply, len(queues))
	var wg sync.WaitGroup
	for i, q := range queues {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, deadLetterTimeout)
			defer cancel()
			n, err := q.Count(cctx)
			out[i] = DeadLetterReply{DeadLetterCount: transport.DeadLetterCount{Queue: q.Queue(), Count: n.Count, AtLeast: n.AtLeast},
				Counted: now().UTC()}
			if err != nil {
				log.Warn("count dead letters", "queue", q.Queue(), "err", err)
				out[i].Count, out[i].AtLeast, out[i].Error = 0, false, ledger.Cause(err)
			}
		})
	}
	wg.Wait()
	c.at, c.last = now(), out
	return out
}
