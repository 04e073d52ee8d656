package app

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/api"
	"github.com/batonfn/baton/internal/engine/limit"
)

// getLimits is GET limits/{name} (or the list when name is "") through the host's payload.
func (e *apiEnv) getLimits(name string, out any) httpOut {
	e.t.Helper()
	payload := goldenHTTP(e.t, "http-limits-list.json")
	if name != "" {
		payload = goldenHTTP(e.t, "http-limits-get.json", func(req map[string]any) {
			req["Params"] = map[string]any{routeParamPath: name}
			req["Url"] = "https://baton-app.azurewebsites.net/api/limits/" + name
		})
	}
	o := e.invoke(fnLimits, payload)
	if out != nil && o.Status == http.StatusOK {
		if err := json.Unmarshal([]byte(o.Body), out); err != nil {
			e.t.Fatalf("limits/%s: %v in %s", name, err, o.Body)
		}
	}
	return o
}

// The Limits function on Azurite: the limit the synthetic job names, with the settings
// BATON_LIMITS gives it, shows zeros before anything ran under it (no blob, not even the runs
// container), then the slots, the waiting bundle and the slow-down the real limiter wrote to
// its blob; an unknown limit is 404 with a JSON error.
func TestAPI_Limits(t *testing.T) {
	e := newAPIEnv(t)
	ctx := testCtx(t)

	var list api.LimitsReply
	if o := e.getLimits("", &list); o.Status != http.StatusOK {
		t.Fatalf("GET limits: %d %s", o.Status, o.Body)
	}
	if len(list.Limits) != 1 {
		t.Fatalf("limits %+v, want the one the synthetic job names", list.Limits)
	}
	v := list.Limits[0]
	if v.Name != testLimit || v.MaxInFlight != 4 || !v.Overridden || len(v.Jobs) != 1 || v.Jobs[0] != syntheticName ||
		v.InFlight != 0 || v.Waiting != 0 || v.Started != 0 || v.Slowed || v.SlowUntil != nil || v.SlowAt != nil ||
		v.Updated != nil || v.Holders == nil || len(v.Holders) != 0 {
		t.Fatalf("never used: %+v, want the overridden settings and zeros", v)
	}

	if err := e.store.EnsureContainer(ctx); err != nil {
		t.Fatal(err)
	}
	spec := limit.Spec{Name: testLimit, MaxInFlight: 4}
	before := time.Now().UTC()
	if g, _, err := e.limiter.Acquire(ctx, spec, "bundle-1", 3); err != nil || g.Slots != 3 {
		t.Fatalf("first grant %+v %v", g, err)
	}
	if g, _, err := e.limiter.Acquire(ctx, spec, "bundle-2", 5); err != nil || g.Slots != 1 {
		t.Fatalf("second grant %+v %v", g, err)
	}
	if g, wait, err := e.limiter.Acquire(ctx, spec, "bundle-3", 6); err != nil || g.Partitions != 0 || wait <= 0 {
		t.Fatalf("third bundle %+v %s %v, want it to wait", g, wait, err)
	}
	until := before.Add(10 * time.Minute).Truncate(time.Second)
	if err := e.limiter.SlowDown(ctx, testLimit, until, "429 Too Many Requests"); err != nil {
		t.Fatal(err)
	}

	if o := e.getLimits(testLimit, &v); o.Status != http.StatusOK {
		t.Fatalf("GET limits/%s: %d %s", testLimit, o.Status, o.Body)
	}
	if v.InFlight != 4 || v.Waiting != 6 || v.Started != 8 || !v.Slowed || v.SlowUntil == nil || !v.SlowUntil.Equal(until) ||
		v.SlowAt == nil || v.SlowAt.Before(before) || v.SlowReason != "429 Too Many Requests" || v.Updated == nil {
		t.Errorf("seeded: %+v, want 4 in flight, 6 waiting, 8 started, slowed until %s", v, until)
	}
	if len(v.Holders) != 2 || v.Holders[0].Holder != "inst-a/101" || v.Holders[0].Slots+v.Holders[1].Slots != 4 ||
		!v.Holders[0].Expires.After(before) {
		t.Errorf("holders %+v, want the two grants of inst-a/101", v.Holders)
	}

	o := e.getLimits("nope", nil)
	if out := o.json(t); o.Status != http.StatusNotFound || out["error"].(map[string]any)["code"] != api.CodeNotFound {
		t.Errorf("unknown limit: %d %s, want 404 not_found", o.Status, o.Body)
	}
}
