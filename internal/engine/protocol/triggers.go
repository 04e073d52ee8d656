package protocol

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// TimerInfo is Data.<name> of a timerTrigger invocation.
type TimerInfo struct {
	Schedule       TimerSchedule   `json:"Schedule"`
	ScheduleStatus *ScheduleStatus `json:"ScheduleStatus"`
	IsPastDue      bool            `json:"IsPastDue"`
}

// TimerSchedule is TimerInfo.Schedule.
type TimerSchedule struct {
	AdjustForDST bool `json:"AdjustForDST"`
}

// ScheduleStatus is the timer monitor's record; nil when useMonitor is off or no status exists.
type ScheduleStatus struct {
	Last        HostTime `json:"Last"`
	Next        HostTime `json:"Next"`
	LastUpdated HostTime `json:"LastUpdated"`
}

// HostTime is a time in any of the forms the host writes (see ParseTime). Its zero value
// marshals as the zero time.
type HostTime struct{ time.Time }

// UnmarshalJSON accepts RFC 3339 (Z or +00:00, any fraction) and offset-less DateTime.
func (t *HostTime) UnmarshalJSON(b []byte) error {
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		t.Time = time.Time{}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("time is not a JSON string: %w", err)
	}
	v, err := ParseTime(s)
	if err != nil {
		return err
	}
	t.Time = v
	return nil
}

// MarshalJSON writes RFC 3339 with the offset as +00:00, the form the host's docs show.
func (t HostTime) MarshalJSON() ([]byte, error) {
	return json.Marshal(t.UTC().Format("2006-01-02T15:04:05.9999999-07:00"))
}

// DecodeTimer decodes a timer Data entry strictly enough to catch a wrong binding: it must be a
// JSON object.
func DecodeTimer(raw json.RawMessage) (TimerInfo, error) {
	var ti TimerInfo
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return ti, errors.New("timer data is not a JSON object")
	}
	if err := json.Unmarshal(raw, &ti); err != nil {
		return ti, fmt.Errorf("timer data: %w", err)
	}
	return ti, nil
}

// QueueMetadata is the delivery metadata of a Storage queue trigger.
type QueueMetadata struct {
	ID              string
	DequeueCount    int64
	PopReceipt      string
	InsertionTime   time.Time
	NextVisibleTime time.Time
}

// DecodeQueueMetadata reads the queue trigger's metadata. DequeueCount and Id are required;
// the times are best-effort.
func DecodeQueueMetadata(md map[string]json.RawMessage) (QueueMetadata, error) {
	var m QueueMetadata
	var err error
	if m.DequeueCount, err = MetaInt(md, "DequeueCount"); err != nil {
		return m, err
	}
	if m.ID, err = MetaString(md, "Id"); err != nil {
		return m, err
	}
	m.PopReceipt, _ = MetaString(md, "PopReceipt")
	m.InsertionTime, _ = MetaTime(md, "InsertionTime")
	m.NextVisibleTime, _ = MetaTime(md, "NextVisibleTime")
	return m, nil
}

// ServiceBusMetadata is the delivery metadata of a Service Bus trigger (single dispatch).
type ServiceBusMetadata struct {
	MessageID             string
	DeliveryCount         int64
	SequenceNumber        int64
	EnqueuedTime          time.Time
	ApplicationProperties map[string]any
}

// DecodeServiceBusMetadata reads the Service Bus trigger's metadata. DeliveryCount and
// MessageId are required.
func DecodeServiceBusMetadata(md map[string]json.RawMessage) (ServiceBusMetadata, error) {
	var m ServiceBusMetadata
	var err error
	if m.DeliveryCount, err = MetaInt(md, "DeliveryCount"); err != nil {
		return m, err
	}
	if m.MessageID, err = MetaString(md, "MessageId"); err != nil {
		return m, err
	}
	m.SequenceNumber, _ = MetaInt(md, "SequenceNumber")
	if t, err := MetaTime(md, "EnqueuedTimeUtc"); err == nil {
		m.EnqueuedTime = t
	}
	if raw, ok := md["ApplicationProperties"]; ok {
		_ = json.Unmarshal(raw, &m.ApplicationProperties)
	}
	return m, nil
}

// HTTPRequest is Data.<name> of an httpTrigger invocation in the default (non-forwarding) mode.
type HTTPRequest struct {
	URL        string              `json:"Url"`
	Method     string              `json:"Method"`
	Query      map[string]string   `json:"Query"`
	Headers    map[string][]string `json:"Headers"`
	Params     map[string]*string  `json:"Params"`
	Identities json.RawMessage     `json:"Identities,omitempty"`
	// Body is present only when the request had Content-Length > 0: a string, or base64 for
	// application/octet-stream and multipart bodies. Use BodyBytes.
	Body *string `json:"Body,omitempty"`
}

// DecodeHTTPRequest decodes an httpTrigger Data entry. Query also arrives as the string "{}"
// in some documentation samples; that form is accepted.
func DecodeHTTPRequest(raw json.RawMessage) (*HTTPRequest, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, errors.New("http request data is not a JSON object")
	}
	var wire struct {
		HTTPRequest
		Query json.RawMessage `json:"Query"`
	}
	if err := json.Unmarshal(raw, &wire); err != nil {
		return nil, fmt.Errorf("http request data: %w", err)
	}
	req := wire.HTTPRequest
	req.Query = map[string]string{}
	if q := bytes.TrimSpace(wire.Query); len(q) > 0 && !bytes.Equal(q, []byte("null")) {
		if q[0] == '"' {
			var s string
			if err := json.Unmarshal(q, &s); err != nil {
				return nil, fmt.Errorf("http request Query: %w", err)
			}
			q = []byte(s)
		}
		if len(bytes.TrimSpace(q)) > 0 {
			if err := json.Unmarshal(q, &req.Query); err != nil {
				return nil, fmt.Errorf("http request Query: %w", err)
			}
		}
	}
	if req.Method == "" {
		return nil, fmt.Errorf("http request Method: %w", ErrMissing)
	}
	req.Method = strings.ToUpper(req.Method)
	return &req, nil
}

// Header returns the first value of a request header, matched case-insensitively.
func (r *HTTPRequest) Header(name string) string {
	for k, v := range r.Headers {
		if strings.EqualFold(k, name) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// Param returns a route parameter, or "" when absent or null.
func (r *HTTPRequest) Param(name string) string {
	for k, v := range r.Params {
		if strings.EqualFold(k, name) && v != nil {
			return *v
		}
	}
	return ""
}

// BodyBytes returns the request body. Binary content types arrive base64-encoded.
func (r *HTTPRequest) BodyBytes() ([]byte, error) {
	if r.Body == nil {
		return nil, nil
	}
	ct := strings.ToLower(r.Header("Content-Type"))
	if strings.HasPrefix(ct, "application/octet-stream") || strings.HasPrefix(ct, "multipart/") {
		b, err := base64.StdEncoding.DecodeString(*r.Body)
		if err != nil {
			return nil, fmt.Errorf("binary http body is not base64: %w", err)
		}
		return b, nil
	}
	return []byte(*r.Body), nil
}

// HTTPResponse is the value of an `http` output binding (Outputs.res). Body is sent as a string
// so the host passes it through untouched; Headers carry the content type.
type HTTPResponse struct {
	StatusCode int               `json:"statusCode"`
	Headers    map[string]string `json:"headers,omitempty"`
	Body       string            `json:"body"`
}
