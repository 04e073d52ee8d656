package app

import (
	"context"
	"net/http"

	"github.com/batonfn/baton/api"
	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/protocol"
)

// routeParamID is the route parameter of runs/{id?} (Runs/function.json).
const routeParamID = "id"

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
	if f.store != nil {
		cfg.Ledger = f.store
	}
	return api.New(cfg)
}

// withSchedules gives the API the scheduler: its schedules and policies (the dashboard's
// schedules page), run now, pause and resume.
func withSchedules(c *coordinator.Coordinator) func(*api.Config) {
	return func(cfg *api.Config) {
		if ss := c.Schedules(); len(ss) > 0 {
			// Until the API shows every schedule, its schedule panel shows the first.
			cfg.Schedule = &api.ScheduleConfig{Schedule: ss[0], Overlap: string(ss[0].Overlap), Misfire: "catch-up",
				StartingDeadline: ss[0].CatchUp}
		}
	}
}

// apiFunc adapts an api endpoint to an HTTP function: the httpTrigger request becomes an
// api.Request, the api.Reply becomes the `res` output.
func apiFunc(fn func(context.Context, api.Request) api.Reply) httpFunc {
	return func(ctx context.Context, inv *invocation, req *protocol.HTTPRequest) api.Reply {
		body, err := req.BodyBytes()
		if err != nil {
			return errorReply(http.StatusBadRequest, api.CodeBadRequest, err.Error())
		}
		r := api.Request{
			Method:  req.Method,
			ID:      req.Param(routeParamID),
			Query:   req.Query,
			Headers: req.Headers,
			Body:    body,
			Logger:  inv.Logger,
		}
		out := fn(ctx, r)
		return api.Reply{Status: out.Status, Headers: out.Headers, JSON: out.JSON, Raw: out.Raw, ContentType: out.ContentType}
	}
}
