package baton

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"syscall"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/batonfn/baton/internal/app"
	"github.com/batonfn/baton/internal/engine/limit"
	"github.com/batonfn/baton/work"
)

// App is a Baton app: its jobs, their schedules, and how it runs. Build it with New, register
// the jobs, then call Main (or Run). An App is not safe for concurrent registration.
type App struct {
	jobs      *work.Registry
	defaults  map[string]json.RawMessage
	limits    map[string]limit.Spec // by limit name, as the jobs declare them
	schedules []app.Schedule
	problems  []error
	logger    *slog.Logger
	getenv    func(string) string
	tracer    trace.TracerProvider
	meter     metric.MeterProvider
}

// Option configures an App (see New).
type Option interface{ applyApp(*App) }

type appOption func(*App)

func (o appOption) applyApp(a *App) { o(a) }

// WithLogger sends every line of the handler to logger. Default: JSON lines on standard output
// at BATON_LOG_LEVEL (the Functions host collects standard output).
func WithLogger(logger *slog.Logger) Option { return appOption(func(a *App) { a.logger = logger }) }

// WithSettings reads the app settings through getenv instead of the environment. Default:
// os.Getenv.
func WithSettings(getenv func(string) string) Option {
	return appOption(func(a *App) { a.getenv = getenv })
}

// WithTelemetry sends Baton's spans to tp and its metrics to mp (either may be nil: that signal
// is then off), in place of the providers the standard OTEL_* settings would build; the app
// flushes and shuts them down itself. Every run is one trace, from the decision to start it to
// its report, and a job's own spans nest under its partition's through Process's context.
// Default: OTLP export as OTEL_EXPORTER_OTLP_ENDPOINT and the other OTEL_* settings say; off
// when no endpoint is set.
func WithTelemetry(tp trace.TracerProvider, mp metric.MeterProvider) Option {
	return appOption(func(a *App) { a.tracer, a.meter = tp, mp })
}

// New returns an App with no jobs.
func New(opts ...Option) *App {
	a := &App{jobs: work.NewRegistry(), defaults: map[string]json.RawMessage{}, limits: map[string]limit.Spec{}}
	for _, o := range opts {
		if o != nil {
			o.applyApp(a)
		}
	}
	return a
}

// jobName is what a job may be called: it appears in BATON_JOB, manual runs and the ledger.
var jobName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

// JobHandle is a registered job, on which its schedules are declared (see App.Register).
type JobHandle struct {
	app  *App
	name string
	job  Job // nil when the registration failed
}

// Name is the name the job was registered under.
func (h *JobHandle) Name() string { return h.name }

// Register adds job under name (1–63 characters of a-z, 0-9, '-' and '_', starting with a
// letter) for its schedules, the settings' schedule (BATON_JOB) and manual runs, and returns
// its handle. A bad registration is kept as a *RegistrationError naming the job and the field,
// reported with every other by Err, Run and Main, which then refuse to start.
func (a *App) Register(name string, job Job, opts ...JobOption) *JobHandle {
	h := &JobHandle{app: a, name: name}
	if err := a.register(name, job, opts); err != nil {
		a.problems = append(a.problems, err)
	} else {
		h.job = job
	}
	return h
}

func (a *App) register(name string, job Job, opts []JobOption) error {
	fail := func(field string, err error) error { return &RegistrationError{Job: name, Field: field, Err: err} }
	switch {
	case !jobName.MatchString(name):
		return fail("name", fmt.Errorf("%w: want 1-63 characters of a-z, 0-9, '-' and '_', starting with a letter", ErrInvalidName))
	case job == nil:
		return fail("job", ErrNilJob)
	}
	if _, err := a.jobs.Lookup(name); err == nil {
		return fail("name", ErrDuplicateJob)
	}
	if c, ok := job.(interface{ check() error }); ok {
		if err := c.check(); err != nil {
			return fail("job", err)
		}
	}
	spec := jobSpec{job: job}
	for _, o := range opts {
		if o == nil {
			return fail("option", fmt.Errorf("%w: a job option is nil", ErrNilJob))
		}
		if err := o.applyJob(&spec); err != nil {
			var re *RegistrationError
			if errors.As(err, &re) {
				re.Job = name
				return re
			}
			return fail("option", err)
		}
	}
	if err := spec.check(); err != nil {
		return fail(spec.field, err)
	}
	if spec.limit != nil {
		if err := a.registerLimit(*spec.limit); err != nil {
			return fail("limit", err)
		}
		a.jobs.SetLimit(name, *spec.limit)
	}
	a.jobs.Register(name, engineJob(job))
	if spec.retry != nil {
		a.jobs.SetRetry(name, spec.retry.engine())
	}
	if spec.bundle > 0 {
		a.jobs.SetMaxBundle(name, spec.bundle)
	}
	if spec.timeout > 0 {
		a.jobs.SetPartitionTimeout(name, spec.timeout)
	}
	if spec.budget != nil {
		a.jobs.SetFailureBudget(name, *spec.budget, false)
	}
	if spec.run > 0 {
		a.jobs.SetRunTimeout(name, spec.run)
	}
	if spec.params != nil {
		a.defaults[name] = spec.params
	}
	return nil
}

// Err reports every refused registration of a job or a schedule so far, joined (nil when there
// is none). Each is a *RegistrationError.
func (a *App) Err() error { return errors.Join(a.problems...) }

// Run serves the Functions host until ctx is cancelled, then hands its leases over and drains
// in-flight invocations. It returns at once with Err when a registration was refused, or with
// an error wrapping ErrSettings when the settings are invalid; nil after a clean stop.
func (a *App) Run(ctx context.Context) error {
	if err := a.Err(); err != nil {
		return err
	}
	return app.Serve(ctx, a.options(os.Stdout, os.Stderr))
}

// ErrSettings marks a start-up that Run refused because of the app's settings (a BATON_*
// setting or a connection); the error names each setting to fix.
var ErrSettings = app.ErrSettings

// Main runs the app as the custom handler process and exits: it serves until SIGTERM or Ctrl-C
// (see Run), or, when the first argument is "validate", checks the settings against the app's
// jobs and schedules without serving (azd's preprovision hook runs it). It exits 2, with every
// problem on standard error, when a registration was refused or the settings are invalid.
func (a *App) Main() {
	os.Exit(a.main(os.Args, os.Stdout, os.Stderr))
}

func (a *App) main(args []string, stdout, stderr io.Writer) int {
	if len(a.problems) > 0 {
		fmt.Fprintf(stderr, "baton: cannot start: %d registration(s) refused:\n", len(a.problems))
		for _, p := range a.problems {
			fmt.Fprintf(stderr, "  %v\n", p)
		}
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return app.Main(ctx, args, a.options(stdout, stderr))
}

func (a *App) options(stdout, stderr io.Writer) app.Options {
	return app.Options{Jobs: a.jobs, DefaultParams: a.defaults, Schedules: a.schedules, Logger: a.logger, Getenv: a.getenv,
		Stdout: stdout, Stderr: stderr, TracerProvider: a.tracer, MeterProvider: a.meter}
}
