package storagequeue

import (
	"encoding/base64"
	"fmt"
	"math"
	"time"

	"github.com/batonfn/baton/internal/engine/transport"
)

const (
	// MaxQueueBody is the largest raw body the Storage queue transport sends: the queue's
	// message limit is 65,536 characters and base64 turns 49,152 bytes into exactly that.
	MaxQueueBody = 48 * 1024
	// MaxQueueDelay is the longest visibility timeout the Storage queue accepts (7 days − 1 s;
	// Azurite rejects 7 days + 1 s with OutOfRangeQueryParameterValue). A NotBefore further
	// away is delivered at the cap, i.e. early: callers that schedule check messages use
	// minutes, not weeks.
	MaxQueueDelay = 7*24*time.Hour - time.Second
	// DefaultQueueTTL is the Storage queue TTL when neither transport.Message.TTL nor
	// QueueSenderOptions.TTL is set: the service's own default, 7 days.
	DefaultQueueTTL = 7 * 24 * time.Hour
)

// queueRequest is one EnqueueMessage call: the message text and its timing, in seconds.
type queueRequest struct {
	id         string // Message.ID, for error messages only
	text       string // base64(body)
	visibility int32  // seconds until visible; 0 = now
	ttl        int32  // seconds the message lives from insertion; -1 = forever
}

// newQueueRequest maps message i to an EnqueueMessage call. Pure: now is the caller's clock.
//
// The visibility timeout is NotBefore − now rounded up to whole seconds (never early by a
// fraction), 0 when NotBefore is zero or past, capped at MaxQueueDelay. The TTL counts from
// the moment the message becomes visible, like Service Bus counts a scheduled message's TTL
// from its enqueue time, so the service's rule "TTL > visibility timeout" always holds:
// ttl = visibility + ceil(TTL). A TTL too large for int32 seconds means "never expires" (-1).
func newQueueRequest(i int, m transport.Message, now time.Time, defaultTTL time.Duration) (queueRequest, error) {
	if err := transport.Validate(i, m); err != nil {
		return queueRequest{}, err
	}
	if len(m.Body) > MaxQueueBody {
		return queueRequest{}, fmt.Errorf("message %d (id %s): body is %d bytes, the Storage queue limit is %d (base64 must fit 64 KiB): %w",
			i, m.ID, len(m.Body), MaxQueueBody, transport.ErrTooLarge)
	}
	ttl := m.TTL
	if ttl == 0 {
		ttl = defaultTTL
	}
	if ttl <= 0 {
		ttl = DefaultQueueTTL
	}
	vis := visibilitySeconds(m.NotBefore, now)
	ttlSec := vis + ceilSeconds(ttl)
	if ttlSec > math.MaxInt32 {
		ttlSec = -1
	}
	return queueRequest{
		id:         m.ID,
		text:       base64.StdEncoding.EncodeToString(m.Body),
		visibility: int32(vis),
		ttl:        int32(ttlSec),
	}, nil
}

// visibilitySeconds is the whole seconds from now until notBefore, rounded up, within
// [0, MaxQueueDelay].
func visibilitySeconds(notBefore, now time.Time) int64 {
	if notBefore.IsZero() {
		return 0
	}
	d := notBefore.Sub(now)
	if d <= 0 {
		return 0
	}
	return min(ceilSeconds(d), int64(MaxQueueDelay/time.Second))
}

// ceilSeconds rounds d (> 0) up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}
