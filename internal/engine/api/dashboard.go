package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"net/http"
)

// dashboardHTML is the page: inline CSS and JS, no external assets (the host may be offline).
//
//go:embed dashboard.html
var dashboardHTML []byte

// dashboardCSP allows exactly the page's own inline script and style (by hash) and requests
// to its own origin, so the page can load nothing from anywhere else.
var dashboardCSP = "default-src 'none'; script-src " + inlineHash(dashboardHTML, "<script>", "</script>") +
	"; style-src " + inlineHash(dashboardHTML, "<style>", "</style>") +
	"; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// inlineHash returns the CSP source ('sha256-…') of the text between the first open and
// close tags.
func inlineHash(page []byte, open, close string) string {
	_, rest, ok := bytes.Cut(page, []byte(open))
	if !ok {
		panic("api: dashboard has no " + open)
	}
	body, _, ok := bytes.Cut(rest, []byte(close))
	if !ok {
		panic("api: dashboard has no " + close)
	}
	sum := sha256.Sum256(body)
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}

// Dashboard serves GET /api/dashboard: one self-contained HTML page that opens on the app's
// schedules (each with its recent occurrences, next run, last state, Pause or Resume and Run
// now), shows a schedule's detail at #schedule=<name>, the leader, the limits, the runs
// (filtered by schedule, state and trigger, paged) and a run's detail at #run=<id>; it
// refreshes itself every few seconds by fetching the API beside its own URL. In Azure it is opened with
// ?code=<function key> (the name in any case, as the host reads it): the page takes the key
// out of the address bar and sends it as the x-functions-key header, and its API calls carry
// none of the page's query parameters, so no link or request URL it makes carries the key.
func (a *API) Dashboard(ctx context.Context, r Request) Reply {
	if r.Method != http.MethodGet {
		return methodNotAllowed(http.MethodGet)
	}
	return Reply{
		Status:      http.StatusOK,
		Raw:         dashboardHTML,
		ContentType: "text/html; charset=utf-8",
		Headers: map[string]string{
			"Content-Security-Policy": dashboardCSP,
			"Cache-Control":           "no-store",
			"X-Content-Type-Options":  "nosniff",
			// The URL may carry the function key (?code=): never send it anywhere else.
			"Referrer-Policy": "no-referrer",
		},
	}
}
