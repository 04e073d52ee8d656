package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/batonfn/baton/protocol"
)

// Invocation is one call from the host to a function.
type Invocation struct {
	// ID is the host's invocation ID (X-Azure-Functions-InvocationId), or a generated one.
	ID string
	// Function is the function (folder) name.
	Function string
	Request  *protocol.InvokeRequest
	// Logger carries the function name and invocation ID on every line.
	Logger *slog.Logger
}

// TriggerFunc runs a non-HTTP function (timer, Service Bus, queue). A nil error completes the
// invocation; an error fails it, so the host retries or dead-letters the message (a timer is
// not retried). Wrap input errors with badInput so they are answered 400.
type TriggerFunc func(ctx context.Context, inv *Invocation) error

// HTTPFunc runs an HTTP-triggered function. Its reply travels in the `res` output binding.
type HTTPFunc func(ctx context.Context, inv *Invocation, req *protocol.HTTPRequest) HTTPReply

// HTTPReply is an HTTP function's answer: a status and a value encoded as JSON (or raw bytes
// with a content type, for the dashboard page).
type HTTPReply struct {
	Status      int
	Headers     map[string]string
	JSON        any
	Raw         []byte
	ContentType string
}

// Server routes the host's invocations: GET / for readiness, POST /<Function> per function.
type Server struct {
	logger   *slog.Logger
	timeout  time.Duration
	triggers map[string]TriggerFunc
	http     map[string]httpRoute
	newID    func() string
}

type httpRoute struct {
	binding string // name of the httpTrigger binding in Data
	fn      HTTPFunc
}

// NewServer returns a server with no functions; register them with Trigger and HTTP. timeout
// is the per-invocation deadline (0: none).
func NewServer(logger *slog.Logger, timeout time.Duration, newID func() string) *Server {
	return &Server{logger: logger, timeout: timeout, triggers: map[string]TriggerFunc{}, http: map[string]httpRoute{}, newID: newID}
}

// Trigger registers a non-HTTP function.
func (s *Server) Trigger(name string, fn TriggerFunc) { s.triggers[name] = fn }

// HTTP registers an HTTP function whose trigger binding is named binding.
func (s *Server) HTTP(name, binding string, fn HTTPFunc) {
	s.http[name] = httpRoute{binding: binding, fn: fn}
}

// errorBody is every error reply: {"error": {"code", "message"}}.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// inputError marks an error caused by the request itself (HTTP 400, never retried usefully).
type inputError struct{ err error }

func (e *inputError) Error() string { return e.err.Error() }
func (e *inputError) Unwrap() error { return e.err }

// badInput marks err as the caller's fault.
func badInput(err error) error { return &inputError{err: err} }

// errNotImplemented answers 501 for functions whose capability is not built yet.
var errNotImplemented = errors.New("not implemented")

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/" {
		// The host's readiness and health probe: any answer means ready.
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
		return
	}
	name := strings.Trim(r.URL.Path, "/")
	trig, isTrigger := s.triggers[name]
	route, isHTTP := s.http[name]
	if !isTrigger && !isHTTP {
		writeError(w, http.StatusNotFound, "function_not_found", fmt.Sprintf("no function named %q", name))
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "the host invokes functions with POST")
		return
	}

	id := r.Header.Get(protocol.HeaderInvocationID)
	if id == "" {
		id = s.newID()
	}
	logger := s.logger.With("function", name, "invocation", id)
	inv := &Invocation{ID: id, Function: name, Logger: logger}

	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, protocol.MaxRequestBytes))
	if err != nil {
		logger.Warn("invocation request unreadable", "err", err)
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("read invocation request: %v", err))
		return
	}
	inv.Request, err = protocol.DecodeRequest(body)
	if err != nil {
		logger.Warn("invocation request malformed", "err", err, "bytes", len(body))
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}

	ctx := r.Context()
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	defer func() {
		if p := recover(); p != nil {
			logger.Error("function panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			writeError(w, http.StatusInternalServerError, "panic", "the function panicked; see the handler log")
		}
	}()

	if isHTTP {
		s.serveHTTPFunction(ctx, w, inv, route)
		return
	}
	start := time.Now()
	err = trig(ctx, inv)
	if err != nil {
		status, code := classify(err)
		logger.Error("invocation failed", "err", err, "status", status, "ms", time.Since(start).Milliseconds())
		writeError(w, status, code, err.Error())
		return
	}
	logger.Debug("invocation succeeded", "ms", time.Since(start).Milliseconds())
	writeJSON(w, http.StatusOK, protocol.InvokeResponse{Outputs: map[string]any{}, Logs: []string{}})
}

func (s *Server) serveHTTPFunction(ctx context.Context, w http.ResponseWriter, inv *Invocation, route httpRoute) {
	raw, ok := inv.Request.Data[route.binding]
	if !ok {
		err := fmt.Errorf("invocation request has no Data.%s (the httpTrigger binding)", route.binding)
		inv.Logger.Warn("invocation request malformed", "err", err)
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	req, err := protocol.DecodeHTTPRequest(raw)
	if err != nil {
		inv.Logger.Warn("invocation request malformed", "err", err)
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	reply := route.fn(ctx, inv, req)
	res, err := reply.output()
	if err != nil {
		inv.Logger.Error("encode http reply", "err", err)
		res, _ = ErrorReply(http.StatusInternalServerError, "internal", "could not encode the reply").output()
	}
	inv.Logger.Debug("http function answered", "method", req.Method, "status", res.StatusCode)
	writeJSON(w, http.StatusOK, protocol.InvokeResponse{Outputs: map[string]any{"res": res}, Logs: []string{}})
}

// output turns a reply into the `res` binding value.
func (r HTTPReply) output() (protocol.HTTPResponse, error) {
	res := protocol.HTTPResponse{StatusCode: r.Status, Headers: map[string]string{}}
	if res.StatusCode == 0 {
		res.StatusCode = http.StatusOK
	}
	for k, v := range r.Headers {
		res.Headers[k] = v
	}
	switch {
	case r.Raw != nil:
		res.Body = string(r.Raw)
		res.Headers["Content-Type"] = r.ContentType
	case r.JSON != nil:
		b, err := json.Marshal(r.JSON)
		if err != nil {
			return res, err
		}
		res.Body = string(b)
		res.Headers["Content-Type"] = "application/json"
	}
	return res, nil
}

// JSONReply is a JSON HTTP reply.
func JSONReply(status int, v any) HTTPReply { return HTTPReply{Status: status, JSON: v} }

// ErrorReply is the JSON error reply {"error": {"code", "message"}}.
func ErrorReply(status int, code, message string) HTTPReply {
	return HTTPReply{Status: status, JSON: errorBody{Error: errorDetail{Code: code, Message: message}}}
}

// classify maps a function error to the status that fails the invocation.
func classify(err error) (int, string) {
	var in *inputError
	switch {
	case errors.As(err, &in):
		return http.StatusBadRequest, "bad_request"
	case errors.Is(err, errNotImplemented):
		return http.StatusNotImplemented, "not_implemented"
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, "timeout"
	default:
		return http.StatusInternalServerError, "failed"
	}
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, errorBody{Error: errorDetail{Code: code, Message: message}})
}

// writeJSON always sets Content-Type: application/json; the host cannot read a reply without it.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"could not encode the reply"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
