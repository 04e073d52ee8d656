package app

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/protocol"
)

// hostShim stands in for the Functions host's HTTP front end in tests, for a browser: it
// serves /api/<route> for the HTTP functions, builds the httpTrigger invocation the host would
// send (Url, Method, Query as an object, Headers as string arrays, route Params, Body only
// when there is one; see docs/design.md, Host protocol), posts it to the handler, and answers
// with the `res` output, or 500 when the handler fails the invocation, as the host does.
// It checks no function key, like Core Tools.
type hostShim struct {
	t       testing.TB
	handler string
	srv     *httptest.Server

	mu   sync.Mutex
	seen []string // request URIs, in order
	keys []string // each request's x-functions-key header, in the same order
}

func newHostShim(t testing.TB, handlerURL string) *hostShim {
	h := &hostShim{t: t, handler: handlerURL}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hostShim) requests() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.seen...)
}

// functionKeys returns the x-functions-key header of each request, in the order of requests.
func (h *hostShim) functionKeys() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.keys...)
}

// route maps a path under /api/ to a function and its route parameters (function.json routes:
// runs/{*path}, schedules/{*path}, limits/{*path}, leader, dashboard).
func route(path string) (fn string, params map[string]any, ok bool) {
	rest, found := strings.CutPrefix(path, "/api/")
	if !found {
		return "", nil, false
	}
	switch {
	case rest == "runs":
		return fnRuns, map[string]any{}, true
	case strings.HasPrefix(rest, "runs/"):
		return fnRuns, map[string]any{routeParamPath: rest[len("runs/"):]}, true
	case rest == "schedules":
		return fnSchedules, map[string]any{}, true
	case strings.HasPrefix(rest, "schedules/"):
		return fnSchedules, map[string]any{routeParamPath: rest[len("schedules/"):]}, true
	case rest == "limits":
		return fnLimits, map[string]any{}, true
	case strings.HasPrefix(rest, "limits/"):
		return fnLimits, map[string]any{routeParamPath: rest[len("limits/"):]}, true
	case rest == "leader":
		return fnLeader, nil, true
	case rest == "dashboard":
		return fnDashboard, nil, true
	}
	return "", nil, false
}

func (h *hostShim) serve(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.seen = append(h.seen, r.URL.RequestURI())
	h.keys = append(h.keys, r.Header.Get("x-functions-key"))
	h.mu.Unlock()
	fn, params, ok := route(r.URL.Path)
	if !ok {
		http.NotFound(w, r)
		return
	}
	query := map[string]string{}
	for k, vs := range r.URL.Query() {
		query[k] = strings.Join(vs, ",")
	}
	headers := map[string][]string{"Host": {r.Host}}
	single := map[string]string{"Host": r.Host}
	for k, vs := range r.Header {
		headers[k] = vs
		single[k] = strings.Join(vs, ",")
	}
	req := map[string]any{
		"Url": "http://" + r.Host + r.URL.RequestURI(), "Method": r.Method, "Query": query, "Headers": headers,
		"Identities": []any{},
	}
	if params != nil {
		req["Params"] = params
	}
	body, _ := io.ReadAll(r.Body)
	if len(body) > 0 {
		req["Body"] = string(body)
	}
	rawReq, _ := json.Marshal(req)
	md := map[string]json.RawMessage{"sys": protocol.SysMeta(fn, time.Now(), "00000000-0000-4000-8000-000000000001")}
	md["Query"], _ = json.Marshal(query)
	md["Headers"], _ = json.Marshal(single)
	for k, v := range params {
		md[k] = protocol.QuoteMeta(v.(string))
	}
	payload, _ := json.Marshal(protocol.InvokeRequest{Data: map[string]json.RawMessage{bindingRequest: rawReq}, Metadata: md})

	resp, err := http.Post(h.handler+"/"+fn, "application/json", bytes.NewReader(payload))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var ir struct {
		Outputs struct {
			Res *protocol.HTTPResponse `json:"res"`
		}
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &ir) != nil || ir.Outputs.Res == nil {
		h.t.Errorf("host shim: %s %s: handler answered %d %s", r.Method, r.URL, resp.StatusCode, raw)
		http.Error(w, "the function failed", http.StatusInternalServerError)
		return
	}
	for k, v := range ir.Outputs.Res.Headers {
		w.Header().Set(k, v)
	}
	w.WriteHeader(ir.Outputs.Res.StatusCode)
	_, _ = io.WriteString(w, ir.Outputs.Res.Body)
}
