package app

import (
	"context"
	"net/http"

	"github.com/batonfn/baton/api"
	"github.com/batonfn/baton/config"
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

// withSchedule gives the API the timer's schedule and policies (the dashboard's schedule
// panel and GET /api/runs?occurrences=N).
func withSchedule(s coordinator.Schedule, cfg config.Config) func(*api.Config) {
	return func(c *api.Config) {
		c.Schedule = &api.ScheduleConfig{Schedule: s, Overlap: string(cfg.Overlap), Misfire: string(cfg.Misfire),
			StartingDeadline: cfg.StartingDeadline}
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
