// Command baton is the Azure Functions custom handler: a web server on
// FUNCTIONS_CUSTOMHANDLER_PORT that the Functions host (or the local devhost) calls with one
// POST per invocation. `baton validate` instead checks the Baton settings of an azd environment
// with the same checks and exits (azd's preprovision hook runs it); `baton deadletters` counts,
// shows and purges the queues' dead letters. It only wires things together: config, logging, SDK clients, the routes
// and graceful shutdown; coordinator and work hold the logic.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/batonfn/baton/config"
)

// shutdownBudget bounds graceful shutdown: releasing leases, then draining requests.
const shutdownBudget = 10 * time.Second

func main() {
	if code, ok := subcommand(os.Args); ok {
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	cfg, err := config.Load(os.Getenv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "baton: invalid configuration:\n%v\n", err)
		slog.New(slog.NewJSONHandler(os.Stdout, nil)).Error("invalid configuration", "err", err)
		os.Exit(2)
	}
	// Lines about a run get run, epoch and instance from the coordinator and the worker; the
	// server adds instance to every invocation line.
	logger := slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: cfg.LogLevel}))

	app, err := newApp(cfg, logger)
	if err != nil {
		logger.Error("start-up failed", "err", err)
		os.Exit(1)
	}
	if err := run(ctx, cfg, logger, app); err != nil {
		logger.Error("handler stopped", "err", err)
		os.Exit(1)
	}
}

// run serves until ctx is cancelled, then runs the app's cleanups (lease release first, so the
// next contender wins at once) and drains in-flight requests, each within shutdownBudget.
func run(ctx context.Context, cfg config.Config, logger *slog.Logger, app *wiring) error {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.Port)))
	if err != nil {
		return fmt.Errorf("listen on %s=%d: %w", config.SettingPort, cfg.Port, err)
	}
	srv := &http.Server{
		Handler:           app.server,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	logger.Info("handler listening", "addr", ln.Addr().String(), "transport", cfg.Transport,
		"job", cfg.Job, "schedule", cfg.Schedule, "invocation_timeout", cfg.InvocationTimeout().String())

	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	cctx, cancel := context.WithTimeout(context.Background(), shutdownBudget)
	defer cancel()
	cleanupErr := app.Close(cctx)
	sctx, cancel2 := context.WithTimeout(context.Background(), shutdownBudget)
	defer cancel2()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return errors.Join(cleanupErr, fmt.Errorf("drain requests: %w", err))
	}
	if cleanupErr != nil {
		return cleanupErr
	}
	logger.Info("stopped cleanly")
	return nil
}

func newInvocationID() string { return uuid.NewString() }
