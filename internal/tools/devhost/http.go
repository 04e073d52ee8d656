package devhost

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// route is one HTTP function's route template, parsed.
type route struct {
	fn       *Function
	binding  string // the httpTrigger binding name (Data key)
	out      string // the http output binding name ("$return" uses ReturnValue)
	methods  map[string]bool
	template string
	segs     []segment
	auth     string
}

type segment struct {
	literal    string
	param      string
	optional   bool
	catchAll   bool
	constraint string
}

var paramPattern = regexp.MustCompile(`^\{(\*?)([A-Za-z_][A-Za-z0-9_]*)(?::([A-Za-z0-9]+)(?:\([^)]*\))?)?(\?)?\}$`)

// parseRoute parses a route template ("runs/{id?}", "items/{id:int}", "files/{*path}"). An empty
// template is the function name.
func parseRoute(template string) ([]segment, error) {
	template = strings.Trim(template, "/")
	if template == "" {
		return nil, errors.New("empty route")
	}
	var segs []segment
	parts := strings.Split(template, "/")
	for i, p := range parts {
		if !strings.Contains(p, "{") {
			segs = append(segs, segment{literal: p})
			continue
		}
		m := paramPattern.FindStringSubmatch(p)
		if m == nil {
			return nil, fmt.Errorf("route segment %q: want a literal or one {param}, {param?}, {param:constraint} or {*param}", p)
		}
		s := segment{param: m[2], catchAll: m[1] == "*", constraint: strings.ToLower(m[3]), optional: m[4] == "?"}
		if (s.optional || s.catchAll) && i != len(parts)-1 {
			return nil, fmt.Errorf("route segment %q: optional and catch-all parameters must come last", p)
		}
		segs = append(segs, s)
	}
	return segs, nil
}

// match matches path segments against the template, returning every parameter (nil for an
// absent optional one).
func (r *route) match(parts []string) (map[string]*string, bool) {
	params := map[string]*string{}
	for i, s := range r.segs {
		if i >= len(parts) {
			if s.param != "" && (s.optional || s.catchAll) {
				params[s.param] = nil
				continue
			}
			return nil, false
		}
		switch {
		case s.catchAll:
			v := strings.Join(parts[i:], "/")
			params[s.param] = &v
			return params, true
		case s.param != "":
			v := parts[i]
			if v == "" || !constraintOK(s.constraint, v) {
				return nil, false
			}
			params[s.param] = &v
		default:
			if !strings.EqualFold(s.literal, parts[i]) {
				return nil, false
			}
		}
	}
	return params, len(parts) <= len(r.segs) // missing trailing segments were optional
}

func constraintOK(c, v string) bool {
	switch c {
	case "", "string":
		return true
	case "int", "long":
		_, err := strconv.ParseInt(v, 10, 64)
		return err == nil
	case "bool":
		_, err := strconv.ParseBool(v)
		return err == nil
	case "alpha":
		for _, r := range v {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
				return false
			}
		}
		return true
	case "guid":
		_, err := uuid.Parse(v)
		return err == nil
	}
	return true // other constraints are not emulated
}

// literals counts a route's literal segments, to try specific routes first.
func (r *route) literals() int {
	n := 0
	for _, s := range r.segs {
		if s.param == "" {
			n++
		}
	}
	return n
}

func newRoute(fn *Function, settings *Settings) (*route, error) {
	b := fn.Trigger()
	tmpl, err := settings.Resolve(b.Prop("route"))
	if err != nil {
		return nil, fmt.Errorf("%s route: %w", fn.Name, err)
	}
	if tmpl == "" {
		tmpl = fn.Name
	}
	segs, err := parseRoute(tmpl)
	if err != nil {
		return nil, fmt.Errorf("%s route: %w", fn.Name, err)
	}
	r := &route{fn: fn, binding: b.Name, template: tmpl, segs: segs, methods: map[string]bool{}, auth: b.Prop("authLevel")}
	for _, m := range b.Strings("methods") {
		r.methods[strings.ToUpper(m)] = true
	}
	if out := fn.Output("http"); out != nil {
		r.out = out.Name
	}
	return r, nil
}

// sortRoutes orders routes so that the most specific is tried first.
func sortRoutes(rs []*route) {
	sort.SliceStable(rs, func(i, j int) bool {
		if a, b := rs[i].literals(), rs[j].literals(); a != b {
			return a > b
		}
		return len(rs[i].segs) > len(rs[j].segs)
	})
}

// ServeHTTP serves /<routePrefix>/<route> for the HTTP functions, and the local admin API
// POST /admin/functions/<Name> (fire a non-HTTP function once, as Core Tools allows).
func (h *Host) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/admin/functions/") {
		h.serveAdmin(w, r)
		return
	}
	path := strings.Trim(r.URL.Path, "/")
	if p := h.app.Host.RoutePrefix; p != "" {
		rest, ok := strings.CutPrefix(path, p)
		if !ok || (rest != "" && !strings.HasPrefix(rest, "/")) {
			writeHTTPError(w, http.StatusNotFound, "not_found", "no function route under /"+p+"/ matches "+r.URL.Path)
			return
		}
		path = strings.Trim(rest, "/")
	}
	parts := []string{}
	if path != "" {
		parts = strings.Split(path, "/")
	}
	var found *route
	var params map[string]*string
	methodMismatch := false
	for _, rt := range h.routes {
		p, ok := rt.match(parts)
		if !ok {
			continue
		}
		if len(rt.methods) > 0 && !rt.methods[r.Method] {
			methodMismatch = true
			continue
		}
		found, params = rt, p
		break
	}
	if found == nil {
		if methodMismatch {
			writeHTTPError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not among the function's methods")
			return
		}
		writeHTTPError(w, http.StatusNotFound, "not_found", "no function route matches "+r.URL.Path)
		return
	}
	in := h.pickInstance()
	if in == nil {
		writeHTTPError(w, http.StatusServiceUnavailable, "no_instance", "no running instance to invoke")
		return
	}
	body, err := httpRequest(found.fn.Name, found.binding, r, params, h.now())
	if err != nil {
		writeHTTPError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	reply, err := in.invoke(r.Context(), found.fn.Name, body, r.Method+" "+r.URL.Path)
	if err != nil {
		h.log.Warn("http invocation failed", "function", found.fn.Name, "instance", in.name, "err", firstLine(err.Error()))
		writeHTTPError(w, http.StatusInternalServerError, "invocation_failed", err.Error())
		return
	}
	var res json.RawMessage
	if found.out == "$return" {
		res = reply.ReturnValue
	} else if found.out != "" {
		res, _ = reply.Output(found.out)
	}
	writeHTTPOutput(w, res)
	h.log.Debug("http", "method", r.Method, "path", r.URL.Path, "function", found.fn.Name, "instance", in.name)
}

// writeHTTPOutput writes an http output binding value (§2.2): statusCode (number or string),
// else status, else 200; headers (values stringified); body (a string as is, other JSON as its
// text). A missing output answers 200 with an empty object.
func writeHTTPOutput(w http.ResponseWriter, res json.RawMessage) {
	if isNull(res) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("{}"))
		return
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(res, &raw); err != nil {
		writeHTTPError(w, http.StatusInternalServerError, "bad_output", "the http output binding is not an object: "+err.Error())
		return
	}
	get := func(name string) json.RawMessage {
		for k, v := range raw {
			if strings.EqualFold(k, name) {
				return v
			}
		}
		return nil
	}
	status := http.StatusOK
	for _, key := range []string{"statusCode", "status"} {
		v := bytes.TrimSpace(get(key))
		if isNull(v) {
			continue
		}
		s := string(v)
		if v[0] == '"' {
			_ = json.Unmarshal(v, &s)
		}
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 100 || n > 999 {
			writeHTTPError(w, http.StatusInternalServerError, "bad_output", fmt.Sprintf("the http output %s %s is not a status code", key, v))
			return
		}
		status = n
		break
	}
	var headers map[string]json.RawMessage
	_ = json.Unmarshal(get("headers"), &headers)
	for k, v := range headers {
		s := string(bytes.TrimSpace(v))
		if len(s) > 0 && s[0] == '"' {
			_ = json.Unmarshal(v, &s)
		}
		w.Header().Set(k, s)
	}
	var body []byte
	if b := bytes.TrimSpace(get("body")); !isNull(b) {
		if b[0] == '"' {
			var s string
			_ = json.Unmarshal(b, &s)
			body = []byte(s)
		} else {
			body = b
		}
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeHTTPError(w http.ResponseWriter, status int, code, msg string) {
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// pickInstance returns a random running instance, or nil.
func (h *Host) pickInstance() *Instance {
	var live []*Instance
	for _, in := range h.instances {
		if in.live() {
			live = append(live, in)
		}
	}
	if len(live) == 0 {
		return nil
	}
	return live[rand.IntN(len(live))]
}

// serveAdmin fires a non-HTTP function once on a random instance: POST /admin/functions/<Name>
// answers 202 (Core Tools' admin API; only timer functions are supported here).
func (h *Host) serveAdmin(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		writeHTTPError(w, http.StatusMethodNotAllowed, "method_not_allowed", "use POST")
		return
	}
	name := strings.Trim(strings.TrimPrefix(r.URL.Path, "/admin/functions/"), "/")
	var t *timerTrigger
	for _, tt := range h.timers {
		if strings.EqualFold(tt.fn.Name, name) {
			t = tt
		}
	}
	if t == nil {
		writeHTTPError(w, http.StatusNotFound, "not_found", "no enabled timer function named "+name)
		return
	}
	in := h.pickInstance()
	if in == nil {
		writeHTTPError(w, http.StatusServiceUnavailable, "no_instance", "no running instance to invoke")
		return
	}
	h.goWork(func(ctx context.Context) {
		if err := t.fireNow(ctx, in); err != nil {
			h.log.Warn("admin invocation failed", "function", name, "instance", in.name, "err", firstLine(err.Error()))
		}
	})
	w.WriteHeader(http.StatusAccepted)
}
