package devhost

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"
)

// LogLine is one line a handler process wrote, parsed when it is a JSON log record.
type LogLine struct {
	// Instance and PID name the process that wrote it.
	Instance string
	PID      int
	// Time is the record's own time (or when the devhost read the line, for plain text).
	Time  time.Time
	Level string
	Msg   string
	// Attrs are the record's other top-level fields.
	Attrs map[string]any
	// Raw is the line as written; Stderr marks lines from standard error.
	Raw    string
	Stderr bool
}

// Str returns attribute key as a string ("" when absent); numbers are formatted.
func (l LogLine) Str(key string) string {
	v, ok := l.Attrs[key]
	if !ok || v == nil {
		return ""
	}
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return fmt.Sprint(int64(x))
	default:
		b, _ := json.Marshal(x)
		return string(b)
	}
}

// Int returns attribute key as an integer (0 when absent or not a number).
func (l LogLine) Int(key string) int64 {
	switch x := l.Attrs[key].(type) {
	case float64:
		return int64(x)
	case json.Number:
		n, _ := x.Int64()
		return n
	}
	return 0
}

// parseLine reads a handler's output line: a slog JSON record, or plain text.
func parseLine(instance string, pid int, raw string, stderr bool, now time.Time) LogLine {
	l := LogLine{Instance: instance, PID: pid, Raw: raw, Stderr: stderr, Time: now, Msg: raw}
	if strings.HasPrefix(raw, "{") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(raw), &rec); err == nil {
			l.Attrs = map[string]any{}
			for k, v := range rec {
				switch k {
				case slog.TimeKey:
					if s, ok := v.(string); ok {
						if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
							l.Time = t
						}
					}
				case slog.LevelKey:
					l.Level, _ = v.(string)
				case slog.MessageKey:
					l.Msg, _ = v.(string)
				default:
					l.Attrs[k] = v
				}
			}
			return l
		}
	}
	if stderr {
		l.Level = "STDERR"
	}
	return l
}

// levelOf maps a record's level text to a slog level (plain text counts as info).
func levelOf(s string) slog.Level {
	var l slog.Level
	switch {
	case s == "STDERR":
		return slog.LevelWarn
	case l.UnmarshalText([]byte(s)) == nil:
		return l
	}
	return slog.LevelInfo
}

// hiddenAttrs are left out of the terminal rendering of a handler line: the prefix already
// names the instance.
var hiddenAttrs = map[string]bool{"instance": true}

// durationAttrs are slog durations, which the JSON handler writes as nanoseconds.
var durationAttrs = map[string]bool{"leaseDuration": true, "held": true, "sinceProgress": true, "stallTimeout": true}

// formatLine renders a handler line for a terminal: time, instance, level, message, attrs.
func formatLine(l LogLine) string {
	var b strings.Builder
	b.WriteString(l.Time.Local().Format("15:04:05.000"))
	fmt.Fprintf(&b, " %-10s ", l.Instance)
	lvl := l.Level
	if lvl == "" {
		lvl = "INFO"
	}
	fmt.Fprintf(&b, "%-5s %s", lvl, l.Msg)
	keys := make([]string, 0, len(l.Attrs))
	for k := range l.Attrs {
		if !hiddenAttrs[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.WriteString(" ")
		b.WriteString(k)
		b.WriteString("=")
		if n, ok := l.Attrs[k].(float64); ok && durationAttrs[k] {
			b.WriteString(time.Duration(n).String())
			continue
		}
		b.WriteString(quoteIfNeeded(l.Str(k)))
	}
	return b.String()
}

func quoteIfNeeded(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\n\"=") {
		b, _ := json.Marshal(s)
		return string(b)
	}
	return s
}

// logBook keeps every handler line in memory (bounded) and lets callers wait for one.
type logBook struct {
	mu      sync.Mutex
	lines   []LogLine
	max     int
	dropped int
	changed chan struct{}
	subs    map[int]func(LogLine)
	nextSub int
}

func newLogBook(max int) *logBook {
	return &logBook{max: max, changed: make(chan struct{}), subs: map[int]func(LogLine){}}
}

func (b *logBook) add(l LogLine) {
	b.mu.Lock()
	if len(b.lines) >= b.max {
		drop := b.max / 10
		b.lines = append(b.lines[:0], b.lines[drop:]...)
		b.dropped += drop
	}
	b.lines = append(b.lines, l)
	ch := b.changed
	b.changed = make(chan struct{})
	subs := make([]func(LogLine), 0, len(b.subs))
	for _, fn := range b.subs {
		subs = append(subs, fn)
	}
	b.mu.Unlock()
	close(ch)
	for _, fn := range subs {
		fn(l)
	}
}

func (b *logBook) snapshot() []LogLine {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]LogLine(nil), b.lines...)
}

func (b *logBook) subscribe(fn func(LogLine)) func() {
	b.mu.Lock()
	defer b.mu.Unlock()
	id := b.nextSub
	b.nextSub++
	b.subs[id] = fn
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.subs, id)
	}
}

// wait returns the first line (from the start of the book) for which match is true.
func (b *logBook) wait(ctx context.Context, match func(LogLine) bool) (LogLine, error) {
	seen := 0
	for {
		b.mu.Lock()
		lines := b.lines[min(seen, len(b.lines)):]
		ch := b.changed
		for _, l := range lines {
			if match(l) {
				b.mu.Unlock()
				return l, nil
			}
		}
		seen = len(b.lines)
		b.mu.Unlock()
		select {
		case <-ctx.Done():
			return LogLine{}, fmt.Errorf("wait for a handler log line: %w", ctx.Err())
		case <-ch:
		}
	}
}

// lineHandler is a slog.Handler that writes the devhost's own records in the same terminal
// format as handler lines, under the name "devhost".
type lineHandler struct {
	mu    *sync.Mutex
	w     io.Writer
	level slog.Leveler
	attrs []slog.Attr
}

func newLineHandler(w io.Writer, level slog.Leveler) *lineHandler {
	return &lineHandler{mu: &sync.Mutex{}, w: w, level: level}
}

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level.Level() }

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	var b bytes.Buffer
	b.WriteString(r.Time.Local().Format("15:04:05.000"))
	fmt.Fprintf(&b, " %-10s %-5s %s", "devhost", r.Level.String(), r.Message)
	write := func(a slog.Attr) bool {
		if a.Equal(slog.Attr{}) {
			return true
		}
		b.WriteString(" ")
		b.WriteString(a.Key)
		b.WriteString("=")
		b.WriteString(quoteIfNeeded(a.Value.Resolve().String()))
		return true
	}
	for _, a := range h.attrs {
		write(a)
	}
	r.Attrs(write)
	b.WriteString("\n")
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := h.w.Write(b.Bytes())
	return err
}

func (h *lineHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &c
}

func (h *lineHandler) WithGroup(string) slog.Handler { return h }
