package protocol

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// This file builds requests the way the Functions host does (docs/design.md, Host protocol),
// for the local host and for tests. Every helper mirrors one rule of the host's converter.

// EncodeStringData is the host's form of a string trigger value: JSON-encoded twice.
func EncodeStringData(s string) json.RawMessage {
	once, _ := json.Marshal(s)
	twice, _ := json.Marshal(string(once))
	return twice
}

// QuoteMeta is the host's form of a string metadata value: "\"abc\"".
func QuoteMeta(s string) json.RawMessage { return EncodeStringData(s) }

// IntMeta is the host's form of an integer metadata value: "1".
func IntMeta(n int64) json.RawMessage {
	b, _ := json.Marshal(strconv.FormatInt(n, 10))
	return b
}

// DateTimeMeta is the host's form of a DateTime (UTC, no offset, no fraction).
func DateTimeMeta(t time.Time) json.RawMessage {
	b, _ := json.Marshal(t.UTC().Format("2006-01-02T15:04:05"))
	return b
}

// DateTimeOffsetMeta is the host's form of a DateTimeOffset (seconds, +00:00).
func DateTimeOffsetMeta(t time.Time) json.RawMessage {
	b, _ := json.Marshal(t.UTC().Format("2006-01-02T15:04:05-07:00"))
	return b
}

// SysMeta is Metadata.sys: UtcNow with 7 fractional digits and Z.
func SysMeta(function string, now time.Time, randGUID string) json.RawMessage {
	b, _ := json.Marshal(Sys{
		MethodName: function,
		UtcNow:     now.UTC().Format("2006-01-02T15:04:05.0000000Z"),
		RandGuid:   randGUID,
	})
	return b
}

// LeakBodyProperties applies the host's ApplyBindingData rule: when a message body is a JSON
// object, each top-level non-array property is added to the metadata, overwriting existing
// keys. Strings are quoted, objects stay objects, other scalars become their JSON text as a
// string.
func LeakBodyProperties(md map[string]json.RawMessage, body string) {
	trimmed := strings.TrimSpace(body)
	if !strings.HasPrefix(trimmed, "{") {
		return
	}
	var props map[string]json.RawMessage
	if err := json.Unmarshal([]byte(trimmed), &props); err != nil {
		return
	}
	for k, v := range props {
		v = bytes.TrimSpace(v)
		if len(v) == 0 {
			continue
		}
		switch v[0] {
		case '[':
			continue
		case 'n':
			continue // null values are skipped like all null binding data
		case '{':
			md[k] = v
		case '"':
			var s string
			_ = json.Unmarshal(v, &s)
			md[k] = QuoteMeta(s)
		default:
			b, _ := json.Marshal(string(v))
			md[k] = b
		}
	}
}
