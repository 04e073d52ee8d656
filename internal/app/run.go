// Package app is the Azure Functions custom handler behind the root package's App.Main: a web
// server on FUNCTIONS_CUSTOMHANDLER_PORT that the Functions host (or the local devhost) calls
// with one POST per invocation. `<exe> validate` instead checks the Baton settings of an azd
// environment with the same checks and exits (azd's preprovision hook runs it). It only wires
// things together: config, logging, SDK clients, the routes and graceful shutdown; coordinator
// and work hold the logic, and the jobs come from the app through Options.
package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/telemetry/otlpenv"
	"github.com/batonfn/baton/work"
)

// shutdownBudget bounds graceful shutdown: releasing leases, then draining requests.
const shutdownBudget = 10 * time.Second

// Options are what the app hands the handler.
type Options struct {
	// Jobs are the app's jobs by name (required).
	Jobs *work.Registry
	// DefaultParams are a job's params for a run that names the job and gives none (the
	// timer's job when BATON_JOB_PARAMS is unset, or a manual run); keyed by job name.
	DefaultParams map[string]json.RawMessage
	// Schedules are the schedules the app declares; the settings may change them
	// (BATON_SCHEDULES) and add one (BATON_SCHEDULE).
	Schedules []Schedule
	// Logger receives every line. Default: JSON on Stdout at BATON_LOG_LEVEL.
	Logger *slog.Logger
	// Getenv reads the settings. Default: os.Getenv.
	Getenv config.Getenv
	// Stdout and Stderr receive validate's report and start-up errors. Default: the process's.
	Stdout, Stderr io.Writer
	// TracerProvider and MeterProvider, when either is set, receive Baton's spans and
	// metrics (a nil one turns its signal off), and the OTEL_* settings are not read: the app
	// owns and flushes its providers. Both nil: the handler builds providers from the OTEL_*
	// settings (otlpenv), off when no OTLP endpoint is set, and flushes them at shutdown.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
}

func (o Options) withDefaults() Options {
	if o.Jobs == nil {
		o.Jobs = work.NewRegistry()
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	return o
}

// ErrSettings marks a start-up refused because of the app's settings: a value config.Load
// refuses, or one that does not fit the app (a heartbeat, BATON_SCHEDULE or BATON_SCHEDULES
// that its schedules cannot run with).
var ErrSettings = errors.New("invalid settings")

// settingsError marks err, which names the settings to fix, as ErrSettings.
func settingsError(err error) error { return fmt.Errorf("%w:\n%w", ErrSettings, err) }

// Main runs the process for args (os.Args): `validate` checks the settings, `deadletters`
// counts, shows or purges the queues' dead letters, anything else serves until ctx is
// cancelled. It returns the exit code: 0 after a clean stop, 2 for bad
// settings, 1 for any other failure.
func Main(ctx context.Context, args []string, o Options) int {
	o = o.withDefaults()
	if len(args) > 1 {
		switch args[1] {
		case "validate":
			return validate(o)
		case "deadletters":
			return deadLettersMain(ctx, args[1:], o)
		}
	}
	err := Serve(ctx, o)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrSettings):
		fmt.Fprintf(o.Stderr, "baton: %v\n", err)
		return 2
	default:
		fmt.Fprintf(o.Stderr, "baton: %v\n", err)
		return 1
	}
}

// Serve loads the settings, builds the handler and serves until ctx is cancelled, then shuts
// down gracefully (leases handed over first).
func Serve(ctx context.Context, o Options) error {
	o = o.withDefaults()
	cfg, err := config.Load(o.Getenv)
	if err != nil {
		return settingsError(err)
	}
	resolveTimerJob(&cfg, o)
	logger := o.Logger
	if logger == nil {
		// Lines about a run get run, epoch and instance from the coordinator and the worker;
		// the server adds instance to every invocation line.
		logger = slog.New(slog.NewJSONHandler(o.Stdout, &slog.HandlerOptions{Level: cfg.LogLevel}))
	}
	prov, err := providers(ctx, cfg, o)
	if err != nil {
		logger.Error("start-up failed", "err", err)
		return settingsError(err)
	}
	o.TracerProvider, o.MeterProvider = prov.Tracer, prov.Meter
	app, err := newApp(cfg, logger, o)
	if err != nil {
		logger.Error("start-up failed", "err", errors.Join(err, prov.Shutdown(context.Background())))
		return fmt.Errorf("start-up: %w", err)
	}
	// Flushed last, once run has handed the leases over and drained the requests: their
	// spans are exported too.
	defer func() {
		fctx, cancel := context.WithTimeout(context.Background(), shutdownBudget)
		defer cancel()
		if err := prov.Shutdown(fctx); err != nil {
			logger.Warn("telemetry: flush at shutdown failed", "err", err)
		}
	}()
	if err := run(ctx, cfg, logger, app); err != nil {
		logger.Error("handler stopped", "err", err)
		return err
	}
	return nil
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

// providers are the app's own telemetry providers when it passed any, else those the OTEL_*
// settings ask for (none when no OTLP endpoint is set).
func providers(ctx context.Context, cfg config.Config, o Options) (otlpenv.Providers, error) {
	if o.TracerProvider != nil || o.MeterProvider != nil {
		return otlpenv.Providers{Tracer: o.TracerProvider, Meter: o.MeterProvider, Shutdown: func(context.Context) error { return nil }}, nil
	}
	return otlpenv.FromEnv(ctx, o.Getenv, otlpenv.Identity{Service: cfg.AppName, Instance: cfg.InstanceID})
}
