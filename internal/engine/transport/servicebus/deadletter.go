package servicebus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/batonfn/baton/internal/engine/transport"
)

// Defaults of DeadLetterQueueOptions.
const (
	// DefaultMaxDeadLetterCount is how many dead letters Count peeks before it answers
	// "at least". A peek costs a Standard namespace one credit per message (of its 1,000 a
	// second), so the default keeps a count to at most 101 credits.
	DefaultMaxDeadLetterCount = 100
	// DefaultPurgeWait is how long Purge waits for another message before it concludes that
	// the dead-letter subqueue is empty.
	DefaultPurgeWait = 2 * time.Second
	// peekPage is the most messages one peek or receive asks for.
	peekPage = 250
)

// DLQReceiver is the subset of *azservicebus.Receiver (on the dead-letter subqueue, in
// ReceiveAndDelete mode) that DeadLetterQueue uses, so tests can fake it.
type DLQReceiver interface {
	PeekMessages(ctx context.Context, maxMessageCount int, options *azservicebus.PeekMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
	ReceiveMessages(ctx context.Context, maxMessages int, options *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
	Close(ctx context.Context) error
}

var _ DLQReceiver = (*azservicebus.Receiver)(nil)

// DeadLetterQueueOptions tune a DeadLetterQueue. The zero value is ready to use.
type DeadLetterQueueOptions struct {
	// MaxCount bounds the dead letters Count peeks; beyond it the count says AtLeast.
	// Default DefaultMaxDeadLetterCount.
	MaxCount int
	// PurgeWait is how long Purge waits for another message before it stops. Default
	// DefaultPurgeWait.
	PurgeWait time.Duration
}

// DeadLetterQueue reads and purges a Service Bus queue's dead-letter subqueue with a
// receiver: peeks to count and inspect (no lock, nothing removed), ReceiveAndDelete to purge.
// Although the receiver is in ReceiveAndDelete mode, counting and peeking delete nothing:
// azservicebus attaches the link without credit and issues credit only in ReceiveMessages,
// which only Purge calls.
// It needs the Listen right (Azure Service Bus Data Receiver), which the Functions trigger
// needs anyway; the exact count from the management API would need Manage (Data Owner). A
// peek is a receive operation: on a Standard namespace it costs credits like any other, so
// callers cache counts rather than count on every request.
type DeadLetterQueue struct {
	queue    string
	r        DLQReceiver
	maxCount int
	wait     time.Duration
	purging  sync.Mutex // ReceiveMessages must not run concurrently
}

var _ transport.DeadLetterQueue = (*DeadLetterQueue)(nil)

// NewDeadLetterQueue opens a receiver on queue's dead-letter subqueue (no network I/O until
// the first call). Close closes it.
func NewDeadLetterQueue(client *azservicebus.Client, queue string, opts DeadLetterQueueOptions) (*DeadLetterQueue, error) {
	r, err := client.NewReceiverForQueue(queue, &azservicebus.ReceiverOptions{
		SubQueue:    azservicebus.SubQueueDeadLetter,
		ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete,
	})
	if err != nil {
		return nil, fmt.Errorf("dead-letter receiver for queue %s: %w", queue, translateSBError(err))
	}
	return NewDeadLetterQueueFrom(r, queue, opts), nil
}

// NewDeadLetterQueueFrom reads the dead letters of queue through r, a receiver the caller
// opened on the dead-letter subqueue in ReceiveAndDelete mode.
func NewDeadLetterQueueFrom(r DLQReceiver, queue string, opts DeadLetterQueueOptions) *DeadLetterQueue {
	if opts.MaxCount <= 0 {
		opts.MaxCount = DefaultMaxDeadLetterCount
	}
	if opts.PurgeWait <= 0 {
		opts.PurgeWait = DefaultPurgeWait
	}
	return &DeadLetterQueue{queue: queue, r: r, maxCount: opts.MaxCount, wait: opts.PurgeWait}
}

// Queue is the name of the queue whose dead letters these are.
func (d *DeadLetterQueue) Queue() string { return d.queue }

// Count peeks through the dead-letter subqueue, up to MaxCount messages.
func (d *DeadLetterQueue) Count(ctx context.Context) (transport.DeadLetterCount, error) {
	out := transport.DeadLetterCount{Queue: d.queue}
	n := 0
	err := d.peek(ctx, d.maxCount+1, func(*azservicebus.ReceivedMessage) { n++ })
	if err != nil {
		return out, fmt.Errorf("count dead letters of queue %s: %w", d.queue, err)
	}
	out.Count, out.AtLeast = int64(min(n, d.maxCount)), n > d.maxCount
	return out, nil
}

// Peek returns up to max dead letters, oldest first, without removing them.
func (d *DeadLetterQueue) Peek(ctx context.Context, max int) ([]transport.DeadLetter, error) {
	var out []transport.DeadLetter
	err := d.peek(ctx, max, func(m *azservicebus.ReceivedMessage) { out = append(out, deadLetter(m)) })
	if err != nil {
		return nil, fmt.Errorf("peek dead letters of queue %s: %w", d.queue, err)
	}
	return out, nil
}

// peek calls fn on up to max messages of the subqueue, in sequence-number order, page by page
// from the first.
func (d *DeadLetterQueue) peek(ctx context.Context, max int, fn func(*azservicebus.ReceivedMessage)) error {
	from := int64(0)
	for seen := 0; seen < max; {
		page, err := d.r.PeekMessages(ctx, min(peekPage, max-seen), &azservicebus.PeekMessagesOptions{FromSequenceNumber: &from})
		if err != nil {
			return translateSBError(err)
		}
		if len(page) == 0 {
			return nil
		}
		for _, m := range page {
			if seen == max {
				break
			}
			fn(m)
			seen++
			if m.SequenceNumber != nil && *m.SequenceNumber >= from {
				from = *m.SequenceNumber + 1
			}
		}
	}
	return nil
}

// Purge receives and deletes dead letters until none arrives within PurgeWait, and returns
// how many it deleted. Messages dead-lettered while it runs are purged too.
func (d *DeadLetterQueue) Purge(ctx context.Context) (int64, error) {
	d.purging.Lock()
	defer d.purging.Unlock()
	var n int64
	for {
		wctx, cancel := context.WithTimeout(ctx, d.wait)
		msgs, err := d.r.ReceiveMessages(wctx, peekPage, nil)
		cancel()
		n += int64(len(msgs))
		switch {
		case ctx.Err() != nil:
			return n, fmt.Errorf("purge dead letters of queue %s, %d deleted: %w", d.queue, n, ctx.Err())
		case err != nil && !errors.Is(err, context.DeadlineExceeded):
			return n, fmt.Errorf("purge dead letters of queue %s, %d deleted: %w", d.queue, n, translateSBError(err))
		case len(msgs) == 0:
			return n, nil
		}
	}
}

// Close closes the receiver.
func (d *DeadLetterQueue) Close(ctx context.Context) error {
	if err := d.r.Close(ctx); err != nil {
		return fmt.Errorf("close dead-letter receiver of queue %s: %w", d.queue, translateSBError(err))
	}
	return nil
}

// deadLetter maps a received (peeked) dead letter.
func deadLetter(m *azservicebus.ReceivedMessage) transport.DeadLetter {
	out := transport.DeadLetter{ID: m.MessageID, Body: m.Body, DeliveryCount: int(m.DeliveryCount)}
	if m.DeadLetterReason != nil {
		out.Reason = *m.DeadLetterReason
	}
	if m.DeadLetterErrorDescription != nil {
		out.Description = *m.DeadLetterErrorDescription
	}
	if m.EnqueuedTime != nil {
		out.Enqueued = m.EnqueuedTime.UTC()
	}
	return out
}
