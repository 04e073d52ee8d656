package servicebus

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/batonfn/baton/internal/engine/transport"
)

// SBSender is the subset of *azservicebus.Sender that ServiceBusSender uses, so that callers
// can wrap or fake it. Tests cannot build a usable *azservicebus.MessageBatch, so the batch
// splitting is tested through the internal batch interface instead.
type SBSender interface {
	NewMessageBatch(ctx context.Context, options *azservicebus.MessageBatchOptions) (*azservicebus.MessageBatch, error)
	SendMessageBatch(ctx context.Context, batch *azservicebus.MessageBatch, options *azservicebus.SendMessageBatchOptions) error
	Close(ctx context.Context) error
}

var _ SBSender = (*azservicebus.Sender)(nil)

// ServiceBusSenderOptions tune a ServiceBusSender. The zero value is ready to use.
type ServiceBusSenderOptions struct {
	// TTL applies to messages whose TTL is 0. Default 0: the entity's DefaultMessageTimeToLive
	// (which also caps every message TTL).
	TTL time.Duration
	// MaxBatchBytes caps each batch's size in bytes. Default 0: the limit the entity reports
	// on the AMQP link (256 KiB on Standard, 1 MiB on Premium).
	MaxBatchBytes uint64
	// Queue names the entity in error messages (the sender does not know its own name).
	Queue string
}

// batch is the part of *azservicebus.MessageBatch the splitting logic needs.
type batch interface {
	// AddMessage returns azservicebus.ErrMessageTooLarge when m does not fit.
	AddMessage(m *azservicebus.Message) error
	NumMessages() int32
}

// batchAPI creates and sends batches; sbBatchAPI adapts an SBSender, tests use a fake with a
// byte budget.
type batchAPI interface {
	newBatch(ctx context.Context) (batch, error)
	sendBatch(ctx context.Context, b batch) error
	close(ctx context.Context) error
}

// ServiceBusSender sends to a Service Bus queue in as few batches as fit. It relies on the
// entity's duplicate detection (RequiresDuplicateDetection) to drop replays of the same
// Message.ID inside the detection window; see the package doc.
type ServiceBusSender struct {
	api    batchAPI
	ttl    time.Duration
	queue  string
	closed atomic.Bool
}

var _ transport.Sender = (*ServiceBusSender)(nil)

// NewServiceBusSender sends to a Service Bus queue via azservicebus: batches via NewMessageBatch,
// split when AddMessage returns ErrMessageTooLarge (a single message too large → transport.ErrTooLarge),
// MessageID = transport.Message.ID, ContentType application/json, ApplicationProperties from Properties,
// ScheduledEnqueueTime from NotBefore, TimeToLive from TTL. Close closes s.
func NewServiceBusSender(s SBSender, opts ServiceBusSenderOptions) *ServiceBusSender {
	return newServiceBusSender(sbBatchAPI{s: s, maxBytes: opts.MaxBatchBytes}, opts)
}

func newServiceBusSender(api batchAPI, opts ServiceBusSenderOptions) *ServiceBusSender {
	q := opts.Queue
	if q == "" {
		q = "(service bus)"
	}
	return &ServiceBusSender{api: api, ttl: opts.TTL, queue: q}
}

// Send maps every message, packs them all into batches (a new batch whenever the current one
// is full), then sends the batches in order. Because packing finishes before the first send,
// ErrTooLarge and transport.ErrInvalid mean nothing was sent. A send error stops at that batch: the
// earlier batches were accepted, and the error says how many messages that was.
func (s *ServiceBusSender) Send(ctx context.Context, msgs []transport.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if s.closed.Load() {
		return fmt.Errorf("send %d to queue %s: %w", len(msgs), s.queue, transport.ErrClosed)
	}
	sbMsgs := make([]*azservicebus.Message, len(msgs))
	for i, m := range msgs {
		sm, err := toServiceBusMessage(i, m, s.ttl)
		if err != nil {
			return fmt.Errorf("send %d to queue %s: %w", len(msgs), s.queue, err)
		}
		sbMsgs[i] = sm
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("send %d to queue %s: %w", len(msgs), s.queue, err)
	}
	batches, err := pack(ctx, s.api, sbMsgs)
	if err != nil {
		return fmt.Errorf("send %d to queue %s: %w", len(msgs), s.queue, err)
	}
	sent := 0
	for k, b := range batches {
		n := int(b.NumMessages())
		if err := s.api.sendBatch(ctx, b); err != nil {
			return fmt.Errorf("send batch %d of %d (%d messages from index %d) to queue %s, %d of %d accepted: %w",
				k+1, len(batches), n, sent, s.queue, sent, len(msgs), translateSBError(err))
		}
		sent += n
	}
	return nil
}

// pack adds msgs in order to as few batches as fit. A message that does not fit in an empty
// batch is transport.ErrTooLarge.
func pack(ctx context.Context, api batchAPI, msgs []*azservicebus.Message) ([]batch, error) {
	var batches []batch
	cur, err := api.newBatch(ctx)
	if err != nil {
		return nil, fmt.Errorf("new batch: %w", translateSBError(err))
	}
	for i, m := range msgs {
		err := cur.AddMessage(m)
		if errors.Is(err, azservicebus.ErrMessageTooLarge) && cur.NumMessages() > 0 {
			batches = append(batches, cur)
			if cur, err = api.newBatch(ctx); err != nil {
				return nil, fmt.Errorf("new batch: %w", translateSBError(err))
			}
			err = cur.AddMessage(m)
		}
		if err != nil {
			return nil, fmt.Errorf("message %d (id %s, %d-byte body): %w", i, *m.MessageID, len(m.Body), translateSBError(err))
		}
	}
	if cur.NumMessages() > 0 {
		batches = append(batches, cur)
	}
	return batches, nil
}

// Close closes the underlying azservicebus sender; later Sends return transport.ErrClosed.
func (s *ServiceBusSender) Close(ctx context.Context) error {
	s.closed.Store(true)
	if err := s.api.close(ctx); err != nil {
		return fmt.Errorf("close sender for queue %s: %w", s.queue, translateSBError(err))
	}
	return nil
}

// sbBatchAPI adapts an SBSender to batchAPI.
type sbBatchAPI struct {
	s        SBSender
	maxBytes uint64
}

// sbBatch adapts *azservicebus.MessageBatch to batch.
type sbBatch struct{ mb *azservicebus.MessageBatch }

func (b sbBatch) AddMessage(m *azservicebus.Message) error { return b.mb.AddMessage(m, nil) }
func (b sbBatch) NumMessages() int32                       { return b.mb.NumMessages() }

func (a sbBatchAPI) newBatch(ctx context.Context) (batch, error) {
	var opts *azservicebus.MessageBatchOptions
	if a.maxBytes > 0 {
		opts = &azservicebus.MessageBatchOptions{MaxBytes: a.maxBytes}
	}
	mb, err := a.s.NewMessageBatch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return sbBatch{mb}, nil
}

func (a sbBatchAPI) sendBatch(ctx context.Context, b batch) error {
	sb, ok := b.(sbBatch)
	if !ok {
		return fmt.Errorf("batch of type %T was not made by this sender", b)
	}
	return a.s.SendMessageBatch(ctx, sb.mb, nil)
}

func (a sbBatchAPI) close(ctx context.Context) error { return a.s.Close(ctx) }
