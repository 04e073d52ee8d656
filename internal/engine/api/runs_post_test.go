package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
)

func TestDecodeStart(t *testing.T) {
	cases := []struct {
		name, body string
		wantJob    string
		wantParams string
		wantErr    string
	}{
		{name: "no body", body: ""},
		{name: "blank body", body: " \n\t"},
		{name: "empty object", body: "{}"},
		{name: "job only", body: `{"job":"synthetic"}`, wantJob: "synthetic"},
		{name: "job and params", body: `{"job":"synthetic","params":{"partitions":3}}`, wantJob: "synthetic", wantParams: `{"partitions":3}`},
		{name: "null params are none", body: `{"job":"synthetic","params":null}`, wantJob: "synthetic"},
		{name: "unknown field", body: `{"job":"synthetic","prams":{}}`, wantErr: "unknown field"},
		{name: "trailing data", body: `{"job":"synthetic"} {}`, wantErr: "after the JSON object"},
		{name: "array", body: `[{"job":"synthetic"}]`, wantErr: "JSON object"},
		{name: "null", body: `null`, wantErr: "JSON object"},
		{name: "form encoded", body: `job=synthetic`, wantErr: "JSON object"},
		{name: "truncated", body: `{"job":`, wantErr: "body"},
		{name: "job not a string", body: `{"job":7}`, wantErr: "body"},
		{name: "params without job", body: `{"params":{"partitions":3}}`, wantErr: `needs "job"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := decodeStart([]byte(c.body))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("got err %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b.Job != c.wantJob || string(b.Params) != c.wantParams {
				t.Errorf("got job %q params %s, want %q %s", b.Job, b.Params, c.wantJob, c.wantParams)
			}
		})
	}
}

func TestIdempotencyKey(t *testing.T) {
	cases := []struct {
		name    string
		headers map[string][]string
		want    string
		wantErr bool
	}{
		{name: "absent", headers: nil},
		{name: "simple", headers: map[string][]string{"Idempotency-Key": {"nightly-42"}}, want: "nightly-42"},
		{name: "case-insensitive name", headers: map[string][]string{"idempotency-key": {"a b:c"}}, want: "a b:c"},
		{name: "200 characters", headers: map[string][]string{"Idempotency-Key": {strings.Repeat("k", 200)}}, want: strings.Repeat("k", 200)},
		{name: "201 characters", headers: map[string][]string{"Idempotency-Key": {strings.Repeat("k", 201)}}, wantErr: true},
		{name: "empty", headers: map[string][]string{"Idempotency-Key": {""}}, wantErr: true},
		{name: "control character", headers: map[string][]string{"Idempotency-Key": {"a\x01b"}}, wantErr: true},
		{name: "non-ASCII", headers: map[string][]string{"Idempotency-Key": {"clé"}}, wantErr: true},
		{name: "sent twice", headers: map[string][]string{"Idempotency-Key": {"a", "b"}}, wantErr: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := idempotencyKey(Request{Headers: c.headers})
			if (err != nil) != c.wantErr || got != c.want {
				t.Errorf("got %q, %v; want %q, error %v", got, err, c.want, c.wantErr)
			}
		})
	}
}

func post(a *API, body string, headers map[string][]string) Reply {
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	return a.Runs(context.Background(), Request{Method: http.MethodPost, Headers: headers, Body: b})
}

func TestStartRun_Outcomes(t *testing.T) {
	holder := ledger.Holder{App: "app", Instance: "i1", PID: 7}
	cases := []struct {
		name       string
		out        coordinator.Outcome
		err        error
		wantStatus int
		wantCode   string
		check      func(t *testing.T, r Reply, v map[string]any)
	}{
		{name: "started is 202 with Location", out: coordinator.Outcome{Status: coordinator.StatusStarted, Run: "manual-abc", State: ledger.StateRunning},
			wantStatus: 202, check: func(t *testing.T, r Reply, v map[string]any) {
				if r.Headers["Location"] != "/api/runs/manual-abc" {
					t.Errorf("Location = %q", r.Headers["Location"])
				}
				if v["run"] != "manual-abc" || v["status"] != "started" || v["state"] != "running" {
					t.Errorf("body = %v", v)
				}
			}},
		{name: "resumed is 202", out: coordinator.Outcome{Status: coordinator.StatusResumed, Run: "manual-abc", State: ledger.StateRunning}, wantStatus: 202},
		{name: "queued (a run now of tick, buffer-one) is 202", out: coordinator.Outcome{Status: coordinator.StatusQueued, Run: "tick-now-abc", State: ledger.StateQueued},
			wantStatus: 202, check: func(t *testing.T, r Reply, v map[string]any) {
				if v["status"] != "queued" || v["state"] != "queued" || r.Headers["Location"] != "/api/runs/tick-now-abc" {
					t.Errorf("body = %v %v", v, r.Headers)
				}
			}},
		{name: "a busy scheduler (a run now of tick) is 503 with the holder", out: coordinator.Outcome{Status: coordinator.StatusHeld, Run: "tick-now-x", Holder: holder, HolderEpoch: 9},
			err: fmt.Errorf("%w: held", coordinator.ErrSchedulerBusy), wantStatus: 503, wantCode: CodeSchedulerBusy, check: func(t *testing.T, r Reply, v map[string]any) {
				if l, _ := v["leader"].(map[string]any); l["epoch"] != float64(9) || r.Headers["Retry-After"] != "5" {
					t.Errorf("503 = %v %v", v, r.Headers)
				}
			}},
		{name: "bad job is 400", err: fmt.Errorf("%w: %w", coordinator.ErrBadRequest, errors.New("unknown job \"nope\"")), wantStatus: 400, wantCode: CodeBadRequest},
		{name: "held is 409 with the holder", out: coordinator.Outcome{Status: coordinator.StatusHeld, Run: "manual-x", Holder: holder, HolderEpoch: 9, ActiveRun: "tick-20261121t100000z"},
			wantStatus: 409, wantCode: CodeConflict, check: func(t *testing.T, r Reply, v map[string]any) {
				l, _ := v["leader"].(map[string]any)
				h, _ := l["holder"].(map[string]any)
				if h["instance"] != "i1" || l["epoch"] != float64(9) || v["activeRun"] != "tick-20261121t100000z" {
					t.Errorf("409 body = %v", v)
				}
			}},
		{name: "run in progress is 409 with the leader from storage", out: coordinator.Outcome{Status: coordinator.StatusSkipped, Run: "manual-x", Epoch: 4, ActiveRun: "tick-20261121t100000z"},
			err: coordinator.ErrRunInProgress, wantStatus: 409, wantCode: CodeConflict, check: func(t *testing.T, r Reply, v map[string]any) {
				l, _ := v["leader"].(map[string]any)
				h, _ := l["holder"].(map[string]any)
				if h["instance"] != "i1" || l["epoch"] != float64(4) || v["activeRun"] != "tick-20261121t100000z" {
					t.Errorf("409 body = %v", v)
				}
			}},
		{name: "other failure is 500, not a storage error", err: errors.New("schedule check: encode: secret-looking detail"), wantStatus: 500, wantCode: CodeInternal,
			check: func(t *testing.T, r Reply, v map[string]any) {
				if strings.Contains(fmt.Sprint(v), "secret-looking") {
					t.Errorf("error leaked into the reply: %v", v)
				}
			}},
		{name: "storage error is 502 without details", err: fmt.Errorf("%w: dial tcp 10.0.0.1:443: secret-looking detail", ledger.ErrUnavailable), wantStatus: 502, wantCode: CodeStorage,
			check: func(t *testing.T, r Reply, v map[string]any) {
				if strings.Contains(fmt.Sprint(v), "secret-looking") {
					t.Errorf("storage error leaked into the reply: %v", v)
				}
			}},
		{name: "deadline is 504", err: fmt.Errorf("start: %w", context.DeadlineExceeded), wantStatus: 504, wantCode: CodeTimeout},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &fakeStarter{fn: func(coordinator.ManualRequest) (coordinator.Outcome, error) { return c.out, c.err }}
			ld := &fakeLeader{st: election.LeaderState{Holder: holder, Epoch: 4, LeaseState: "available"}}
			a := newTestAPI(t, newFakeLedger(), s, ld)
			r := post(a, `{"job":"synthetic","params":{"partitions":2}}`, nil)
			v := decodeReply(t, r)
			if r.Status != c.wantStatus || (c.wantCode != "" && errCode(v) != c.wantCode) {
				t.Fatalf("got %d %v, want %d %s", r.Status, v, c.wantStatus, c.wantCode)
			}
			if c.check != nil {
				c.check(t, r, v)
			}
		})
	}
}

func TestStartRun_RejectsBeforeStarting(t *testing.T) {
	cases := []struct {
		name, body string
		headers    map[string][]string
		wantStatus int
		wantCode   string
	}{
		{name: "oversize body", body: `{"job":"synthetic","params":{"x":"` + strings.Repeat("a", MaxBodyBytes) + `"}}`, wantStatus: 413, wantCode: CodeTooLarge},
		{name: "unknown field", body: `{"jobb":"synthetic"}`, wantStatus: 400, wantCode: CodeBadRequest},
		{name: "bad key", body: `{}`, headers: map[string][]string{"Idempotency-Key": {strings.Repeat("k", 201)}}, wantStatus: 400, wantCode: CodeInvalidKey},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &fakeStarter{fn: func(coordinator.ManualRequest) (coordinator.Outcome, error) {
				return coordinator.Outcome{Status: coordinator.StatusStarted, Run: "manual-x"}, nil
			}}
			a := newTestAPI(t, newFakeLedger(), s, nil)
			r := post(a, c.body, c.headers)
			v := decodeReply(t, r)
			if r.Status != c.wantStatus || errCode(v) != c.wantCode {
				t.Errorf("got %d %v, want %d %s", r.Status, v, c.wantStatus, c.wantCode)
			}
			if len(s.calls) != 0 {
				t.Errorf("StartManual was called %d times for a rejected request", len(s.calls))
			}
		})
	}
}

func TestStartRun_PassesKeyJobAndParams(t *testing.T) {
	s := &fakeStarter{fn: func(coordinator.ManualRequest) (coordinator.Outcome, error) {
		return coordinator.Outcome{Status: coordinator.StatusStarted, Run: "manual-x", State: ledger.StateRunning}, nil
	}}
	a := newTestAPI(t, newFakeLedger(), s, nil)
	r := post(a, `{"job":"synthetic","params":{"partitions":2}}`, map[string][]string{"Idempotency-Key": {"k1"}})
	if r.Status != 202 {
		t.Fatalf("status %d", r.Status)
	}
	got := s.calls[0]
	if got.Job != "synthetic" || string(got.Params) != `{"partitions":2}` || got.IdempotencyKey != "k1" {
		t.Errorf("StartManual got %+v", got)
	}
}

// A request that loses the lease to another request with the same key answers with that
// request's run once its manifest appears, not with 409.
func TestStartRun_HeldByTheSameKey_AnswersExisting(t *testing.T) {
	l := newFakeLedger()
	id := ledger.ManualRunID("k1", t0)
	s := &fakeStarter{fn: func(req coordinator.ManualRequest) (coordinator.Outcome, error) {
		// The winner creates the manifest while this request is refused the lease.
		m := manifest(id, ledger.StateRunning, t0, 2)
		m.Trigger, m.Params = ledger.TriggerManual, []byte(`{"partitions":2}`)
		l.put(m)
		return coordinator.Outcome{Status: coordinator.StatusHeld, Run: id, Holder: ledger.Holder{App: "a", Instance: "other"}, HolderEpoch: 5}, nil
	}}
	a := newTestAPI(t, l, s, nil)
	r := post(a, `{"job":"synthetic","params":{"partitions":2}}`, map[string][]string{"Idempotency-Key": {"k1"}})
	v := decodeReply(t, r)
	if r.Status != http.StatusOK || v["run"] != id || v["status"] != "existing" {
		t.Fatalf("got %d %v, want 200 existing %s", r.Status, v, id)
	}

	// The same key with other params names another request: 422.
	r = post(a, `{"job":"synthetic","params":{"partitions":3}}`, map[string][]string{"Idempotency-Key": {"k1"}})
	if v := decodeReply(t, r); r.Status != http.StatusUnprocessableEntity || errCode(v) != CodeKeyReused {
		t.Errorf("other params: got %d %v, want 422 %s", r.Status, v, CodeKeyReused)
	}
}

func TestStartRun_HeldWithoutManifest_409AfterKeyWait(t *testing.T) {
	s := &fakeStarter{fn: func(req coordinator.ManualRequest) (coordinator.Outcome, error) {
		return coordinator.Outcome{Status: coordinator.StatusHeld, Run: ledger.ManualRunID("k2", t0), HolderEpoch: 5}, nil
	}}
	a, err := New(Config{Starter: s, Ledger: newFakeLedger(), Leader: &fakeLeader{}, KeyWait: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := post(a, "", map[string][]string{"Idempotency-Key": {"k2"}})
	if v := decodeReply(t, r); r.Status != http.StatusConflict || errCode(v) != CodeConflict {
		t.Errorf("got %d %v, want 409", r.Status, v)
	}
}

func TestRuns_WrongMethods_405(t *testing.T) {
	a := newTestAPI(t, newFakeLedger(), &fakeStarter{}, nil)
	cases := []struct {
		method, id, allow string
	}{
		{http.MethodDelete, "", "GET, POST"},
		{http.MethodPut, "", "GET, POST"},
		{http.MethodPost, "tick-20261121t100000z", "GET"},
		{http.MethodDelete, "tick-20261121t100000z", "GET"},
	}
	for _, c := range cases {
		r := a.Runs(context.Background(), Request{Method: c.method, ID: c.id})
		v := decodeReply(t, r)
		if r.Status != http.StatusMethodNotAllowed || errCode(v) != CodeMethodNotAllowed || r.Headers["Allow"] != c.allow {
			t.Errorf("%s %q: got %d %v Allow %q, want 405 Allow %q", c.method, c.id, r.Status, v, r.Headers["Allow"], c.allow)
		}
	}
	for name, fn := range map[string]func(context.Context, Request) Reply{"leader": a.Leader, "dashboard": a.Dashboard} {
		if r := fn(context.Background(), Request{Method: http.MethodPost}); r.Status != http.StatusMethodNotAllowed {
			t.Errorf("POST %s = %d, want 405", name, r.Status)
		}
	}
}
