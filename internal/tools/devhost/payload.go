package devhost

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/batonfn/baton/internal/engine/protocol"
)

// This file builds invocation requests exactly as the Functions host does (docs/design.md, Host
// protocol), with the protocol package's encoders; the e2e conformance test compares the results with the
// golden payloads in internal/app/testdata.

// request is an invocation body before encoding.
type request struct {
	Data     map[string]any             `json:"Data"`
	Metadata map[string]json.RawMessage `json:"Metadata"`
}

func (r request) encode() []byte {
	b, _ := json.Marshal(r)
	return b
}

// TimerPayload is what a timer fire needs to describe itself.
type TimerPayload struct {
	// Status is nil when the host has none (useMonitor false).
	Status    *protocol.ScheduleStatus
	IsPastDue bool
	Now       time.Time
}

// timerRequest builds a timerTrigger invocation: Data.<binding> is the TimerInfo object;
// Metadata has only sys (the TimerTrigger binding-data key ends in "trigger" and is dropped).
func timerRequest(function, binding string, p TimerPayload) []byte {
	ti := protocol.TimerInfo{Schedule: protocol.TimerSchedule{AdjustForDST: true}, ScheduleStatus: p.Status, IsPastDue: p.IsPastDue}
	return request{
		Data:     map[string]any{binding: ti},
		Metadata: map[string]json.RawMessage{"sys": protocol.SysMeta(function, p.Now, uuid.NewString())},
	}.encode()
}

// QueueMessage is a dequeued Storage-queue message, after base64 decoding.
type QueueMessage struct {
	ID, PopReceipt  string
	DequeueCount    int64
	InsertionTime   time.Time
	ExpirationTime  time.Time
	NextVisibleTime time.Time
	// Body is the decoded text the function receives.
	Body string
}

// queueRequest builds a queueTrigger invocation (§1.5): the body double-encoded as
// Data.<binding>; DequeueCount as a string, Id and PopReceipt quoted, times with +00:00 and no
// fraction; then the body's top-level JSON properties leak in (overwriting), then sys.
func queueRequest(function, binding string, m QueueMessage, now time.Time) []byte {
	md := map[string]json.RawMessage{
		"DequeueCount":    protocol.IntMeta(m.DequeueCount),
		"Id":              protocol.QuoteMeta(m.ID),
		"PopReceipt":      protocol.QuoteMeta(m.PopReceipt),
		"InsertionTime":   protocol.DateTimeOffsetMeta(m.InsertionTime),
		"ExpirationTime":  protocol.DateTimeOffsetMeta(m.ExpirationTime),
		"NextVisibleTime": protocol.DateTimeOffsetMeta(m.NextVisibleTime),
	}
	protocol.LeakBodyProperties(md, m.Body)
	md["sys"] = protocol.SysMeta(function, now, uuid.NewString())
	return request{Data: map[string]any{binding: protocol.EncodeStringData(m.Body)}, Metadata: md}.encode()
}

// httpRequest builds an httpTrigger invocation (§1.6). params holds every route parameter of
// the template (nil for an absent optional one).
func httpRequest(function, binding string, r *http.Request, params map[string]*string, now time.Time) ([]byte, error) {
	query := map[string]string{}
	for k, vs := range r.URL.Query() {
		query[k] = strings.Join(vs, ",") // repeated keys are joined with commas
	}
	headers := map[string][]string{}
	single := map[string]string{}
	for k, vs := range r.Header {
		headers[k] = append([]string(nil), vs...)
		single[k] = strings.Join(vs, ",")
	}
	if r.Host != "" {
		headers["Host"] = []string{r.Host}
		single["Host"] = r.Host
	}
	req := protocol.HTTPRequest{
		URL:        "http://" + r.Host + r.URL.RequestURI(),
		Method:     r.Method,
		Query:      query,
		Headers:    headers,
		Params:     map[string]*string{},
		Identities: json.RawMessage("[]"),
	}
	for k, v := range params {
		req.Params[k] = v
	}
	if r.ContentLength > 0 {
		b, err := io.ReadAll(io.LimitReader(r.Body, protocol.MaxRequestBytes))
		if err != nil {
			return nil, err
		}
		body := string(b)
		if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "application/octet-stream" || strings.HasPrefix(mt, "multipart/") {
			body = base64.StdEncoding.EncodeToString(b)
		}
		req.Body = &body
	}
	qj, _ := json.Marshal(query)
	hj, _ := json.Marshal(single)
	md := map[string]json.RawMessage{"Query": qj, "Headers": hj}
	names := make([]string, 0, len(params))
	for k := range params {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if v := params[k]; v != nil { // null binding data is skipped
			md[k] = protocol.QuoteMeta(*v)
		}
	}
	md["sys"] = protocol.SysMeta(function, now, uuid.NewString())
	return request{Data: map[string]any{binding: req}, Metadata: md}.encode(), nil
}
