package app

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/engine/api"
	"github.com/batonfn/baton/internal/engine/limit"
	"github.com/batonfn/baton/internal/engine/protocol"
	"github.com/batonfn/baton/internal/engine/telemetry"
	"github.com/batonfn/baton/work"
)

// Route parameters: {*path} of runs/{*path} (Runs/function.json) and of schedules/{*path}
// (Schedules/function.json): a catch-all, because both the Functions host and the local host
// accept it, where an optional parameter must come last on the local host. {id} is the
// parameter of runs/{id?}, the Runs route of apps scaffolded before runs had actions.
const (
	routeParamID   = "id"
	routeParamPath = "path"
)

// newAPI builds the HTTP API over what the functions already use: the coordinator for manual
// starts, the worker's ledger store, and the leader for the lease state; opts add the rest
// (withSchedule).
func newAPI(f *functions, opts ...func(*api.Config)) (*api.API, error) {
	cfg := api.Config{Now: f.now}
	for _, o := range opts {
		o(&cfg)
	}
	if f.leader != nil {
		cfg.Leader = f.leader
	}
	switch {
	case f.starter != nil:
		cfg.Starter = f.starter
	case f.coord != nil:
		cfg.Starter = f.coord
	}
	if f.coord != nil {
		cfg.Operator = f.coord
	}
	if f.store != nil {
		cfg.Ledger = f.store
	}
	return api.New(cfg)
}

// withSchedules gives the API the scheduler (GET /api/schedules and the dashboard's schedules
// page, run now, pause and resume) and the heartbeat's period (BATON_HEARTBEAT), within which a
// due occurrence without a record is still pending.
func withSchedules(c *coordinator.Coordinator, heartbeat time.Duration) func(*api.Config) {
	return func(cfg *api.Config) {
		cfg.Scheduler, cfg.Heartbeat = c, heartbeat
	}
}

// withLimits gives the API the limits the jobs run under and the limiter whose states it reads
// (GET /api/limits and the dashboard's limits).
func withLimits(states api.LimitStates, limits []api.DeclaredLimit) func(*api.Config) {
	return func(cfg *api.Config) { cfg.LimitStates, cfg.Limits = states, limits }
}

// declaredLimits lists the limits jobs' registrations name, each with the jobs naming it, as
// the jobs run under them (BATON_LIMITS applied: overrides names the limits it sets).
func declaredLimits(jobs *work.Registry, overrides map[string]limit.Spec) []api.DeclaredLimit {
	var out []api.DeclaredLimit
	for _, job := range jobs.Names() {
		spec, ok := jobs.Limit(job)
		if !ok {
			continue
		}
		i := slices.IndexFunc(out, func(d api.DeclaredLimit) bool { return d.Spec.Name == spec.Name })
		if i < 0 {
			_, set := overrides[spec.Name]
			out = append(out, api.DeclaredLimit{Spec: spec, Overridden: set})
			i = len(out) - 1
		}
		out[i].Jobs = append(out[i].Jobs, job)
	}
	return out
}

// withTraceURL links each run to its trace in a trace UI (BATON_TRACE_URL).
func withTraceURL(url string) func(*api.Config) {
	return func(cfg *api.Config) { cfg.TraceURL = url }
}

// apiFunc adapts an api endpoint to an HTTP function: the httpTrigger request becomes an
// api.Request, the api.Reply becomes the `res` output.
func apiFunc(fn func(context.Context, api.Request) api.Reply) httpFunc {
	return func(ctx context.Context, inv *invocation, req *protocol.HTTPRequest) api.Reply {
		// A caller's trace context: a run this request starts links its trace to the caller's.
		for k, v := range req.Headers {
			if strings.EqualFold(k, "traceparent") && len(v) > 0 {
				ctx = telemetry.ContextWithTraceparent(ctx, v[0])
			}
		}
		body, err := req.BodyBytes()
		if err != nil {
			return errorReply(http.StatusBadRequest, api.CodeBadRequest, err.Error())
		}
		r := api.Request{
			Method:  req.Method,
			ID:      req.Param(routeParamID),
			Path:    req.Param(routeParamPath),
			Query:   req.Query,
			Headers: req.Headers,
			Body:    body,
			Logger:  inv.Logger,
		}
		out := fn(ctx, r)
		return api.Reply{Status: out.Status, Headers: out.Headers, JSON: out.JSON, Raw: out.Raw, ContentType: out.ContentType}
	}
}
