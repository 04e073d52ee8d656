// Package transporttest holds the behaviour every transport.Sender must have, as a suite both
// adapters run (the Storage queue on Azurite always, Service Bus when a broker is configured),
// the check of an adapter's error translation, and a Recorder that keeps what is sent.
package transporttest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/google/go-cmp/cmp"
)

// Received is one message as a receiver saw it.
type Received struct {
	ID         string            // "" when the transport does not carry IDs (Storage queue)
	Body       []byte            // decoded body
	Properties map[string]string // nil when the transport does not carry them
}

// Contract says what the transport under test can carry.
type Contract struct {
	MaxBody   int           // the largest body the transport must accept
	TooLarge  int           // a body size the transport must reject with transport.ErrTooLarge
	KeepsMeta bool          // the receiver sees transport.Message.ID and Properties
	Quiet     time.Duration // how long to keep looking before concluding "nothing arrived"
}

// NewSenderFunc returns a fresh sender on its own (or a shared, token-filtered) queue, and a
// receive function that returns, and removes, whatever is deliverable now (possibly nothing).
// receive is only called from the test goroutine.
type NewSenderFunc func(t *testing.T) (transport.Sender, func(ctx context.Context) []Received)

// RunSenderContract is the behaviour every transport.Sender must have. Each case uses a random token
// in bodies and IDs and ignores messages without it, so it also works on a shared queue.
func RunSenderContract(t *testing.T, c Contract, newSender NewSenderFunc) {
	t.Run("single send arrives with the exact body", func(t *testing.T) {
		s, receive := newSender(t)
		col := newCollector(t, receive)
		m := col.message(0, 0)
		if err := s.Send(t.Context(), []transport.Message{m}); err != nil {
			t.Fatalf("Send: %v", err)
		}
		col.waitFor(1, 60*time.Second)
		got := col.got[string(m.Body)]
		if !bytes.Equal(got.Body, m.Body) {
			t.Fatalf("body: got %q want %q", got.Body, m.Body)
		}
		if c.KeepsMeta {
			if got.ID != m.ID {
				t.Errorf("ID: got %q want %q", got.ID, m.ID)
			}
			if d := cmp.Diff(m.Properties, got.Properties); d != "" {
				t.Errorf("properties (-want +got):\n%s", d)
			}
		}
	})

	t.Run("1000 messages in one send all arrive", func(t *testing.T) {
		s, receive := newSender(t)
		col := newCollector(t, receive)
		msgs := make([]transport.Message, 1000)
		for i := range msgs {
			msgs[i] = col.message(i, 0)
		}
		if err := s.Send(t.Context(), msgs); err != nil {
			t.Fatalf("Send: %v", err)
		}
		col.waitFor(len(msgs), 120*time.Second)
		for i, m := range msgs {
			if _, ok := col.got[string(m.Body)]; !ok {
				t.Errorf("message %d (id %s) never arrived", i, m.ID)
			}
		}
		if col.dups != 0 {
			t.Errorf("duplicates: got %d want 0", col.dups)
		}
	})

	t.Run("NotBefore delays delivery", func(t *testing.T) {
		s, receive := newSender(t)
		col := newCollector(t, receive)
		m := col.message(0, 0)
		m.NotBefore = time.Now().Add(2 * time.Second)
		if err := s.Send(t.Context(), []transport.Message{m}); err != nil {
			t.Fatalf("Send: %v", err)
		}
		col.poll()
		if checkedAt := time.Now(); checkedAt.Before(m.NotBefore.Add(-500 * time.Millisecond)) {
			if len(col.got) != 0 {
				t.Fatalf("visible %v before NotBefore: got %d messages want 0", m.NotBefore.Sub(checkedAt), len(col.got))
			}
		} else {
			t.Logf("send and first receive took until %v past NotBefore−500ms; not checking invisibility", checkedAt.Sub(m.NotBefore.Add(-500*time.Millisecond)))
		}
		col.waitFor(1, 60*time.Second)
		// 1 s of slack for clock granularity between this process and the service.
		if early := m.NotBefore.Sub(col.firstSeen); early > time.Second {
			t.Errorf("delivered %v before NotBefore", early)
		}
	})

	t.Run("empty send is a no-op", func(t *testing.T) {
		s, receive := newSender(t)
		col := newCollector(t, receive)
		cancelled, cancel := context.WithCancel(t.Context())
		cancel()
		for _, tc := range []struct {
			name string
			ctx  context.Context
			msgs []transport.Message
		}{
			{"nil slice", t.Context(), nil},
			{"empty slice", t.Context(), []transport.Message{}},
			{"nil slice, cancelled context", cancelled, nil},
		} {
			if err := s.Send(tc.ctx, tc.msgs); err != nil {
				t.Errorf("%s: got %v want nil", tc.name, err)
			}
		}
		col.expectNothing(c.Quiet)
	})

	t.Run("cancelled context returns an error and sends nothing", func(t *testing.T) {
		s, receive := newSender(t)
		col := newCollector(t, receive)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		err := s.Send(ctx, []transport.Message{col.message(0, 0), col.message(1, 0), col.message(2, 0)})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v want an error wrapping context.Canceled", err)
		}
		col.expectNothing(c.Quiet)
	})

	t.Run("too-large body returns transport.ErrTooLarge and sends nothing", func(t *testing.T) {
		s, receive := newSender(t)
		col := newCollector(t, receive)
		err := s.Send(t.Context(), []transport.Message{col.message(0, 0), col.message(1, c.TooLarge)})
		if !errors.Is(err, transport.ErrTooLarge) {
			t.Fatalf("got %v want an error wrapping ErrTooLarge", err)
		}
		if transport.IsTransient(err) {
			t.Errorf("IsTransient(%v): got true want false", err)
		}
		col.expectNothing(c.Quiet)
	})

	t.Run("largest allowed body arrives intact", func(t *testing.T) {
		s, receive := newSender(t)
		col := newCollector(t, receive)
		m := col.message(0, c.MaxBody)
		if len(m.Body) != c.MaxBody {
			t.Fatalf("test bug: body is %d bytes want %d", len(m.Body), c.MaxBody)
		}
		if err := s.Send(t.Context(), []transport.Message{m}); err != nil {
			t.Fatalf("Send of a %d-byte body: %v", len(m.Body), err)
		}
		col.waitFor(1, 60*time.Second)
		if got := col.got[string(m.Body)]; !bytes.Equal(got.Body, m.Body) {
			t.Fatalf("body: got %d bytes want the %d sent", len(got.Body), len(m.Body))
		}
	})

	t.Run("concurrent sends on one sender all arrive", func(t *testing.T) {
		s, receive := newSender(t)
		col := newCollector(t, receive)
		const goroutines, each = 8, 25
		errs := make([]error, goroutines)
		var wg sync.WaitGroup
		for g := range goroutines {
			msgs := make([]transport.Message, each)
			for i := range msgs {
				msgs[i] = col.message(g*each+i, 0)
			}
			wg.Go(func() { errs[g] = s.Send(t.Context(), msgs) })
		}
		wg.Wait()
		for g, err := range errs {
			if err != nil {
				t.Errorf("goroutine %d: Send: %v", g, err)
			}
		}
		col.waitFor(goroutines*each, 60*time.Second)
	})

	t.Run("send after close returns ErrClosed", func(t *testing.T) {
		s, receive := newSender(t)
		col := newCollector(t, receive)
		if err := s.Close(t.Context()); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := s.Send(t.Context(), []transport.Message{col.message(0, 0)}); !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("got %v want an error wrapping ErrClosed", err)
		}
	})
}

// collector gathers the Received messages that carry its token, keyed by body.
type collector struct {
	t         *testing.T
	receive   func(context.Context) []Received
	token     string
	got       map[string]Received
	dups      int
	firstSeen time.Time
}

func newCollector(t *testing.T, receive func(context.Context) []Received) *collector {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &collector{t: t, receive: receive, token: hex.EncodeToString(b[:]), got: map[string]Received{}}
}

// message is test message i: a JSON body with the token, characters that need escaping in
// XML and JSON, and padding up to size bytes when size > 0.
func (c *collector) message(i, size int) transport.Message {
	body := fmt.Sprintf(`{"test":%q,"i":%d,"s":"héllo <&> \"q\" ✓ \u2028","pad":"`, c.token, i)
	if size > 0 {
		body += strings.Repeat("x", max(0, size-len(body)-2))
	}
	body += `"}`
	return transport.Message{
		ID:         c.token + "/" + strconv.Itoa(i),
		Body:       []byte(body),
		Properties: map[string]string{"run": c.token, "kind": "partition", "epoch": "3"},
	}
}

// poll receives once and records this test's messages.
func (c *collector) poll() {
	c.t.Helper()
	for _, r := range c.receive(c.t.Context()) {
		if !bytes.Contains(r.Body, []byte(c.token)) {
			continue // another test's message on a shared queue
		}
		if _, ok := c.got[string(r.Body)]; ok {
			c.dups++
			continue
		}
		if len(c.got) == 0 {
			c.firstSeen = time.Now()
		}
		c.got[string(r.Body)] = r
	}
}

// waitFor polls until n distinct messages arrived, failing the test at the deadline.
func (c *collector) waitFor(n int, timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		c.poll()
		if len(c.got) >= n {
			if len(c.got) > n {
				c.t.Fatalf("Received %d distinct messages want %d", len(c.got), n)
			}
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("after %v: Received %d messages want %d", timeout, len(c.got), n)
		}
		select {
		case <-c.t.Context().Done():
			c.t.Fatal("test context done")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// expectNothing polls for the quiet period (at least once) and fails if anything arrived.
func (c *collector) expectNothing(quiet time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(quiet)
	for {
		c.poll()
		if len(c.got) != 0 {
			c.t.Fatalf("Received %d messages want 0", len(c.got))
		}
		if !time.Now().Before(deadline) {
			return
		}
		select {
		case <-c.t.Context().Done():
			c.t.Fatal("test context done")
		case <-time.After(50 * time.Millisecond):
		}
	}
}
