package storagequeue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue/queueerror"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/internal/lib/parallel"
)

// DefaultParallelism is where an adaptive QueueSender's number of EnqueueMessage calls in
// flight per Send starts (see QueueSenderOptions.Parallelism).
const DefaultParallelism = 16

// QueueSenderOptions tune a QueueSender. The zero value is ready to use.
type QueueSenderOptions struct {
	// Parallelism fixes the number of EnqueueMessage calls in flight per Send; the queue has
	// no batch API, so throughput is latency-bound without it. 0 (the default) adapts it to
	// the calls' latency between MinParallelism and MaxParallelism, starting at
	// DefaultParallelism: it grows while latency stays at its recent floor and shrinks when
	// calls queue up at the store (see window). azcore's default HTTP client keeps at most 10
	// idle connections per host; give the queue client a transport with MaxIdleConnsPerHost ≥
	// the parallelism (MaxParallelism when adaptive) to avoid reconnecting.
	Parallelism int
	// TTL applies to messages whose TTL is 0, counted from when they become visible.
	// Default DefaultQueueTTL (7 days).
	TTL time.Duration
	// NoCreate skips creating the queue before the first send. Set it when the identity may
	// only send (the "Storage Queue Data transport.Message Sender" role cannot create queues) and the
	// queue is provisioned by infrastructure.
	NoCreate bool
	// Now is the clock that turns NotBefore into a visibility timeout. Default time.Now.
	Now func() time.Time
}

// queueAPI is the subset of *azqueue.QueueClient that QueueSender uses.
type queueAPI interface {
	Create(ctx context.Context, o *azqueue.CreateOptions) (azqueue.CreateResponse, error)
	EnqueueMessage(ctx context.Context, content string, o *azqueue.EnqueueMessageOptions) (azqueue.EnqueueMessagesResponse, error)
}

var _ queueAPI = (*azqueue.QueueClient)(nil)

// QueueSender sends to an Azure Storage queue (the local, Azurite-only transport): one
// EnqueueMessage per message with base64(body) as the text, bounded parallelism, and the
// queue created before the first send. It never deduplicates; see the package doc.
type QueueSender struct {
	q      queueAPI
	name   string
	par    int     // fixed parallelism, or 0 when win adapts it
	win    *window // nil when fixed
	since  func(time.Time) time.Duration
	ttl    time.Duration
	now    func() time.Time
	create bool

	mu      sync.Mutex // guards created; held across Create so only one call creates
	created bool
	closed  atomic.Bool
}

var _ transport.Sender = (*QueueSender)(nil)

// NewQueueSender sends to an Azure Storage queue via azqueue: base64(body) as the Functions queue trigger expects by default,
// NotBefore → VisibilityTimeout (seconds, rounded up, capped at 7 days - 1s, TTL adjusted so TTL > visibility),
// bounded parallel sends (Options.Parallelism; by default adapted to latency, from 16) since the queue has no batch API.
// Creates the queue if missing (once, race-safe). Body larger than 48 KiB raw → error wrapping transport.ErrTooLarge.
func NewQueueSender(q *azqueue.QueueClient, opts QueueSenderOptions) *QueueSender {
	return newQueueSender(q, queueName(q.URL()), opts)
}

func newQueueSender(q queueAPI, name string, opts QueueSenderOptions) *QueueSender {
	s := &QueueSender{q: q, name: name, par: opts.Parallelism, ttl: opts.TTL, now: opts.Now, create: !opts.NoCreate, since: time.Since}
	if s.par <= 0 {
		s.par, s.win = 0, newWindow(DefaultParallelism)
	}
	if s.ttl <= 0 {
		s.ttl = DefaultQueueTTL
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

// queueName is the last path segment of a queue URL, for error messages.
func queueName(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Path == "" {
		return rawURL
	}
	return path.Base(u.Path)
}

// Send enqueues every message, at most Parallelism (or the adaptive window) at a time, and returns after all were
// accepted. Messages are validated and mapped first, so transport.ErrTooLarge and transport.ErrInvalid mean
// nothing was sent. On the first send error, no further sends start and the error names the
// message and how many were accepted; the accepted ones stay in the queue.
func (s *QueueSender) Send(ctx context.Context, msgs []transport.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if s.closed.Load() {
		return fmt.Errorf("send %d to queue %s: %w", len(msgs), s.name, transport.ErrClosed)
	}
	// One clock reading for the whole slice: each message is inserted at or after now, so
	// becomes visible at or after its NotBefore, never before.
	now := s.now()
	reqs := make([]queueRequest, len(msgs))
	for i, m := range msgs {
		r, err := newQueueRequest(i, m, now, s.ttl)
		if err != nil {
			return fmt.Errorf("send %d to queue %s: %w", len(msgs), s.name, err)
		}
		reqs[i] = r
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("send %d to queue %s: %w", len(msgs), s.name, err)
	}
	if err := s.ensureQueue(ctx); err != nil {
		return fmt.Errorf("send %d to queue %s: create queue: %w", len(msgs), s.name, err)
	}
	if err := s.enqueueAll(ctx, reqs); err != nil {
		return fmt.Errorf("send %d to queue %s: %w", len(msgs), s.name, err)
	}
	return nil
}

// Close marks the sender closed; later Sends return transport.ErrClosed. The azqueue client holds no
// connection of its own, so there is nothing else to release.
func (s *QueueSender) Close(context.Context) error {
	s.closed.Store(true)
	return nil
}

// ensureQueue creates the queue once per sender. Concurrent first Sends wait for the one
// Create in flight; a failed Create is retried by the next Send. Create is idempotent on the
// service, so other processes creating the same queue are harmless.
func (s *QueueSender) ensureQueue(ctx context.Context) error {
	if !s.create {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.created {
		return nil
	}
	if _, err := s.q.Create(ctx, nil); err != nil && !queueerror.HasCode(err, queueerror.QueueAlreadyExists) {
		return translateQueueError(err)
	}
	s.created = true
	return nil
}

// forgetQueue makes the next Send create the queue again (it was deleted under us).
func (s *QueueSender) forgetQueue() {
	s.mu.Lock()
	s.created = false
	s.mu.Unlock()
}

// parallelism is the number of calls in flight the next Send keeps.
func (s *QueueSender) parallelism() int {
	if s.win != nil {
		return s.win.size()
	}
	return s.par
}

// enqueueAll runs the requests on min(parallelism, len) workers and stops starting new ones
// at the first error or when ctx ends; an adaptive sender's window then learns from the calls'
// latency.
func (s *QueueSender) enqueueAll(ctx context.Context, reqs []queueRequest) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		accepted atomic.Int64
		spent    atomic.Int64 // the accepted calls' latencies, summed, in ns
		mu       sync.Mutex
		first    error
	)
	workers := min(s.parallelism(), len(reqs))
	parallel.Each(len(reqs), workers, func(i int) bool {
		if ctx.Err() != nil {
			return false
		}
		start := time.Now()
		if err := s.enqueue(ctx, reqs[i]); err != nil {
			mu.Lock()
			if first == nil {
				first = fmt.Errorf("message %d (id %s): %w", i, reqs[i].id, err)
			}
			mu.Unlock()
			cancel() // the other workers' in-flight calls end with context.Canceled, ignored
			return false
		}
		spent.Add(int64(s.since(start)))
		accepted.Add(1)
		return true
	})
	if s.win != nil {
		n := accepted.Load()
		var lat time.Duration
		if n > 0 {
			lat = time.Duration(spent.Load() / n)
		}
		s.win.observe(int(n), workers, lat, transport.IsThrottled(first))
	}
	if first == nil && int(accepted.Load()) < len(reqs) {
		first = context.Cause(ctx) // the caller's context ended between sends
	}
	if first != nil {
		return fmt.Errorf("%d of %d accepted: %w", accepted.Load(), len(reqs), first)
	}
	return nil
}

func (s *QueueSender) enqueue(ctx context.Context, r queueRequest) error {
	_, err := s.q.EnqueueMessage(ctx, r.text, &azqueue.EnqueueMessageOptions{
		VisibilityTimeout: &r.visibility,
		TimeToLive:        &r.ttl,
	})
	if err != nil && s.create && queueerror.HasCode(err, queueerror.QueueNotFound) {
		// Deleted after we created it: the next Send creates it again, so re-sending works.
		s.forgetQueue()
		return transport.MarkTransient(err)
	}
	return translateQueueError(err)
}

// translateQueueError is the one place azqueue errors are classified: RequestBodyTooLarge →
// ErrTooLarge; ServerBusy, 429 and 503 (the account's throttling) → throttled; timeout,
// 408/5xx and connection failures → transient; everything else (auth, 4xx, context
// cancellation) is returned unmarked, i.e. permanent.
func translateQueueError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case queueerror.HasCode(err, queueerror.RequestBodyTooLarge, queueerror.MessageTooLarge):
		return fmt.Errorf("%w: %w", transport.ErrTooLarge, err)
	case queueerror.HasCode(err, queueerror.ServerBusy):
		return transport.MarkThrottled(err)
	case queueerror.HasCode(err, queueerror.OperationTimedOut, queueerror.InternalError, queueerror.QueueBeingDeleted):
		return transport.MarkTransient(err)
	}
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		switch re.StatusCode {
		case http.StatusTooManyRequests, http.StatusServiceUnavailable:
			return transport.MarkThrottled(err)
		case http.StatusRequestTimeout, http.StatusInternalServerError, http.StatusBadGateway, http.StatusGatewayTimeout:
			return transport.MarkTransient(err)
		}
		return err
	}
	var opErr *net.OpError
	var netErr net.Error
	if errors.As(err, &opErr) || (errors.As(err, &netErr) && netErr.Timeout()) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return transport.MarkTransient(err)
	}
	return err
}
