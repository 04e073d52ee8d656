package devhost

import (
	"mime"
	"net"
	"net/http"
	"strings"
)

// localOnly guards the local host's HTTP front and control endpoint against the developer's own
// browser: a web page open while the host runs could otherwise start runs or kill instances.
// It serves a request only when
//   - its Host names the loopback interface (localhost, 127.0.0.0/8, ::1), so a DNS name
//     rebound to 127.0.0.1 gets nothing;
//   - it carries no Origin, or the same origin as the request (http://<Host>), and no
//     Sec-Fetch-Site other than same-origin or none: cross-site pages are refused even for
//     reads, which a browser would otherwise hand to them when a reply is a simple request;
//   - a browser's request (one with an Origin or Sec-Fetch-Site) carries a body only as JSON:
//     a form or text/plain body is what a page can send without a preflight.
//
// Tools (curl, the tests, the demo) send neither header and may send any body, as to Azure.
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
