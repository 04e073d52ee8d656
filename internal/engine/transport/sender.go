package transport

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"
)

// MaxIDLength is the longest Message.ID accepted by every transport: the Service Bus
// MessageId limit (128 characters). The Storage queue does not use the ID, but it enforces
// the same rule so that callers can swap transports without surprises.
const MaxIDLength = 128

// Message is one message to send. Body is the raw JSON envelope bytes (the transport encodes
// them as its service needs — base64 for the Storage queue).
type Message struct {
	// ID is a stable, deterministic ID such as "<runID>/<index>": the Service Bus MessageID,
	// which duplicate detection keys on. Required, at most MaxIDLength characters.
	ID string
	// Body is the payload, sent byte for byte (the Storage queue base64-encodes it on the wire).
	Body []byte
	// Properties are application properties (e.g. run, epoch, kind). Service Bus carries them;
	// the Storage queue ignores them, so receivers must not depend on them.
	Properties map[string]string
	// NotBefore is the earliest delivery time; zero means deliver now. Service Bus:
	// ScheduledEnqueueTime. Storage queue: the visibility timeout, rounded up to whole seconds
	// and capped at MaxQueueDelay.
	NotBefore time.Time
	// TTL is how long the message may wait once deliverable (counted from NotBefore when set,
	// as Service Bus does for scheduled messages); 0 means the transport's default. Must not be
	// negative.
	TTL time.Duration
}

// Sender sends messages. Send returns only after every message is accepted by the service;
// on error, some prefix/subset may have been sent (callers re-send idempotently: deterministic IDs).
//
// Implementations validate the whole slice (IDs, TTLs, sizes) before sending anything, so a
// validation error such as ErrTooLarge means nothing was sent. An empty slice is a no-op that
// returns nil without touching the network. Send is safe for concurrent use. After Close,
// Send returns ErrClosed.
type Sender interface {
	Send(ctx context.Context, msgs []Message) error
	Close(ctx context.Context) error
}

// Validate checks the rules shared by every transport for message i of a send.
func Validate(i int, m Message) error {
	switch {
	case m.ID == "":
		return fmt.Errorf("message %d: empty ID: %w", i, ErrInvalid)
	case len(m.ID) > MaxIDLength:
		return fmt.Errorf("message %d: ID is %d bytes, limit %d: %w", i, len(m.ID), MaxIDLength, ErrInvalid)
	case !utf8.ValidString(m.ID):
		return fmt.Errorf("message %d: ID is not valid UTF-8: %w", i, ErrInvalid)
	case m.TTL < 0:
		return fmt.Errorf("message %d (id %s): negative TTL %v: %w", i, m.ID, m.TTL, ErrInvalid)
	}
	return nil
}
