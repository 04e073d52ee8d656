package servicebus

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/google/go-cmp/cmp"
)

func TestToServiceBusMessage(t *testing.T) {
	berlin := time.FixedZone("CET", 3600)
	at := time.Date(2026, 11, 21, 11, 0, 5, 0, berlin)
	hour, tenMin := time.Hour, 10*time.Minute
	tests := []struct {
		name       string
		m          transport.Message
		defaultTTL time.Duration
		wantProps  map[string]any
		wantSched  *time.Time
		wantTTL    *time.Duration
		wantErr    error
	}{
		{
			name:      "id, body, properties, no schedule, entity default TTL",
			m:         transport.Message{ID: "run-1/7", Body: []byte(`{"i":7}`), Properties: map[string]string{"run": "run-1", "epoch": "3", "kind": "partition"}},
			wantProps: map[string]any{"run": "run-1", "epoch": "3", "kind": "partition"},
		},
		{
			name:      "NotBefore becomes ScheduledEnqueueTime in UTC",
			m:         transport.Message{ID: "run-1/check", Body: []byte(`{}`), NotBefore: at},
			wantSched: ptr(at.UTC()),
		},
		{
			name:    "message TTL",
			m:       transport.Message{ID: "run-1/1", TTL: time.Hour},
			wantTTL: &hour,
		},
		{
			name:       "sender default TTL when the message has none",
			m:          transport.Message{ID: "run-1/1"},
			defaultTTL: tenMin,
			wantTTL:    &tenMin,
		},
		{
			name:       "message TTL wins over the default",
			m:          transport.Message{ID: "run-1/1", TTL: time.Hour},
			defaultTTL: tenMin,
			wantTTL:    &hour,
		},
		{name: "empty properties map is no properties", m: transport.Message{ID: "run-1/1", Properties: map[string]string{}}},
		{name: "empty ID", m: transport.Message{}, wantErr: transport.ErrInvalid},
		{name: "ID over 128 bytes", m: transport.Message{ID: strings.Repeat("x", 129)}, wantErr: transport.ErrInvalid},
		{name: "negative TTL", m: transport.Message{ID: "a", TTL: -1}, wantErr: transport.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := toServiceBusMessage(3, tc.m, tc.defaultTTL)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("got %v want an error wrapping %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("got %v want nil", err)
			}
			want := &azservicebus.Message{
				MessageID:             &tc.m.ID,
				ContentType:           ptr("application/json"),
				Body:                  tc.m.Body,
				ApplicationProperties: tc.wantProps,
				ScheduledEnqueueTime:  tc.wantSched,
				TimeToLive:            tc.wantTTL,
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("message (-want +got):\n%s", d)
			}
			if got.ScheduledEnqueueTime != nil && got.ScheduledEnqueueTime.Location() != time.UTC {
				t.Errorf("ScheduledEnqueueTime location: got %v want UTC", got.ScheduledEnqueueTime.Location())
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// fakeBatch has a byte budget; each message costs its body plus its ID.
type fakeBatch struct {
	budget, used int
	ids          []string
	addErr       error // returned by AddMessage when set
}

func (b *fakeBatch) AddMessage(m *azservicebus.Message) error {
	if b.addErr != nil {
		return b.addErr
	}
	cost := len(m.Body) + len(*m.MessageID)
	if b.used+cost > b.budget {
		return azservicebus.ErrMessageTooLarge
	}
	b.used += cost
	b.ids = append(b.ids, *m.MessageID)
	return nil
}

func (b *fakeBatch) NumMessages() int32 { return int32(len(b.ids)) }

// fakeBatches records sent batches; failSend/failNew fail the nth call (1-based) when set.
type fakeBatches struct {
	budget            int
	addErr            error
	newCalls, sends   int
	sent              [][]string
	failNew, failSend int
	err               error
	closed            int
}

func (f *fakeBatches) newBatch(context.Context) (batch, error) {
	f.newCalls++
	if f.newCalls == f.failNew {
		return nil, f.err
	}
	return &fakeBatch{budget: f.budget, addErr: f.addErr}, nil
}

func (f *fakeBatches) sendBatch(_ context.Context, b batch) error {
	f.sends++
	if f.sends == f.failSend {
		return f.err
	}
	f.sent = append(f.sent, b.(*fakeBatch).ids)
	return nil
}

func (f *fakeBatches) close(context.Context) error { f.closed++; return nil }

// sbMessages returns n messages whose body plus ID cost exactly 100 bytes in a fakeBatch.
func sbMessages(n int) []transport.Message {
	msgs := make([]transport.Message, n)
	for i := range msgs {
		id := fmt.Sprintf("r/%03d", i) // 5 bytes
		msgs[i] = transport.Message{ID: id, Body: []byte(strings.Repeat("b", 95))}
	}
	return msgs
}

func ids(msgs []transport.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

func TestServiceBusSender_Send_SplitsBatchesInOrder(t *testing.T) {
	tests := []struct {
		name      string
		n, budget int
		wantSizes []int
	}{
		{"everything fits one batch", 10, 1000, []int{10}},
		{"exact fit", 10, 500, []int{5, 5}},
		{"uneven split", 10, 350, []int{3, 3, 3, 1}},
		{"one per batch", 3, 150, []int{1, 1, 1}},
		{"single message", 1, 100, []int{1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeBatches{budget: tc.budget}
			s := newServiceBusSender(f, ServiceBusSenderOptions{Queue: "work"})
			msgs := sbMessages(tc.n)
			if err := s.Send(t.Context(), msgs); err != nil {
				t.Fatalf("Send: %v", err)
			}
			var sizes []int
			var all []string
			for _, b := range f.sent {
				sizes = append(sizes, len(b))
				all = append(all, b...)
			}
			if d := cmp.Diff(tc.wantSizes, sizes); d != "" {
				t.Errorf("batch sizes (-want +got):\n%s", d)
			}
			if d := cmp.Diff(ids(msgs), all); d != "" {
				t.Errorf("IDs sent, in order (-want +got):\n%s", d)
			}
		})
	}
}

func TestServiceBusSender_Send_TooLargeSendsNothing(t *testing.T) {
	for _, at := range []int{0, 5, 9} {
		t.Run(fmt.Sprintf("too-large message at index %d", at), func(t *testing.T) {
			f := &fakeBatches{budget: 250}
			s := newServiceBusSender(f, ServiceBusSenderOptions{Queue: "work"})
			msgs := sbMessages(10)
			msgs[at].Body = make([]byte, 300)
			err := s.Send(t.Context(), msgs)
			if !errors.Is(err, transport.ErrTooLarge) {
				t.Fatalf("got %v want ErrTooLarge", err)
			}
			if !errors.Is(err, azservicebus.ErrMessageTooLarge) {
				t.Errorf("got %v want it to wrap azservicebus.ErrMessageTooLarge too", err)
			}
			if want := fmt.Sprintf("message %d (id %s, 300-byte body)", at, msgs[at].ID); !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not contain %q", err, want)
			}
			if transport.IsTransient(err) {
				t.Error("IsTransient: got true want false")
			}
			if f.sends != 0 {
				t.Errorf("batches sent: got %d want 0", f.sends)
			}
		})
	}
}

func TestServiceBusSender_Send_BatchErrorStopsAndCounts(t *testing.T) {
	f := &fakeBatches{budget: 350, failSend: 2, err: &azservicebus.Error{Code: azservicebus.CodeConnectionLost}}
	s := newServiceBusSender(f, ServiceBusSenderOptions{Queue: "work"})
	err := s.Send(t.Context(), sbMessages(10))
	if err == nil {
		t.Fatal("got nil want an error")
	}
	for _, want := range []string{"batch 2 of 4", "3 messages from index 3", "queue work", "3 of 10 accepted", "connlost"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if !transport.IsTransient(err) {
		t.Errorf("IsTransient(%v): got false want true", err)
	}
	var sbErr *azservicebus.Error
	if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeConnectionLost {
		t.Errorf("errors.As *azservicebus.Error: got %v", sbErr)
	}
	if f.sends != 2 || len(f.sent) != 1 {
		t.Errorf("sends: got %d attempts, %d accepted want 2, 1", f.sends, len(f.sent))
	}
}

func TestServiceBusSender_Send_NewBatchError(t *testing.T) {
	for _, failNew := range []int{1, 2} {
		t.Run(fmt.Sprintf("call %d fails", failNew), func(t *testing.T) {
			f := &fakeBatches{budget: 350, failNew: failNew, err: &azservicebus.Error{Code: azservicebus.CodeUnauthorizedAccess}}
			s := newServiceBusSender(f, ServiceBusSenderOptions{})
			err := s.Send(t.Context(), sbMessages(10))
			if !strings.Contains(err.Error(), "new batch") {
				t.Fatalf("got %v want a new-batch error", err)
			}
			if transport.IsTransient(err) {
				t.Errorf("IsTransient: got true want false (unauthorized)")
			}
			if f.sends != 0 {
				t.Errorf("batches sent: got %d want 0", f.sends)
			}
		})
	}
}

func TestServiceBusSender_Send_AddMessageOtherError(t *testing.T) {
	boom := errors.New("marshal failed")
	f := &fakeBatches{budget: 1000, addErr: boom}
	s := newServiceBusSender(f, ServiceBusSenderOptions{})
	if err := s.Send(t.Context(), sbMessages(2)); !errors.Is(err, boom) {
		t.Fatalf("got %v want %v", err, boom)
	}
	if f.sends != 0 {
		t.Errorf("batches sent: got %d want 0", f.sends)
	}
}

func TestServiceBusSender_Send_NoOpsAndRefusals(t *testing.T) {
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		msgs    []transport.Message
		close   bool
		wantErr error
	}{
		{name: "empty send", ctx: t.Context()},
		{name: "empty send, cancelled context", ctx: cancelled},
		{name: "cancelled context", ctx: cancelled, msgs: sbMessages(2), wantErr: context.Canceled},
		{name: "invalid message", ctx: t.Context(), msgs: []transport.Message{{ID: "ok"}, {}}, wantErr: transport.ErrInvalid},
		{name: "after close", ctx: t.Context(), msgs: sbMessages(2), close: true, wantErr: transport.ErrClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeBatches{budget: 1000}
			s := newServiceBusSender(f, ServiceBusSenderOptions{})
			if tc.close {
				if err := s.Close(t.Context()); err != nil {
					t.Fatalf("Close: %v", err)
				}
				if f.closed != 1 {
					t.Errorf("underlying Close calls: got %d want 1", f.closed)
				}
			}
			err := s.Send(tc.ctx, tc.msgs)
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("got %v want %v", err, tc.wantErr)
			}
			if f.newCalls != 0 || f.sends != 0 {
				t.Errorf("calls: got %d newBatch, %d send want none", f.newCalls, f.sends)
			}
		})
	}
}

// The adapter over a real *azservicebus.Sender: with no broker listening, Send fails fast
// with a transient connlost error and the message names the queue.
func TestServiceBusSender_RealSDK_NoBrokerIsTransient(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	cs := "Endpoint=sb://" + addr + ";SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
	client, err := azservicebus.NewClientFromConnectionString(cs, &azservicebus.ClientOptions{
		RetryOptions: azservicebus.RetryOptions{MaxRetries: -1},
	})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(func() { _ = client.Close(context.Background()) })
	raw, err := client.NewSender("baton-work", nil)
	if err != nil {
		t.Fatalf("sender: %v", err)
	}
	s := NewServiceBusSender(raw, ServiceBusSenderOptions{Queue: "baton-work"})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err = s.Send(ctx, sbMessages(3))
	if !transport.IsTransient(err) {
		t.Fatalf("got %v want a transient error", err)
	}
	var sbErr *azservicebus.Error
	if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeConnectionLost {
		t.Errorf("got %v want an *azservicebus.Error with code connlost", err)
	}
	if !strings.Contains(err.Error(), "queue baton-work") {
		t.Errorf("error %q does not name the queue", err)
	}
	if err := s.Close(t.Context()); err != nil {
		t.Errorf("Close: %v", err)
	}
}
