package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Headers the host adds to every invocation request.
const (
	HeaderInvocationID = "X-Azure-Functions-InvocationId"
	HeaderHostVersion  = "X-Azure-Functions-HostVersion"
)

// InvokeRequest is the body the host POSTs to /<FunctionName>: one Data entry per input binding
// (keyed by binding name) and the trigger's binding data as Metadata.
type InvokeRequest struct {
	Data     map[string]json.RawMessage `json:"Data"`
	Metadata map[string]json.RawMessage `json:"Metadata"`
}

// InvokeResponse is what the handler replies. The host reads Outputs (keyed by output binding
// name), Logs (each logged at Information) and ReturnValue (for a `$return` binding).
type InvokeResponse struct {
	Outputs     map[string]any `json:"Outputs"`
	Logs        []string       `json:"Logs"`
	ReturnValue any            `json:"ReturnValue"`
}

// Sys is Metadata.sys: the function name, the host's clock and a random GUID.
type Sys struct {
	MethodName string `json:"MethodName"`
	UtcNow     string `json:"UtcNow"`
	RandGuid   string `json:"RandGuid"`
}

// ErrMissing reports that a required Data or Metadata entry is absent.
var ErrMissing = errors.New("missing")

// MaxRequestBytes bounds an invocation request body. Queue messages are at most 64 KiB and
// Service Bus messages 256 KiB (Standard) or 100 MiB (Premium); Baton's own messages stay far
// below 64 KiB, and HTTP bodies are bounded separately by the API.
const MaxRequestBytes = 4 << 20

// DecodeRequest strictly decodes an invocation request body.
func DecodeRequest(body []byte) (*InvokeRequest, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, errors.New("empty invocation request body")
	}
	var req InvokeRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("invocation request is not valid JSON: %w", err)
	}
	if req.Data == nil {
		return nil, fmt.Errorf("invocation request has no Data: %w", ErrMissing)
	}
	if req.Metadata == nil {
		req.Metadata = map[string]json.RawMessage{}
	}
	return &req, nil
}

// Sys decodes Metadata.sys. A request without it yields a zero Sys.
func (r *InvokeRequest) Sys() Sys {
	var s Sys
	if raw, ok := r.Metadata["sys"]; ok {
		_ = json.Unmarshal(raw, &s)
	}
	return s
}

// DecodeMessage returns the raw bytes of a queue or Service Bus message body from its Data
// entry. The host sends a string body JSON-encoded twice ("\"{\\\"a\\\":1}\""); some producers
// encode it once ("{\"a\":1}"); a JSON object may also arrive as is. All three yield the body.
func DecodeMessage(raw json.RawMessage) ([]byte, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, fmt.Errorf("message body: %w", ErrMissing)
	}
	switch raw[0] {
	case '{', '[':
		return raw, nil
	case '"':
	default:
		return nil, fmt.Errorf("message body is a JSON %s, want a string", jsonKind(raw[0]))
	}
	var once string
	if err := json.Unmarshal(raw, &once); err != nil {
		return nil, fmt.Errorf("message body is not a valid JSON string: %w", err)
	}
	trimmed := strings.TrimSpace(once)
	if strings.HasPrefix(trimmed, `"`) {
		var twice string
		if err := json.Unmarshal([]byte(trimmed), &twice); err == nil {
			return []byte(twice), nil
		}
	}
	return []byte(once), nil
}

func jsonKind(b byte) string {
	switch {
	case b == 't' || b == 'f':
		return "boolean"
	case b == 'n':
		return "null"
	default:
		return "number"
	}
}

// MetaString reads a string metadata value. The host quotes strings ("\"abc\""); a plain JSON
// string is accepted too. Absent keys give ErrMissing.
func MetaString(md map[string]json.RawMessage, key string) (string, error) {
	raw, ok := md[key]
	if !ok || len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return "", fmt.Errorf("metadata %s: %w", key, ErrMissing)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("metadata %s is not a string: %w", key, err)
	}
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		var inner string
		if err := json.Unmarshal([]byte(s), &inner); err == nil {
			return inner, nil
		}
	}
	return s, nil
}

// MetaInt reads an integer metadata value. The host sends integers as strings ("1"); a JSON
// number or a quoted string ("\"1\"") is accepted too.
func MetaInt(md map[string]json.RawMessage, key string) (int64, error) {
	raw, ok := md[key]
	if !ok {
		return 0, fmt.Errorf("metadata %s: %w", key, ErrMissing)
	}
	raw = bytes.TrimSpace(raw)
	var text string
	if len(raw) > 0 && raw[0] == '"' {
		s, err := MetaString(md, key)
		if err != nil {
			return 0, err
		}
		text = s
	} else {
		text = string(raw)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(text), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("metadata %s = %q is not an integer", key, text)
	}
	return n, nil
}

// MetaTime reads a time metadata value in any of the host's forms: DateTimeOffset
// ("2025-01-01T00:00:00+00:00"), DateTime without offset (read as UTC), or RFC 3339 with Z and
// up to 7 fractional digits.
func MetaTime(md map[string]json.RawMessage, key string) (time.Time, error) {
	s, err := MetaString(md, key)
	if err != nil {
		return time.Time{}, err
	}
	t, err := ParseTime(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("metadata %s: %w", key, err)
	}
	return t, nil
}

// ParseTime parses the time formats the host emits, returning UTC. A value without an offset
// is taken as UTC, which is what the host's DateTime values mean.
func ParseTime(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.9999999", "2006-01-02 15:04:05Z07:00"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("time %q is not RFC 3339 or the host's DateTime form", s)
}

// HostMetadataKeys lists every metadata key the host sets for the trigger types Baton uses
// (timer, Service Bus, Storage queue and HTTP). A message body must not have a top-level property
// with any of these names (compared case-insensitively): it would leak into Metadata and
// overwrite the real value.
var HostMetadataKeys = []string{
	// all triggers
	"sys", "RetryContext",
	// Storage queue
	"DequeueCount", "Id", "PopReceipt", "InsertionTime", "ExpirationTime", "NextVisibleTime", "QueueTrigger",
	// Service Bus
	"DeliveryCount", "DeadLetterSource", "LockToken", "ExpiresAtUtc", "ExpiresAt", "EnqueuedTimeUtc",
	"EnqueuedTime", "MessageId", "ContentType", "ReplyTo", "To", "CorrelationId", "Subject", "Label",
	"SequenceNumber", "ApplicationProperties", "UserProperties", "SessionId", "ReplyToSessionId",
	"PartitionKey", "TransactionPartitionKey", "MessageReceiver", "MessageSession", "MessageActions",
	"SessionActions", "ReceiveActions", "Client",
	// HTTP
	"Query", "Headers",
}
