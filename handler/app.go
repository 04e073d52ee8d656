package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"

	"github.com/batonfn/baton/config"
	"github.com/batonfn/baton/protocol"
)

// Function names: the folder names holding each function.json.
const (
	FnTick      = "Tick"
	FnWork      = "Work"
	FnWorkQueue = "WorkQueue"
	FnRuns      = "Runs"
	FnLeader    = "Leader"
)

// Binding names used in the function.json files.
const (
	bindingTimer   = "timer"
	bindingMessage = "message"
	bindingRequest = "req"
)

// App is the wired handler: the routes and the cleanups to run at shutdown.
type App struct {
	Server *Server

	mu       sync.Mutex
	cleanups []func(context.Context) error
}

// OnClose registers a cleanup to run at shutdown, in registration order.
func (a *App) OnClose(fn func(context.Context) error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cleanups = append(a.cleanups, fn)
}

// Close runs every cleanup within ctx and joins their errors.
func (a *App) Close(ctx context.Context) error {
	a.mu.Lock()
	fns := append([]func(context.Context) error(nil), a.cleanups...)
	a.mu.Unlock()
	var errs []error
	for _, fn := range fns {
		errs = append(errs, fn(ctx))
	}
	return errors.Join(errs...)
}

// newApp builds the SDK clients (the only place that does) and registers every function.
func newApp(cfg config.Config, logger *slog.Logger) (*App, error) {
	app := &App{Server: NewServer(logger, cfg.InvocationTimeout(), newInvocationID)}
	register(app.Server)
	return app, nil
}

// register wires each function to its implementation.
func register(s *Server) {
	notYet := func(ctx context.Context, inv *Invocation) error { return errNotImplemented }
	s.Trigger(FnTick, notYet)
	s.Trigger(FnWork, notYet)
	s.Trigger(FnWorkQueue, notYet)
	notYetHTTP := func(ctx context.Context, inv *Invocation, req *protocol.HTTPRequest) HTTPReply {
		return ErrorReply(http.StatusNotImplemented, "not_implemented", inv.Function+" is not implemented yet")
	}
	s.HTTP(FnRuns, bindingRequest, notYetHTTP)
	s.HTTP(FnLeader, bindingRequest, notYetHTTP)
}
