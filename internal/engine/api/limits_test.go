package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/limit"
)

// memLimits is limit.Store in memory (the blob store is tested on Azurite in internal/app);
// reads are counted by limit.
type memLimits struct {
	mu     sync.Mutex
	states map[string]limit.State
	reads  map[string]int
	err    error
}

func newMemLimits() *memLimits {
	return &memLimits{states: map[string]limit.State{}, reads: map[string]int{}}
}

func (m *memLimits) Read(ctx context.Context, name string) (limit.State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads[name]++
	return m.states[name], m.err
}

func (m *memLimits) Update(ctx context.Context, name string, fn func(*limit.State) error) (limit.State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.states[name]
	if err := fn(&st); errors.Is(err, limit.ErrNoChange) {
		return m.states[name], nil
	} else if err != nil {
		return st, err
	}
	m.states[name] = st
	return st, nil
}

func mustLimitSpec(t *testing.T, s limit.Spec) limit.Spec {
	t.Helper()
	s, err := s.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// limitsAPI is an API over two declared limits, crm (overridden, two jobs) and geo (a rate),
// whose states the real limiter writes to store at *clock.
func limitsAPI(t *testing.T, store *memLimits, clock *time.Time) (*API, *limit.Limiter, limit.Spec) {
	t.Helper()
	crm := mustLimitSpec(t, limit.Spec{Name: "crm", MaxInFlight: 4})
	geo := mustLimitSpec(t, limit.Spec{Name: "geo", Rate: 10, Per: time.Minute, Burst: 2})
	lim, err := limit.New(limit.Config{Store: store, Holder: "inst-a/101", Lease: 30 * time.Second,
		Now: func() time.Time { return *clock }})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{Ledger: newFakeLedger(), Leader: &fakeLeader{}, LimitStates: lim, Now: func() time.Time { return *clock },
		Limits: []DeclaredLimit{{Spec: geo, Jobs: []string{"geocode"}}, {Spec: crm, Jobs: []string{"sync", "export"}, Overridden: true}}})
	if err != nil {
		t.Fatal(err)
	}
	return a, lim, crm
}

func limitJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A limit no partition has run under has no state yet: the list shows its settings, zeros, no
// holders and null times, one read per limit.
func TestLimits_NeverUsed(t *testing.T) {
	now := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	store := newMemLimits()
	a, _, _ := limitsAPI(t, store, &now)
	r := a.Limits(context.Background(), Request{Method: http.MethodGet})
	if r.Status != http.StatusOK {
		t.Fatalf("status %d %v", r.Status, r.JSON)
	}
	want := `{"limits":[` +
		`{"name":"crm","maxInFlight":4,"rate":0,"per":"","perSeconds":0,"burst":0,"settings":"maxInFlight 4","overridden":true,` +
		`"jobs":["export","sync"],"inFlight":0,"waiting":0,"started":0,"slowed":false,"slowUntil":null,"slowAt":null,"slowReason":"",` +
		`"holdMs":0,"holders":[],"updated":null},` +
		`{"name":"geo","maxInFlight":0,"rate":10,"per":"1m0s","perSeconds":60,"burst":2,"settings":"rate 10/1m0s, burst 2","overridden":false,` +
		`"jobs":["geocode"],"inFlight":0,"waiting":0,"started":0,"slowed":false,"slowUntil":null,"slowAt":null,"slowReason":"",` +
		`"holdMs":0,"holders":[],"updated":null}],"now":"2026-11-28T09:00:00Z"}`
	if got := limitJSON(t, r.JSON); got != want {
		t.Errorf("GET /api/limits:\ngot  %s\nwant %s", got, want)
	}
	if store.reads["crm"] != 1 || store.reads["geo"] != 1 || len(store.reads) != 2 {
		t.Errorf("reads %v, want one per limit", store.reads)
	}
}

// Slots held by two grants, a bundle waiting and a slow-down, written by the real limiter: one
// limit shows them at its own URL; a grant expired meanwhile is neither in flight nor a holder,
// and once the slow-down's time passes the limit is no longer slowed but still says when the
// downstream asked.
func TestLimits_State(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	now := t0
	store := newMemLimits()
	a, lim, crm := limitsAPI(t, store, &now)
	ctx := context.Background()
	g1, _, err := lim.Acquire(ctx, crm, "bundle-1", 3)
	if err != nil || g1.Slots != 3 {
		t.Fatalf("first grant %+v %v", g1, err)
	}
	now = t0.Add(10 * time.Second)
	g2, _, err := lim.Acquire(ctx, crm, "bundle-2", 5)
	if err != nil || g2.Slots != 1 {
		t.Fatalf("second grant %+v %v", g2, err)
	}
	if g3, wait, err := lim.Acquire(ctx, crm, "bundle-3", 7); err != nil || g3.Partitions != 0 || wait <= 0 {
		t.Fatalf("third bundle %+v %s %v, want a refusal", g3, wait, err)
	}
	if err := lim.SlowDown(ctx, "crm", t0.Add(2*time.Minute), "429 Too Many Requests"); err != nil {
		t.Fatal(err)
	}
	now = t0.Add(20 * time.Second)
	r := a.Limits(ctx, Request{Method: http.MethodGet, Path: "crm"})
	if r.Status != http.StatusOK {
		t.Fatalf("status %d %v", r.Status, r.JSON)
	}
	want := `{"name":"crm","maxInFlight":4,"rate":0,"per":"","perSeconds":0,"burst":0,"settings":"maxInFlight 4","overridden":true,` +
		`"jobs":["export","sync"],"inFlight":4,"waiting":7,"started":8,"slowed":true,` +
		`"slowUntil":"2026-11-28T09:02:00Z","slowAt":"2026-11-28T09:00:10Z","slowReason":"429 Too Many Requests","holdMs":0,` +
		`"holders":[{"holder":"inst-a/101","slots":3,"expires":"2026-11-28T09:00:30Z"},{"holder":"inst-a/101","slots":1,"expires":"2026-11-28T09:00:40Z"}],` +
		`"updated":"2026-11-28T09:00:10Z"}`
	if got := limitJSON(t, r.JSON); got != want {
		t.Errorf("GET /api/limits/crm:\ngot  %s\nwant %s", got, want)
	}
	if store.reads["geo"] != 0 {
		t.Errorf("one limit's URL read geo's state %d times", store.reads["geo"])
	}

	// Past the first grant's expiry and the slow-down; the second grant released after 5 s.
	now = t0.Add(3 * time.Minute)
	if err := lim.Release(ctx, g2, 1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	r = a.Limits(ctx, Request{Method: http.MethodGet})
	v := r.JSON.(LimitsReply).Limits[0]
	if v.Name != "crm" || v.InFlight != 0 || len(v.Holders) != 0 || v.Slowed || v.SlowAt == nil || v.SlowReason != "429 Too Many Requests" ||
		v.Waiting != 0 || v.Started != 8 || v.HoldMs != 5000 {
		t.Errorf("later: %s", limitJSON(t, v))
	}
}

// An unknown limit is 404 naming the declared ones; a path past the name is 404; a POST is
// 405; without a limiter the endpoint is 503; a failed read is 500 with the details only in
// the log.
func TestLimits_Errors(t *testing.T) {
	now := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	store := newMemLimits()
	a, _, _ := limitsAPI(t, store, &now)
	ctx := context.Background()
	for _, c := range []struct {
		req    Request
		status int
		code   string
		msg    string
	}{
		{Request{Method: http.MethodGet, Path: "nope"}, http.StatusNotFound, CodeNotFound, `no limit "nope"; this app declares: crm, geo`},
		{Request{Method: http.MethodGet, Path: "crm/slots"}, http.StatusNotFound, CodeNotFound, "no endpoint limits/crm/slots"},
		{Request{Method: http.MethodPost, Path: "crm"}, http.StatusMethodNotAllowed, CodeMethodNotAllowed, "use GET"},
	} {
		r := a.Limits(ctx, c.req)
		v := decodeReply(t, r)
		msg, _ := v["error"].(map[string]any)["message"].(string)
		if r.Status != c.status || errCode(v) != c.code || !strings.Contains(msg, c.msg) {
			t.Errorf("%s %q: %d %v, want %d %s %q", c.req.Method, c.req.Path, r.Status, v, c.status, c.code, c.msg)
		}
	}
	if len(store.reads) != 0 {
		t.Errorf("refused requests read %v", store.reads)
	}

	none, err := New(Config{Ledger: newFakeLedger(), Leader: &fakeLeader{}})
	if err != nil {
		t.Fatal(err)
	}
	if r := none.Limits(ctx, Request{Method: http.MethodGet}); r.Status != http.StatusServiceUnavailable || errCode(decodeReply(t, r)) != CodeUnavailable {
		t.Errorf("without a limiter: %d %v, want 503 unavailable", r.Status, r.JSON)
	}

	store.err = errors.New("read _limits/crm.json: connection refused to https://acct.blob.core.windows.net")
	r := a.Limits(ctx, Request{Method: http.MethodGet})
	if v := decodeReply(t, r); r.Status != http.StatusInternalServerError || errCode(v) != CodeInternal || strings.Contains(limitJSON(t, v), "acct") {
		t.Errorf("failed read: %d %v, want 500 without the error's details", r.Status, v)
	}
}
