package electiontest

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/election"
)

// LogRecorder is a slog.Handler that keeps every record with its attributes (including
// those added by Logger.With), so tests can check what was logged.
type LogRecorder struct {
	mu      *sync.Mutex
	records *[]LogRecord
	attrs   []slog.Attr
}

type LogRecord struct {
	Level slog.Level
	Msg   string
	Attrs map[string]string
}

func NewLogRecorder() *LogRecorder {
	return &LogRecorder{mu: &sync.Mutex{}, records: &[]LogRecord{}}
}

func (h *LogRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (h *LogRecorder) Handle(_ context.Context, r slog.Record) error {
	rec := LogRecord{Level: r.Level, Msg: r.Message, Attrs: map[string]string{}}
	for _, a := range h.attrs {
		rec.Attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.Attrs[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.records = append(*h.records, rec)
	return nil
}

func (h *LogRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &LogRecorder{mu: h.mu, records: h.records, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *LogRecorder) WithGroup(string) slog.Handler { return h }

// find returns the first record whose message is msg.
func (h *LogRecorder) Find(msg string) (LogRecord, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range *h.records {
		if r.Msg == msg {
			return r, true
		}
	}
	return LogRecord{}, false
}

// RequireLog fails the test unless msg was logged with the holder and epoch attributes.
func RequireLog(t *testing.T, h *LogRecorder, msg string, l election.Lease) {
	t.Helper()
	r, ok := h.Find(msg)
	if !ok {
		t.Errorf("no log record %q", msg)
		return
	}
	if r.Attrs["holder"] != l.Holder.String() || r.Attrs["epoch"] != strconv.FormatInt(l.Epoch, 10) {
		t.Errorf("log %q attrs = %v, want holder=%s epoch=%d", msg, r.Attrs, l.Holder, l.Epoch)
	}
}

// NewLeader builds a Leader over lk with 15 s leases and default timing unless cfg says
// otherwise (a test of a Lock or a task); its logs go to the returned recorder.
func NewLeader(t testing.TB, lk election.Lock, cfg election.LeaderConfig) (*election.Leader, *LogRecorder) {
	t.Helper()
	rec := NewLogRecorder()
	cfg.Lock = lk
	if cfg.Identity.IsZero() {
		cfg.Identity = Holder(1)
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = 15 * time.Second
	}
	cfg.Logger = slog.New(rec)
	l, err := election.NewLeader(cfg)
	if err != nil {
		t.Fatalf("NewLeader: %v", err)
	}
	return l, rec
}
