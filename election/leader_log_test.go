package election

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"
)

// leaderLogRecorder is a slog.Handler that keeps every record with its attributes (including
// those added by Logger.With), so tests can check what was logged.
type leaderLogRecorder struct {
	mu      *sync.Mutex
	records *[]leaderLogRecord
	attrs   []slog.Attr
}

type leaderLogRecord struct {
	Level slog.Level
	Msg   string
	Attrs map[string]string
}

func newLeaderLogRecorder() *leaderLogRecorder {
	return &leaderLogRecorder{mu: &sync.Mutex{}, records: &[]leaderLogRecord{}}
}

func (h *leaderLogRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (h *leaderLogRecorder) Handle(_ context.Context, r slog.Record) error {
	rec := leaderLogRecord{Level: r.Level, Msg: r.Message, Attrs: map[string]string{}}
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

func (h *leaderLogRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &leaderLogRecorder{mu: h.mu, records: h.records, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *leaderLogRecorder) WithGroup(string) slog.Handler { return h }

// find returns the first record whose message is msg.
func (h *leaderLogRecorder) find(msg string) (leaderLogRecord, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range *h.records {
		if r.Msg == msg {
			return r, true
		}
	}
	return leaderLogRecord{}, false
}

// requireLeaderLog fails the test unless msg was logged with the holder and epoch attributes.
func requireLeaderLog(t *testing.T, h *leaderLogRecorder, msg string, l Lease) {
	t.Helper()
	r, ok := h.find(msg)
	if !ok {
		t.Errorf("no log record %q", msg)
		return
	}
	if r.Attrs["holder"] != l.Holder.String() || r.Attrs["epoch"] != strconv.FormatInt(l.Epoch, 10) {
		t.Errorf("log %q attrs = %v, want holder=%s epoch=%d", msg, r.Attrs, l.Holder, l.Epoch)
	}
}
