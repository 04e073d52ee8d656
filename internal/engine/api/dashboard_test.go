package api

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

func TestDashboard_SelfContainedWithStrictCSP(t *testing.T) {
	a := newTestAPI(t, newFakeLedger(), nil, nil)
	r := a.Dashboard(context.Background(), Request{Method: http.MethodGet, Query: map[string]string{"code": "k"}})
	if r.Status != http.StatusOK || !strings.HasPrefix(r.ContentType, "text/html") || len(r.Raw) == 0 {
		t.Fatalf("got %d %q, %d bytes; want 200 text/html", r.Status, r.ContentType, len(r.Raw))
	}
	page := string(r.Raw)
	// No external assets: no src/href to another origin, no @import, no protocol-relative URLs.
	if m := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//|@import|url\(\s*["']?(https?:)?//`).FindString(page); m != "" {
		t.Errorf("page references an external asset: %q", m)
	}
	csp := r.Headers["Content-Security-Policy"]
	for _, part := range []string{"default-src 'none'", "connect-src 'self'"} {
		if !strings.Contains(csp, part) {
			t.Errorf("CSP %q lacks %q", csp, part)
		}
	}
	// The CSP hashes must be those of the page's inline script and style, or a browser
	// would refuse to run them (the browser check proves the same end to end).
	for _, tag := range []string{"script", "style"} {
		body := page[strings.Index(page, "<"+tag+">")+len(tag)+2 : strings.Index(page, "</"+tag+">")]
		sum := sha256.Sum256([]byte(body))
		want := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
		if !strings.Contains(csp, tag+"-src "+want) {
			t.Errorf("CSP %q does not allow the inline %s (%s)", csp, tag, want)
		}
	}
	if r.Headers["Referrer-Policy"] != "no-referrer" || r.Headers["Cache-Control"] != "no-store" {
		t.Errorf("headers = %v", r.Headers)
	}
	if strings.Count(page, "<script>") != 1 || strings.Count(page, "<style>") != 1 {
		t.Error("the CSP hashes cover exactly one inline script and one style element")
	}
}

// The strip calls an occurrence from before the schedule started what it is: a new schedule's
// cursor starts when the instance of its first heartbeat started, so "before the first
// heartbeat" would misname an occurrence between that start and that heartbeat, which runs.
// Cell labels, the legend and the summary say "before the schedule started", with the start
// (the cursor) or a bound on it (the oldest record) when the strip tells it.
func TestDashboard_StripSaysBeforeTheScheduleStarted(t *testing.T) {
	a := newTestAPI(t, newFakeLedger(), nil, nil)
	page := string(a.Dashboard(context.Background(), Request{Method: http.MethodGet, Query: map[string]string{"code": "k"}}).Raw)
	if strings.Contains(page, "first heartbeat") {
		t.Error(`the page still says "first heartbeat"`)
	}
	for _, want := range []string{
		`before: { glyph: "·", words: "before the schedule started" }`, // cell labels
		`before: "before the schedule started"`,                        // the legend
		`before: beforeWords(s)`,                                       // the summary
		`LOOK.before.words + " (" + utc(s.cursor) + ")"`,               // the start, when no record bounds it
		`" (before its first recorded occurrence, " + utc(oldest.occurrence) + ")"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if n := strings.Count(page, `beforeWords(s))`); n != 2 {
		t.Errorf("%d strips are drawn with the words of the schedule's start, want both (the list's and the detail's)", n)
	}
}

// The schedules page says when a schedule paused itself (pausedAutomatically) with its note,
// and how close an active schedule with auto-pause is to it; the detail names the threshold.
func TestDashboard_ShowsAutoPause(t *testing.T) {
	a := newTestAPI(t, newFakeLedger(), nil, nil)
	page := string(a.Dashboard(context.Background(), Request{Method: http.MethodGet, Query: map[string]string{"code": "k"}}).Raw)
	for _, want := range []string{
		`if (s.pausedAutomatically) { parts.push("paused automatically"`,                                    // the status and the detail's pause line
		`td.dataset.auto = String(!!s.pausedAutomatically);`,                                                // the row's status cell
		`if (s.note) { td.appendChild(el("p", "pause-note", s.note)); }`,                                    // the note naming the runs
		`"auto-pause after " + s.autoPause + " failed or timed-out runs in a row"`,                          // the threshold
		`(n ? "; " + n + " so far" : "")`,                                                                   // the streak so far
		`<dt>auto-pause</dt><dd id="sd-autopause">`, `setText("sd-autopause", autoPauseText(s) || "none");`, // the detail
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
}
