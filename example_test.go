package baton_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"os"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/batonfn/baton"
)

// countdown is a raw Job: params {"from": n} plan n partitions, each outputs its number, and
// the report is their sum.
type countdown struct{}

func (countdown) Plan(ctx context.Context, params json.RawMessage, cursor string, emit func(json.RawMessage, string) error) error {
	var p struct{ From int }
	if err := json.Unmarshal(params, &p); err != nil {
		return baton.Permanent(err)
	}
	var start int
	if cursor != "" {
		if _, err := fmt.Sscan(cursor, &start); err != nil {
			return baton.Permanent(err)
		}
	}
	for i := start; i < p.From; i++ {
		if err := emit(json.RawMessage(fmt.Sprint(i)), fmt.Sprint(i+1)); err != nil {
			return err
		}
	}
	return nil
}

func (countdown) Process(ctx context.Context, p baton.Partition) (json.RawMessage, error) {
	return p.Payload, nil
}

func (countdown) Aggregate(ctx context.Context, run baton.RunInfo, results iter.Seq2[baton.Result, error]) (json.RawMessage, error) {
	sum := 0
	for r, err := range results {
		if err != nil {
			return nil, err
		}
		var n int
		if r.OK && json.Unmarshal(r.Output, &n) == nil {
			sum += n
		}
	}
	return json.Marshal(sum)
}

// An app registers its jobs, declares their schedules and hands over to Main.
func ExampleNew() {
	app := baton.New(baton.WithLogger(slog.New(slog.NewJSONHandler(os.Stdout, nil))))
	countdown := app.Register("countdown", countdown{})
	countdown.Schedule("nightly", "0 30 2 * * *")
	fmt.Println(app.Err())
	// Output: <nil>
}

// An app that has its own OpenTelemetry providers hands them to Baton: every run is then one
// trace (the decision to start it, its planning, each partition on whichever instance ran it,
// and its report), and the spans a job starts from Process's context nest under its
// partition's. The app flushes its providers itself. Without this option Baton exports by the
// standard OTEL_* settings (OTEL_EXPORTER_OTLP_ENDPOINT, ...), and is off when none is set.
func ExampleWithTelemetry() {
	ctx := context.Background()
	tp := sdktrace.NewTracerProvider() // with the app's exporter: sdktrace.WithBatcher(...)
	mp := sdkmetric.NewMeterProvider() // with the app's reader: sdkmetric.WithReader(...)
	defer func() { _ = errors.Join(tp.Shutdown(ctx), mp.Shutdown(ctx)) }()

	app := baton.New(baton.WithTelemetry(tp, mp))
	app.Register("countdown", countdown{}).Schedule("nightly", "0 30 2 * * *")
	fmt.Println(app.Err())
	// Output: <nil>
}

// A refused registration is kept as an error naming the job and the field; Err reports it and
// Main would refuse to start.
func ExampleApp_Register() {
	app := baton.New()
	app.Register("countdown", countdown{})
	app.Register("countdown", countdown{})

	err := app.Err()
	var re *baton.RegistrationError
	if errors.As(err, &re) {
		fmt.Println(re.Job, re.Field, errors.Is(err, baton.ErrDuplicateJob))
	}
	fmt.Println(err)
	// Output:
	// countdown name true
	// baton: job "countdown": name: job already registered
}

// Default params are checked at registration: here the JSON is not an object.
func ExampleWithDefaultParams() {
	app := baton.New()
	app.Register("countdown", countdown{}, baton.WithDefaultParams(`[10]`))
	fmt.Println(errors.Is(app.Err(), baton.ErrInvalidParams))
	ok := baton.New()
	ok.Register("countdown", countdown{}, baton.WithDefaultParams(map[string]int{"from": 10}))
	fmt.Println(ok.Err())
	// Output:
	// true
	// <nil>
}

// A job that calls a flaky dependency gets more tries, further apart: up to 8 tries, 30 s
// before the second, then 1, 2 and 4 min, and 5 min from there on. A policy out of range is
// refused at registration, naming the field.
func ExampleWithRetry() {
	app := baton.New()
	app.Register("countdown", countdown{}, baton.WithRetry(baton.RetryPolicy{
		Attempts:     8,
		InitialDelay: 30 * time.Second,
		MaxDelay:     5 * time.Minute,
	}))
	fmt.Println(app.Err())
	app.Register("eager", countdown{}, baton.WithRetry(baton.RetryPolicy{Attempts: 50}))
	var re *baton.RegistrationError
	fmt.Println(errors.As(app.Err(), &re), re.Field, errors.Is(app.Err(), baton.ErrInvalidRetry))
	// Output:
	// <nil>
	// true retry.Attempts true
}

// A job of many short partitions sends up to MaxBundle per message; a job of slow partitions
// fewer, so more instances share a run. A cap outside 1 to MaxBundle is refused.
func ExampleWithMaxBundle() {
	app := baton.New()
	app.Register("countdown", countdown{}, baton.WithMaxBundle(baton.MaxBundle))
	app.Register("slow", countdown{}, baton.WithMaxBundle(4))
	fmt.Println(app.Err())
	app.Register("huge", countdown{}, baton.WithMaxBundle(baton.MaxBundle+1))
	fmt.Println(errors.Is(app.Err(), baton.ErrInvalidBundle), app.Err())
	// Output:
	// <nil>
	// true baton: job "huge": bundle: invalid bundle size: 1025, want 1 to 1024
}

// A partition that calls a dependency which may hang gets a bound per try: past it, its context
// is cancelled and the try is retried under the job's retry policy.
func ExampleWithPartitionTimeout() {
	app := baton.New()
	app.Register("countdown", countdown{}, baton.WithPartitionTimeout(30*time.Second),
		baton.WithRetry(baton.RetryPolicy{Attempts: 3}))
	fmt.Println(app.Err())
	app.Register("forever", countdown{}, baton.WithPartitionTimeout(48*time.Hour))
	fmt.Println(errors.Is(app.Err(), baton.ErrInvalidTimeout))
	// Output:
	// <nil>
	// true
}

// A failure budget stops a run early once too many of its partitions have failed: here after
// 10 failures, or 5% of the partitions, whichever comes first; the nightly schedule's runs stop
// after 1% instead. BATON_FAILURE_BUDGETS overrides a job's budget without a rebuild.
func ExampleWithFailureBudget() {
	app := baton.New()
	h := app.Register("countdown", countdown{}, baton.WithFailureBudget(baton.FailureBudget{MaxFailed: 10, MaxPercent: 5}))
	h.Schedule("nightly", "0 30 2 * * *", baton.WithFailureBudget(baton.FailureBudget{MaxPercent: 1}))
	fmt.Println(app.Err())
	app.Register("sloppy", countdown{}, baton.WithFailureBudget(baton.FailureBudget{MaxPercent: 150}))
	fmt.Println(errors.Is(app.Err(), baton.ErrInvalidBudget))
	// Output:
	// <nil>
	// true
}

// A job whose runs must end well before the app's BATON_RUN_TIMEOUT gets a run timeout of its
// own: its runs are re-enqueued and timed out by it, every other job's by the setting.
func ExampleWithRunTimeout() {
	app := baton.New()
	app.Register("countdown", countdown{}, baton.WithRunTimeout(15*time.Minute))
	fmt.Println(app.Err())
	app.Register("week", countdown{}, baton.WithRunTimeout(7*24*time.Hour))
	var re *baton.RegistrationError
	fmt.Println(errors.As(app.Err(), &re), re.Field, errors.Is(app.Err(), baton.ErrInvalidTimeout))
	// Output:
	// <nil>
	// true runTimeout true
}

// A schedule whose runs keep failing (a dependency down, credentials expired) pauses itself
// after three in a row, instead of failing every night until someone looks; an operator
// resumes it once the cause is fixed.
func ExampleWithAutoPause() {
	app := baton.New()
	countdown := app.Register("countdown", countdown{})
	countdown.Schedule("nightly", "0 0 2 * * *", baton.WithAutoPause(3))
	fmt.Println(app.Err())
	countdown.Schedule("hourly", "0 0 * * * *", baton.WithAutoPause(0))
	var re *baton.RegistrationError
	fmt.Println(errors.As(app.Err(), &re), re.Field, errors.Is(app.Err(), baton.ErrInvalidSchedule))
	// Output:
	// <nil>
	// true autoPause true
}

// Main is the whole of a main function: it reads the settings, serves the Functions host and
// exits with a message naming what is wrong when it cannot start.
func ExampleApp_Main() {
	app := baton.New()
	app.Register("countdown", countdown{}).Schedule("nightly", "0 30 2 * * *")
	app.Main()
}

// Run is Main without the process: it returns instead of exiting. Here the settings are
// invalid, so it returns at once.
func ExampleApp_Run() {
	app := baton.New(baton.WithSettings(func(name string) string {
		if name == "BATON_RUN_TIMEOUT" {
			return "a week"
		}
		return ""
	}))
	app.Register("countdown", countdown{})
	err := app.Run(context.Background())
	fmt.Println(errors.Is(err, baton.ErrSettings))
	// Output: true
}

// Permanent marks an error that retrying cannot fix: the partition fails at once.
func ExamplePermanent() {
	err := baton.Permanent(errors.New("row 7: not a number"))
	fmt.Println(errors.Is(err, baton.ErrPermanent))
	// Output: true
}

// Err lists every refused registration at once.
func ExampleApp_Err() {
	app := baton.New()
	app.Register("Nightly", countdown{})
	app.Register("export", nil)
	fmt.Println(app.Err())
	// Output:
	// baton: job "Nightly": name: invalid name: want 1-63 characters of a-z, 0-9, '-' and '_', starting with a letter
	// baton: job "export": job: nil job
}

// A typed job: Go types for params, payloads, outputs and the report; Baton does the JSON and
// refuses unknown params.
func ExampleTypedJob() {
	type params struct {
		Words []string `json:"words"`
	}
	plan := func(ctx context.Context, p params, cursor string, emit func(word string, next string) error) error {
		start := 0
		if cursor != "" {
			fmt.Sscan(cursor, &start)
		}
		for i := start; i < len(p.Words); i++ {
			if err := emit(p.Words[i], fmt.Sprint(i+1)); err != nil {
				return err
			}
		}
		return nil
	}
	process := func(ctx context.Context, part baton.Part[params, string]) (int, error) {
		return len(part.Payload), nil
	}
	aggregate := func(ctx context.Context, run baton.RunOf[params], results iter.Seq2[baton.Outcome[int], error]) (int, error) {
		letters := 0
		for r, err := range results {
			if err != nil {
				return 0, err
			}
			letters += r.Output
		}
		return letters, nil
	}
	job := baton.TypedJob(plan, process, aggregate)

	fmt.Println(job.ValidateParams(json.RawMessage(`{"wrods":["a"]}`)))
	app := baton.New()
	app.Register("letters", job, baton.WithDefaultParams(`{"words":["baton"]}`))
	fmt.Println(app.Err())
	// Output:
	// params: json: unknown field "wrods"
	// <nil>
}

// WithMerge adds an associative merge of aggregates, so Baton folds results as they arrive.
func ExampleTyped_WithMerge() {
	type params struct{}
	job := baton.TypedJob(
		func(ctx context.Context, p params, cursor string, emit func(int, string) error) error {
			if cursor == "" {
				return emit(1, "done")
			}
			return nil
		},
		func(ctx context.Context, part baton.Part[params, int]) (int, error) { return part.Payload, nil },
		func(ctx context.Context, run baton.RunOf[params], results iter.Seq2[baton.Outcome[int], error]) (int, error) {
			sum := 0
			for r, err := range results {
				if err != nil {
					return 0, err
				}
				sum += r.Output
			}
			return sum, nil
		},
	).WithMerge(func(ctx context.Context, run baton.RunOf[params], parts []int) (int, error) {
		sum := 0
		for _, p := range parts {
			sum += p
		}
		return sum, nil
	})
	_, isMerger := job.(baton.Merger)
	fmt.Println(isMerger)
	// Output: true
}

// Schedules are declared on their job's handle: an expression, a time zone and policies, each
// a value. Baton fires them all on the app's heartbeat, exactly once per occurrence.
func ExampleJobHandle_Schedule() {
	app := baton.New()
	countdown := app.Register("countdown", countdown{})
	countdown.Schedule("nightly", "0 30 2 * * *",
		baton.InZone("Europe/Berlin"),                 // 02:30 Berlin time, summer and winter
		baton.WithParams(map[string]int{"from": 100}), // each run's params
		baton.WithOverlap(baton.OverlapBufferOne),     // one waits while a run is in progress
		baton.WithCatchUp(2*time.Hour),                // late by more: recorded missed
		baton.WithJitter(5*time.Minute),               // spread the starts of many apps
	)
	countdown.Schedule("hourly", "0 0 * * * *", baton.WithParams(`{"from":10}`))
	fmt.Println(app.Err())
	countdown.Schedule("weekly", "0 0 9 * 1")
	var re *baton.RegistrationError
	fmt.Println(errors.As(app.Err(), &re), re.Schedule, re.Field, errors.Is(app.Err(), baton.ErrInvalidSchedule))
	// Output:
	// <nil>
	// true weekly cron true
}

// A schedule follows the wall clock of its IANA time zone, across daylight-saving changes; a
// name that is not one is refused at declaration.
func ExampleInZone() {
	app := baton.New()
	countdown := app.Register("countdown", countdown{})
	countdown.Schedule("report", "0 0 9 * * MON", baton.InZone("Europe/Paris"))
	fmt.Println(app.Err())
	countdown.Schedule("report2", "0 0 9 * * MON", baton.InZone("Paris"))
	fmt.Println(errors.Is(app.Err(), baton.ErrInvalidSchedule))
	// Output:
	// <nil>
	// true
}

// When an operator cancels a run, or its failure budget is spent, the contexts of its partitions
// in flight are cancelled with ErrRunStopped as the cause; a Process can tell that apart from
// its own deadline.
func ExampleErrRunStopped() {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(baton.ErrRunStopped) // as Baton does when the run is stopped
	<-ctx.Done()
	fmt.Println(errors.Is(context.Cause(ctx), baton.ErrRunStopped))
	// Output: true
}

// Two jobs that call the same CRM share one limit: at most 4 of their partitions at once and
// 10 starts a second (5 at once), across every instance. A job declaring the limit otherwise
// is refused.
func ExampleWithLimit() {
	crm := baton.Limit{Name: "crm", MaxInFlight: 4, Rate: 10, Per: time.Second, Burst: 5}
	app := baton.New()
	app.Register("sync-contacts", countdown{}, baton.WithLimit(crm))
	app.Register("sync-deals", countdown{}, baton.WithLimit(crm))
	fmt.Println(app.Err())
	app.Register("sync-notes", countdown{}, baton.WithLimit(baton.Limit{Name: "crm", MaxInFlight: 8}))
	var re *baton.RegistrationError
	fmt.Println(errors.As(app.Err(), &re), re.Job, re.Field, errors.Is(app.Err(), baton.ErrInvalidLimit))
	// Output:
	// <nil>
	// true sync-notes limit true
}

// A job whose downstream answers 429 with Retry-After returns SlowDown: the partition is
// tried again after that long without spending a try, and its limit holds back every
// instance meanwhile.
func ExampleSlowDown() {
	err := baton.SlowDown(20*time.Second, errors.New("GET /contacts: 429 Too Many Requests"))
	fmt.Println(errors.Is(err, baton.ErrSlowDown))
	fmt.Println(err)
	// Output:
	// true
	// slow down for 20s: GET /contacts: 429 Too Many Requests
}
