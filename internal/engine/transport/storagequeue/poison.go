package storagequeue

import (
	"context"
	"encoding/base64"
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue/queueerror"
	"github.com/batonfn/baton/internal/engine/transport"
)

const (
	// PoisonSuffix names a queue's poison queue, where the Functions queue trigger moves a
	// message after maxDequeueCount failed deliveries: "<queue>-poison".
	PoisonSuffix = "-poison"
	// MaxPeek is the most messages one Peek returns (the Storage queue's limit per call).
	MaxPeek = 32
)

// PoisonQueue reads and purges the poison queue of a Storage queue. The poison queue is
// created by the trigger on its first poison message, so a missing one counts as empty.
type PoisonQueue struct {
	queue  string
	poison *azqueue.QueueClient
}

var _ transport.DeadLetterQueue = (*PoisonQueue)(nil)

// NewPoisonQueue returns the poison queue of queue on svc ("<queue>-poison").
func NewPoisonQueue(svc *azqueue.ServiceClient, queue string) *PoisonQueue {
	return &PoisonQueue{queue: queue, poison: svc.NewQueueClient(queue + PoisonSuffix)}
}

// Queue is the name of the queue whose poison queue this is.
func (p *PoisonQueue) Queue() string { return p.queue }

// Count returns the poison queue's approximate message count (the service's own figure: it
// may lag a few seconds behind and counts messages not yet visible too).
func (p *PoisonQueue) Count(ctx context.Context) (transport.DeadLetterCount, error) {
	out := transport.DeadLetterCount{Queue: p.queue}
	props, err := p.poison.GetProperties(ctx, nil)
	if queueerror.HasCode(err, queueerror.QueueNotFound) {
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("count poison messages of queue %s: %w", p.queue, translateQueueError(err))
	}
	if props.ApproximateMessagesCount != nil {
		out.Count = int64(*props.ApproximateMessagesCount)
	}
	return out, nil
}

// Peek returns up to max (at most MaxPeek) poison messages, oldest first, without hiding or
// removing them. Bodies are base64-decoded when they are base64, as the trigger sent them on;
// Reason and DeliveryCount stay empty (the poison queue records neither).
func (p *PoisonQueue) Peek(ctx context.Context, max int) ([]transport.DeadLetter, error) {
	if max <= 0 {
		return nil, nil
	}
	n := int32(min(max, MaxPeek))
	r, err := p.poison.PeekMessages(ctx, &azqueue.PeekMessagesOptions{NumberOfMessages: &n})
	if queueerror.HasCode(err, queueerror.QueueNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("peek poison messages of queue %s: %w", p.queue, translateQueueError(err))
	}
	out := make([]transport.DeadLetter, 0, len(r.Messages))
	for _, m := range r.Messages {
		out = append(out, poisonLetter(m))
	}
	return out, nil
}

// poisonLetter maps a peeked poison message.
func poisonLetter(m *azqueue.PeekedMessage) transport.DeadLetter {
	var d transport.DeadLetter
	if m.MessageID != nil {
		d.ID = *m.MessageID
	}
	if m.MessageText != nil {
		d.Body = []byte(*m.MessageText)
		if b, err := base64.StdEncoding.DecodeString(*m.MessageText); err == nil {
			d.Body = b
		}
	}
	if m.InsertionTime != nil {
		d.Enqueued = m.InsertionTime.UTC()
	}
	return d
}

// Purge clears the poison queue and returns its approximate count from just before.
func (p *PoisonQueue) Purge(ctx context.Context) (int64, error) {
	c, err := p.Count(ctx)
	if err != nil {
		return 0, err
	}
	if _, err := p.poison.ClearMessages(ctx, nil); err != nil && !queueerror.HasCode(err, queueerror.QueueNotFound) {
		return 0, fmt.Errorf("purge poison messages of queue %s: %w", p.queue, translateQueueError(err))
	}
	return c.Count, nil
}
