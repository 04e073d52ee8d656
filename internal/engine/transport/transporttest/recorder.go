package transporttest

import (
	"context"
	"sync"

	"github.com/batonfn/baton/internal/engine/transport"
)

// Recorder is a transport.Sender for tests that keeps what is sent (scheduled or not) instead
// of sending it. Fail, when set, makes every Send return its error with nothing recorded.
// It is safe for concurrent use.
type Recorder struct {
	mu   sync.Mutex
	sent []transport.Message
	Fail error
}

var _ transport.Sender = (*Recorder)(nil)

// Send records msgs, or returns Fail.
func (r *Recorder) Send(ctx context.Context, msgs []transport.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.Fail != nil {
		return r.Fail
	}
	r.sent = append(r.sent, msgs...)
	return nil
}

// Close does nothing.
func (r *Recorder) Close(ctx context.Context) error { return nil }

// Sent returns a copy of the messages recorded so far, in order.
func (r *Recorder) Sent() []transport.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]transport.Message(nil), r.sent...)
}
