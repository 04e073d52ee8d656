package devhost

import (
	"mime"
	"net"
	"net/http"
	"strings"
)

// localOnly guards the local host's HTTP front and control endpoint against pages open in the
// developer's browser. It serves a request only when its Host is loopback (localhost,
// 127.0.0.0/8, ::1: a rebound DNS name gets nothing), it carries no Origin but http://<Host>
// and no Sec-Fetch-Site but same-origin or none (cross-site pages are refused even reads), and
// a browser's request (one with either header) has no body but JSON, which no page can send
// without a preflight. Tools (curl, the tests, the demo) send neither header and any body.
func localOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackHost(r.Host) {
			writeHTTPError(w, http.StatusForbidden, "forbidden_host", "the local host answers only to localhost, 127.0.0.1 or [::1], not "+r.Host)
			return
		}
		if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host {
			writeHTTPError(w, http.StatusForbidden, "cross_origin", "cross-origin request from "+o+" refused")
			return
		}
		if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" && s != "none" {
			writeHTTPError(w, http.StatusForbidden, "cross_origin", "a "+s+" request is refused")
			return
		}
		browser := r.Header.Get("Origin") != "" || r.Header.Get("Sec-Fetch-Site") != ""
		if browser && r.ContentLength != 0 && r.Method != http.MethodGet && r.Method != http.MethodHead {
			if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
				writeHTTPError(w, http.StatusUnsupportedMediaType, "unsupported_media_type", "a request body must be application/json")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether a Host header (with or without a port) names the loopback
// interface.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
