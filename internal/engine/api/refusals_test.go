package api

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/engine/ledger"
)

// The coordinator's own refusals of a manual run, on both endpoints: a cap on the manual runs
// in progress is 429 with Retry-After and the message naming the cap; an Idempotency-Key that
// names another request's run is 422 idempotency_key_reused with the message naming the run.
func TestManualRefusals_429And422(t *testing.T) {
	tooMany := fmt.Errorf("%w: job \"synthetic\" has 3 manual runs in progress, its cap (BATON_MAX_MANUAL_RUNS_PER_JOB=3)", coordinator.ErrTooManyRuns)
	reused := fmt.Errorf("%w: the Idempotency-Key already names run manual-abc, an ad-hoc run", coordinator.ErrKeyReused)
	for _, c := range []struct {
		name     string
		err      error
		status   int
		code     string
		retry    string
		mentions string
	}{
		{"a cap", tooMany, http.StatusTooManyRequests, CodeTooManyRuns, "30", "BATON_MAX_MANUAL_RUNS_PER_JOB=3"},
		{"a reused key", reused, http.StatusUnprocessableEntity, CodeKeyReused, "", "manual-abc"},
	} {
		t.Run(c.name, func(t *testing.T) {
			check := func(endpoint string, r Reply, v map[string]any) {
				t.Helper()
				msg, _ := v["error"].(map[string]any)["message"].(string)
				if r.Status != c.status || errCode(v) != c.code || r.Headers["Retry-After"] != c.retry || !strings.Contains(msg, c.mentions) {
					t.Errorf("%s: %d %v %v; want %d %s, Retry-After %q, a message naming %q", endpoint, r.Status, v, r.Headers, c.status, c.code, c.retry, c.mentions)
				}
			}
			s := &fakeStarter{fn: func(coordinator.ManualRequest) (coordinator.Outcome, error) {
				return coordinator.Outcome{Run: "manual-abc"}, c.err
			}}
			r := post(newTestAPI(t, newFakeLedger(), s, nil), `{"job":"synthetic"}`, map[string][]string{"Idempotency-Key": {"k"}})
			check("POST /api/runs", r, decodeReply(t, r))

			e := newSchedEnv(t, t0)
			e.s.runNow = func(schedule, key string) (coordinator.Outcome, error) {
				return coordinator.Outcome{Run: ledger.ScheduleNowRunID(schedule, key, t0)}, c.err
			}
			r, v := e.do(http.MethodPost, "nightly/runs", nil, map[string][]string{"Idempotency-Key": {"k"}}, "")
			check("POST /api/schedules/nightly/runs", r, v)
		})
	}
}

// A repeated key the coordinator answered as its run (StatusExisting) is that run: the API
// does not compare the body again, so a request that left out params (the job's defaults
// filled in by the app) is not refused for them.
func TestStartRun_ExistingIsNotComparedAgain(t *testing.T) {
	l := newFakeLedger()
	id := ledger.ManualRunID("k", t0)
	m := manifest(id, ledger.StateRunning, t0, 2)
	m.Trigger, m.Params = ledger.TriggerManual, []byte(`{"container":"sales"}`)
	l.put(m)
	s := &fakeStarter{fn: func(coordinator.ManualRequest) (coordinator.Outcome, error) {
		return coordinator.Outcome{Status: coordinator.StatusExisting, Run: id, State: ledger.StateRunning}, nil
	}}
	r := post(newTestAPI(t, l, s, nil), `{"job":"synthetic"}`, map[string][]string{"Idempotency-Key": {"k"}})
	if v := decodeReply(t, r); r.Status != http.StatusOK || v["run"] != id || v["status"] != "existing" {
		t.Errorf("a repeat without params: %d %v; want 200 existing %s", r.Status, v, id)
	}
}
