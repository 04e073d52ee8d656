package devhost

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/batonfn/baton/internal/engine/protocol"
)

// HostVersion is the Functions host version the devhost reports in X-Azure-Functions-HostVersion
// and User-Agent.
const HostVersion = "4.1041.100.0"

// maxReplyBytes bounds a handler reply the devhost reads.
const maxReplyBytes = 64 << 20

// Errors an invocation can fail with. Match with errors.Is.
var (
	// ErrNotReady: the instance had no running handler to invoke.
	ErrNotReady = errors.New("instance not ready")
	// ErrTimeout: the invocation outlived functionTimeout; the handler was restarted.
	ErrTimeout = errors.New("function timeout")
	// ErrReply: the handler answered, but not with a success the host accepts.
	ErrReply = errors.New("invalid invocation reply")
)

// Reply is a handler's successful invocation reply.
type Reply struct {
	Outputs     map[string]json.RawMessage
	Logs        []string
	ReturnValue json.RawMessage
}

// Invocation is one invocation in flight.
type Invocation struct {
	ID       string    `json:"id"`
	Function string    `json:"function"`
	Instance string    `json:"instance"`
	PID      int       `json:"pid"`
	Started  time.Time `json:"started"`
	// Detail names what is being processed (e.g. the queue message ID).
	Detail string `json:"detail,omitempty"`
}

// InvokeRecord describes a finished invocation, for Options.OnInvoke.
type InvokeRecord struct {
	Invocation
	// Header and Request are what the devhost sent.
	Header  http.Header
	Request []byte
	End     time.Time
	// Status, ContentType and Response are the handler's answer (zero when none came).
	Status      int
	ContentType string
	Response    []byte
	// Err is nil when the host would count the invocation a success.
	Err error
}

// invoke POSTs one invocation to the instance's handler and judges the reply as the host does.
// detail is recorded with the in-flight invocation.
func (in *Instance) invoke(ctx context.Context, function string, body []byte, detail string) (*Reply, error) {
	in.mu.Lock()
	if (in.state != StateRunning && in.state != StatePaused) || in.cmd == nil {
		st := in.state
		in.mu.Unlock()
		return nil, fmt.Errorf("%s is %s: %w", in.name, st, ErrNotReady)
	}
	pid, port := in.pid, in.port
	inv := &Invocation{ID: uuid.NewString(), Function: function, Instance: in.name, PID: pid, Started: time.Now(), Detail: detail}
	in.inflight[inv.ID] = inv
	in.mu.Unlock()
	defer func() {
		in.mu.Lock()
		delete(in.inflight, inv.ID)
		in.mu.Unlock()
	}()

	h := in.h
	callCtx, cancel := ctx, context.CancelFunc(func() {})
	if t := h.app.Host.FunctionTimeout; t > 0 {
		callCtx, cancel = context.WithTimeout(ctx, t)
	}
	defer cancel()
	req, err := http.NewRequestWithContext(callCtx, http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/%s", port, function), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set(protocol.HeaderInvocationID, inv.ID)
	req.Header.Set(protocol.HeaderHostVersion, HostVersion)
	req.Header.Set("User-Agent", "Azure-Functions-Host/"+HostVersion)

	rec := InvokeRecord{Invocation: *inv, Header: req.Header.Clone(), Request: body}
	reply, err := func() (*Reply, error) {
		resp, err := h.client.Do(req)
		if err != nil {
			if callCtx.Err() != nil && ctx.Err() == nil {
				in.killForTimeout(pid, inv.ID)
				return nil, fmt.Errorf("%s %s on %s: no reply within functionTimeout %s: %w", function, inv.ID, in.name, h.app.Host.FunctionTimeout, ErrTimeout)
			}
			return nil, fmt.Errorf("%s %s on %s (pid %d): %w", function, inv.ID, in.name, pid, err)
		}
		defer resp.Body.Close()
		rec.Status, rec.ContentType = resp.StatusCode, resp.Header.Get("Content-Type")
		rec.Response, err = io.ReadAll(io.LimitReader(resp.Body, maxReplyBytes))
		if err != nil {
			return nil, fmt.Errorf("%s %s on %s: read reply: %w", function, inv.ID, in.name, err)
		}
		r, err := Judge(rec.Status, rec.ContentType, rec.Response)
		if err != nil {
			return nil, fmt.Errorf("%s %s on %s: %w", function, inv.ID, in.name, err)
		}
		return r, nil
	}()
	rec.End, rec.Err = time.Now(), err
	if h.opts.OnInvoke != nil {
		h.opts.OnInvoke(rec)
	}
	if err != nil {
		return nil, err
	}
	for _, l := range reply.Logs {
		h.log.Info("function log: "+l, "instance", in.name, "function", function)
	}
	return reply, nil
}

// Judge applies the host's rules to a handler reply (see docs/design.md, Host protocol): a
// success needs a 2xx status, a JSON Content-Type and a body that is a JSON object
// (Outputs, Logs, ReturnValue; names case-insensitive). Anything else fails the invocation; the
// error says why and wraps ErrReply.
func Judge(status int, contentType string, body []byte) (*Reply, error) {
	snippet := func() string {
		s := strings.TrimSpace(string(body))
		if len(s) > 300 {
			s = s[:300] + "…"
		}
		return s
	}
	if status < 200 || status > 299 {
		return nil, fmt.Errorf("%w: status %d (the host fails the invocation on any non-2xx): %s", ErrReply, status, snippet())
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil || (mt != "application/json" && mt != "text/json") {
		return nil, fmt.Errorf("%w: Content-Type %q is not JSON (the host reads replies with a JSON formatter only)", ErrReply, contentType)
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("%w: status %d with an empty body (the real host would read null and likely wait until functionTimeout)", ErrReply, status)
	}
	if trimmed[0] != '{' {
		return nil, fmt.Errorf("%w: body is not a JSON object: %s", ErrReply, snippet())
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &raw); err != nil {
		return nil, fmt.Errorf("%w: body does not parse as JSON: %v", ErrReply, err)
	}
	r := &Reply{Outputs: map[string]json.RawMessage{}}
	for k, v := range raw {
		switch strings.ToLower(k) {
		case "outputs":
			if isNull(v) {
				continue
			}
			if err := json.Unmarshal(v, &r.Outputs); err != nil {
				return nil, fmt.Errorf("%w: Outputs is not an object: %v", ErrReply, err)
			}
		case "logs":
			if isNull(v) {
				continue
			}
			if err := json.Unmarshal(v, &r.Logs); err != nil {
				return nil, fmt.Errorf("%w: Logs is not an array of strings: %v", ErrReply, err)
			}
		case "returnvalue":
			r.ReturnValue = v
		}
	}
	return r, nil
}

func isNull(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	return len(v) == 0 || bytes.Equal(v, []byte("null"))
}

// Output returns the output named name, matched case-insensitively.
func (r *Reply) Output(name string) (json.RawMessage, bool) {
	for k, v := range r.Outputs {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return nil, false
}
