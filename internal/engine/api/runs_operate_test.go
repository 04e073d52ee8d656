package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/engine/ledger"
)

// fakeOperator applies coordinator.Cancel's contract to a fakeLedger's manifests.
type fakeOperator struct {
	l     *fakeLedger
	calls []string
}

func (c *fakeOperator) Cancel(ctx context.Context, run, note, by string) (ledger.Manifest, error) {
	c.calls = append(c.calls, run+"|"+note+"|"+by)
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	m, ok := c.l.manifests[run]
	switch {
	case !ok:
		return m, fmt.Errorf("run %s: %w", run, ledger.ErrNotFound)
	case m.Stop != nil:
		return m, nil
	case m.State.Final():
		return m, fmt.Errorf("%w: run %s is %s", coordinator.ErrFinal, run, m.State)
	}
	m.Stop = &ledger.Stop{State: ledger.StateCancelled, By: by, At: t0, Note: note}
	c.l.manifests[run] = m
	return m, nil
}

func (c *fakeOperator) Redrive(ctx context.Context, run, key, by string) (coordinator.RedriveOutcome, error) {
	c.calls = append(c.calls, run+"|redrive|"+key+"|"+by)
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	m, ok := c.l.manifests[run]
	switch {
	case !ok:
		return coordinator.RedriveOutcome{}, fmt.Errorf("run %s: %w", run, ledger.ErrNotFound)
	case key == "k-old":
		return coordinator.RedriveOutcome{Run: run, Round: 1, Partitions: 2, Existing: true, State: ledger.StateRunning}, nil
	case m.State == ledger.StateSucceeded:
		return coordinator.RedriveOutcome{}, fmt.Errorf("%w: run %s is succeeded", ledger.ErrReopen, run)
	case m.Failed == 0:
		return coordinator.RedriveOutcome{}, fmt.Errorf("%w: every partition succeeded", coordinator.ErrNothingToRedrive)
	}
	return coordinator.RedriveOutcome{Run: run, Round: m.Round + 1, Partitions: m.Failed, State: ledger.StateRunning}, nil
}

// POST /api/runs/{id}/redrive: 202 with the round it started, 200 for the key of an earlier
// round, 400 without an Idempotency-Key, 409 for a run that cannot be redriven, 404 for none.
func TestRuns_Redrive(t *testing.T) {
	l := newFakeLedger()
	partial := manifest("run-p", ledger.StatePartial, t0, 10)
	partial.Failed = 3
	l.manifests["run-p"] = partial
	l.manifests["run-ok"] = manifest("run-ok", ledger.StateSucceeded, t0, 10)
	a := newTestAPI(t, l, nil, nil)
	a.cfg.Operator = &fakeOperator{l: l}
	post := func(path, key string) Reply {
		h := map[string][]string{}
		if key != "" {
			h["Idempotency-Key"] = []string{key}
		}
		return a.Runs(context.Background(), Request{Method: http.MethodPost, Path: path, Headers: h})
	}
	if r := post("run-p/redrive", "k-new"); r.Status != http.StatusAccepted || decodeReply(t, r)["round"] != float64(1) ||
		decodeReply(t, r)["partitions"] != float64(3) || decodeReply(t, r)["status"] != "started" {
		t.Fatalf("redrive: %d %v", r.Status, decodeReply(t, r))
	}
	if r := post("run-p/redrive", "k-old"); r.Status != http.StatusOK || decodeReply(t, r)["status"] != "existing" {
		t.Fatalf("redrive with an earlier key: %d %v", r.Status, decodeReply(t, r))
	}
	for _, c := range []struct {
		name, path, key string
		status          int
		code, message   string
	}{
		{"no key", "run-p/redrive", "", http.StatusBadRequest, CodeInvalidKey, "Idempotency-Key"},
		{"succeeded", "run-ok/redrive", "k", http.StatusConflict, CodeConflict, "succeeded"},
		{"no such run", "run-none/redrive", "k", http.StatusNotFound, CodeNotFound, "no run"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := post(c.path, c.key)
			v := decodeReply(t, r)
			msg, _ := v["error"].(map[string]any)["message"].(string)
			if r.Status != c.status || errCode(v) != c.code || !strings.Contains(msg, c.message) {
				t.Fatalf("%d %v, want %d %s containing %q", r.Status, v, c.status, c.code, c.message)
			}
		})
	}
}

// POST /api/runs/{id}/cancel, reached through the Runs route's {*path}: 202 with the run and
// its stop (who, when, the note), the same for a second cancel; 409 for a final run, 404 for
// none, 400 for a bad body or run ID, 405 for GET, 404 for an unknown action.
func TestRuns_Cancel(t *testing.T) {
	l := newFakeLedger()
	l.manifests["run-a"] = manifest("run-a", ledger.StateRunning, t0, 10)
	l.manifests["run-done"] = manifest("run-done", ledger.StateSucceeded, t0, 10)
	cc := &fakeOperator{l: l}
	a := newTestAPI(t, l, nil, nil)
	a.cfg.Operator = cc
	post := func(path, body string, headers map[string][]string) Reply {
		return a.Runs(context.Background(), Request{Method: http.MethodPost, Path: path, Body: []byte(body), Headers: headers})
	}

	r := post("run-a/cancel", `{"note":"the database is down"}`, map[string][]string{PrincipalHeader: {"alice@example.com"}})
	if r.Status != http.StatusAccepted {
		t.Fatalf("cancel: %d %v", r.Status, decodeReply(t, r))
	}
	v := decodeReply(t, r)
	stop, _ := v["stop"].(map[string]any)
	if v["run"] != "run-a" || stop["by"] != "alice@example.com" || stop["note"] != "the database is down" || stop["state"] != "cancelled" {
		t.Fatalf("cancel reply: %v", v)
	}
	if again := post("run-a/cancel", `{"note":"again"}`, nil); again.Status != http.StatusAccepted ||
		decodeReply(t, again)["stop"].(map[string]any)["note"] != "the database is down" {
		t.Fatalf("second cancel: %d %v, want 202 with the first one's stop", again.Status, decodeReply(t, again))
	}
	if got := cc.calls[0]; got != "run-a|the database is down|alice@example.com" {
		t.Errorf("canceller called with %q", got)
	}
	for _, c := range []struct {
		name, path, body string
		status           int
		code, message    string
	}{
		{"final run", "run-done/cancel", "", http.StatusConflict, CodeConflict, "has ended"},
		{"no such run", "run-none/cancel", "", http.StatusNotFound, CodeNotFound, "no run run-none"},
		{"unknown field", "run-a/cancel", `{"reason":"x"}`, http.StatusBadRequest, CodeBadRequest, "unknown field"},
		{"long note", "run-a/cancel", `{"note":"` + strings.Repeat("x", coordinator.MaxCancelNote+1) + `"}`, http.StatusBadRequest, CodeBadRequest, "at most"},
		{"bad run ID", "Run_A/cancel", "", http.StatusBadRequest, CodeInvalidRunID, "run ID"},
		{"unknown action", "run-a/pause", "", http.StatusNotFound, CodeNotFound, "POST runs/{id}/cancel or runs/{id}/redrive"},
		{"too deep", "run-a/cancel/now", "", http.StatusNotFound, CodeNotFound, "no endpoint"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := post(c.path, c.body, nil)
			v := decodeReply(t, r)
			msg, _ := v["error"].(map[string]any)["message"].(string)
			if r.Status != c.status || errCode(v) != c.code || !strings.Contains(msg, c.message) {
				t.Fatalf("%d %v, want %d %s containing %q", r.Status, v, c.status, c.code, c.message)
			}
		})
	}
	if r := a.Runs(context.Background(), Request{Method: http.MethodGet, Path: "run-a/cancel"}); r.Status != http.StatusMethodNotAllowed {
		t.Fatalf("GET cancel: %d", r.Status)
	}
	// GET runs/{id} through the path shows the stop too.
	if r := a.Runs(context.Background(), Request{Method: http.MethodGet, Path: "run-a"}); r.Status != http.StatusOK || decodeReply(t, r)["stop"] == nil {
		t.Fatalf("GET run: %d %v", r.Status, decodeReply(t, r))
	}
	a.cfg.Operator = nil
	if r := post("run-a/cancel", "", nil); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("without a canceller: %d", r.Status)
	}
}
