package app

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

	"github.com/batonfn/baton/internal/engine/api"
	"github.com/batonfn/baton/internal/engine/protocol"
)

// invocation is one call from the host to a function.
type invocation struct {
	// ID is the host's invocation ID (X-Azure-Functions-InvocationId), or a generated one.
	ID string
	// Function is the function (folder) name.
	Function string
	Request  *protocol.InvokeRequest
	// Logger carries the function name and invocation ID on every line.
	Logger *slog.Logger
}

// triggerFunc runs a non-HTTP function (timer, Service Bus, queue). A nil error completes the
// invocation; an error fails it, so the host retries or dead-letters the message (a timer is
// not retried). Wrap input errors with badInput so they are answered 400.
type triggerFunc func(ctx context.Context, inv *invocation) error

// httpFunc runs an HTTP-triggered function. Its reply travels in the `res` output binding.
type httpFunc func(ctx context.Context, inv *invocation, req *protocol.HTTPRequest) api.Reply

// server routes the host's invocations: GET / for readiness, POST /<Function> per function.
type server struct {
	logger   *slog.Logger
	timeout  time.Duration
	triggers map[string]triggerFunc
	http     map[string]httpRoute
	newID    func() string
}

type httpRoute struct {
	binding string // name of the httpTrigger binding in Data
	fn      httpFunc
}

// newServer returns a server with no functions; register them with Trigger and HTTP. timeout
// is the per-invocation deadline (0: none).
func newServer(logger *slog.Logger, timeout time.Duration, newID func() string) *server {
	return &server{logger: logger, timeout: timeout, triggers: map[string]triggerFunc{}, http: map[string]httpRoute{}, newID: newID}
}

// addTrigger registers a non-HTTP function.
func (s *server) addTrigger(name string, fn triggerFunc) { s.triggers[name] = fn }

// addHTTP registers an HTTP function whose trigger binding is named binding.
func (s *server) addHTTP(name, binding string, fn httpFunc) {
	s.http[name] = httpRoute{binding: binding, fn: fn}
}

// inputError marks an error caused by the request itself (HTTP 400, never retried usefully).
type inputError struct{ err error }

func (e *inputError) Error() string { return e.err.Error() }
func (e *inputError) Unwrap() error { return e.err }

// badInput marks err as the caller's fault.
func badInput(err error) error { return &inputError{err: err} }

// ServeHTTP implements http.Handler.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
	inv := &invocation{ID: id, Function: name, Logger: logger}

	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, protocol.MaxRequestBytes))
	var tooLarge *http.MaxBytesError
	if isHTTP && errors.As(err, &tooLarge) {
		// The host wraps the caller's body in the invocation request: the caller sent too much,
		// and hears so as a 413 of its own rather than the 500 a failed invocation becomes.
		logger.Warn("http request too large", "limit", tooLarge.Limit)
		s.reply(w, inv, errorReply(http.StatusRequestEntityTooLarge, api.CodeTooLarge,
			fmt.Sprintf("the request exceeds %d bytes", tooLarge.Limit)))
		return
	}
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

func (s *server) serveHTTPFunction(ctx context.Context, w http.ResponseWriter, inv *invocation, route httpRoute) {
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
	res := s.reply(w, inv, route.fn(ctx, inv, req))
	inv.Logger.Debug("http function answered", "method", req.Method, "status", res.StatusCode)
}

// reply answers an HTTP function's invocation with r as its `res` output.
func (s *server) reply(w http.ResponseWriter, inv *invocation, r api.Reply) protocol.HTTPResponse {
	res, err := output(r)
	if err != nil {
		inv.Logger.Error("encode http reply", "err", err)
		res, _ = output(errorReply(http.StatusInternalServerError, "internal", "could not encode the reply"))
	}
	writeJSON(w, http.StatusOK, protocol.InvokeResponse{Outputs: map[string]any{"res": res}, Logs: []string{}})
	return res
}

// defaultHeaders go on every HTTP reply unless the function set its own: replies carry run
// state that a shared cache must not keep, and a JSON body must never be sniffed as HTML.
var defaultHeaders = map[string]string{
	"Cache-Control":          "no-store",
	"X-Content-Type-Options": "nosniff",
}

// output turns a reply into the `res` binding value.
func output(r api.Reply) (protocol.HTTPResponse, error) {
	res := protocol.HTTPResponse{StatusCode: r.Status, Headers: map[string]string{}}
	if res.StatusCode == 0 {
		res.StatusCode = http.StatusOK
	}
	for k, v := range r.Headers {
		res.Headers[k] = v
	}
	for k, v := range defaultHeaders {
		if !hasHeader(r.Headers, k) {
			res.Headers[k] = v
		}
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

// hasHeader reports whether headers has name, in any case.
func hasHeader(headers map[string]string, name string) bool {
	for k := range headers {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}

// errorReply is the JSON error reply {"error": {"code", "message"}}.
func errorReply(status int, code, message string) api.Reply {
	return api.Reply{Status: status, JSON: api.ErrorBody{Error: api.ErrorDetail{Code: code, Message: message}}}
}

// classify maps a function error to the status that fails the invocation.
func classify(err error) (int, string) {
	var in *inputError
	switch {
	case errors.As(err, &in):
		return http.StatusBadRequest, "bad_request"
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, "timeout"
	default:
		return http.StatusInternalServerError, "failed"
	}
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, api.ErrorBody{Error: api.ErrorDetail{Code: code, Message: message}})
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
