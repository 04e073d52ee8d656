package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
)

// Starter starts manual runs (coordinator.Coordinator).
type Starter interface {
	StartManual(ctx context.Context, req coordinator.ManualRequest) (coordinator.Outcome, error)
}

// Scheduler runs the app's schedules (coordinator.Coordinator): what it fires, and what an
// operator does with one schedule.
type Scheduler interface {
	// Schedules returns every schedule the app declares, as the scheduler fires it.
	Schedules() []coordinator.Schedule
	// RunNow starts a run of the schedule through its overlap policy.
	RunNow(ctx context.Context, schedule, key string) (coordinator.Outcome, error)
	// Pause and Resume change the operator's pause, kept in the ledger.
	Pause(ctx context.Context, schedule, note, by string) (ledger.ScheduleState, error)
	Resume(ctx context.Context, schedule, by string) (ledger.ScheduleState, error)
}

// Ledger is the part of ledger.Store the API reads.
type Ledger interface {
	ReadManifest(ctx context.Context, run string) (ledger.Manifest, error)
	// ReadSchedule reads a schedule's state (ledger.ErrNotFound before its first heartbeat).
	ReadSchedule(ctx context.Context, name string) (ledger.ScheduleState, error)
	ReadReportBounded(ctx context.Context, run string, maxBytes int64) (ledger.Report, ledger.ReportRead, error)
	ListResults(ctx context.Context, run string, fn func(ledger.ResultRef) error) error
	DoneCount(ctx context.Context, run string, shard int) (int64, error)
	ListRuns(ctx context.Context, fn func(run string) bool) error
	ReadResult(ctx context.Context, run string, index int) (ledger.Result, error)
	ReadBlock(ctx context.Context, run string, s ledger.Span) (ledger.Block, error)
}

// LeaderReader reads the leadership without contending (election.Leader).
type LeaderReader interface {
	State(ctx context.Context) (election.LeaderState, error)
}

var (
	_ Starter      = (*coordinator.Coordinator)(nil)
	_ Scheduler    = (*coordinator.Coordinator)(nil)
	_ Ledger       = ledger.Store(nil)
	_ LeaderReader = (*election.Leader)(nil)
)

// Defaults and limits.
const (
	// DefaultBasePath is the host's HTTP route prefix (host.json extensions.http.routePrefix).
	DefaultBasePath = "/api"
	// DefaultKeyWait bounds how long a POST whose key's run is being created by another
	// request (which holds the lease) waits for that run's manifest before answering 409.
	DefaultKeyWait = 3 * time.Second
	// MaxBodyBytes bounds a POST body (413 beyond it).
	MaxBodyBytes = 64 << 10
	// MaxKeyLength bounds the Idempotency-Key header.
	MaxKeyLength = 200
	// DefaultLimit and MaxLimit bound a page of GET /api/runs.
	DefaultLimit = 20
	MaxLimit     = 100
	// ExactProgressLimit: unfinished runs with at most this many partitions are counted by
	// listing results/ (one listing call per 5,000 results); larger ones from the done shards.
	ExactProgressLimit = 5000
	// MaxReportBytes: a report up to this size is returned whole; a larger one is summarised.
	MaxReportBytes = 64 << 10
	// MaxReportReadBytes: a report larger than this is not even downloaded; the summary
	// then comes from the manifest.
	MaxReportReadBytes = 8 << 20
	// SummaryFailures is the number of failed partitions a report summary lists.
	SummaryFailures = 10
	// MaxScanReads bounds the manifests one filtered page of GET /api/runs reads from storage
	// (final runs this instance has read before cost nothing); past it the page ends early
	// with a continuation.
	MaxScanReads = 200
	// MaxWorkerReads bounds the results a run's detail reads to show who worked on it: every
	// partition up to this many, an even sample beyond.
	MaxWorkerReads = 100
	// MaxFailureReads bounds the failed partitions whose result a run's detail reads (for
	// the attempts and the worker).
	MaxFailureReads = 20
	// readConcurrency bounds the storage reads one request has in flight.
	readConcurrency = 32
)

// Config wires an API.
type Config struct {
	// Starter starts manual runs; nil answers POST with 503.
	Starter Starter
	Ledger  Ledger
	Leader  LeaderReader
	// BasePath prefixes Location headers (default DefaultBasePath).
	BasePath string
	// KeyWait: see DefaultKeyWait. Negative: do not wait.
	KeyWait time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger is used when a Request carries none (default: discarded).
	Logger *slog.Logger
	// Scheduler serves /api/schedules; nil answers it with 503.
	Scheduler Scheduler
	// Operator serves POST /api/runs/{id}/cancel and /redrive; nil answers them with 503.
	Operator Operator
	// Heartbeat is the longest gap between two heartbeats (BATON_HEARTBEAT): an occurrence
	// younger than it plus OccurrenceGrace may not be decided yet (default DefaultHeartbeat).
	Heartbeat time.Duration
	// TraceURL is the address of a run's trace in a trace UI, TraceURLPlaceholder standing for
	// the trace ID (BATON_TRACE_URL); empty: runs link to no trace.
	TraceURL string
	// DeadLetters are the queues whose dead letters GET /api/leader counts (the work and
	// control queues); none: the reply lists none.
	DeadLetters []DeadLetterCounter
	// LimitStates serves /api/limits over Limits, the limits the app declares; nil answers it
	// with 503.
	LimitStates LimitStates
	Limits      []DeclaredLimit
}

// TraceURLPlaceholder stands for a run's trace ID in Config.TraceURL.
const TraceURLPlaceholder = "{trace}"

// API serves the endpoints. It is safe for concurrent use.
type API struct {
	cfg         Config
	created     *createdCache
	final       *finalCache
	done        *doneCache
	absent      *absentCache
	zones       zoneCache
	deadLetters deadLetterCache
}

// New validates cfg and returns an API.
func New(cfg Config) (*API, error) {
	if cfg.Ledger == nil || cfg.Leader == nil {
		return nil, errors.New("api config: Ledger and Leader are required")
	}
	if cfg.BasePath == "" {
		cfg.BasePath = DefaultBasePath
	}
	cfg.BasePath = "/" + strings.Trim(cfg.BasePath, "/")
	if cfg.KeyWait == 0 {
		cfg.KeyWait = DefaultKeyWait
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	return &API{cfg: cfg, created: newCreatedCache(), final: newFinalCache(), done: newDoneCache(), absent: newAbsentCache()}, nil
}

// Request is one HTTP request as the host describes it.
type Request struct {
	Method string
	// ID is the run of runs/{id} and Action the action of runs/{id}/{action} ("cancel"); ""
	// when absent. Runs takes both from Path when ID is "".
	ID     string
	Action string
	// Path is the route parameter {*path}: what follows "schedules/" ("nightly",
	// "nightly/pause") or "runs/" ("manual-1f2e", "manual-1f2e/cancel"); "" when absent.
	Path string
	// Query holds the query parameters (a repeated key arrives joined with commas).
	Query map[string]string
	// Headers as the host sends them: each name with its values.
	Headers map[string][]string
	// Body is the request body; nil when there was none.
	Body []byte
	// Logger carries the invocation's attributes (default Config.Logger).
	Logger *slog.Logger
}

// headerValues returns every value of a header, matched case-insensitively.
func (r Request) headerValues(name string) []string {
	var out []string
	for k, v := range r.Headers {
		if strings.EqualFold(k, name) {
			out = append(out, v...)
		}
	}
	return out
}

func (a *API) logger(r Request) *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return a.cfg.Logger
}

// Reply is the answer: a status, headers, and either a JSON value or raw bytes with a
// content type.
type Reply struct {
	Status      int
	Headers     map[string]string
	JSON        any
	Raw         []byte
	ContentType string
}

// ErrorBody is every error reply's JSON: {"error": {"code", "message"}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail names an error with a stable code and a human message.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error codes.
const (
	CodeBadRequest          = "bad_request"
	CodeInvalidRunID        = "invalid_run_id"
	CodeInvalidLimit        = "invalid_limit"
	CodeInvalidContinuation = "invalid_continuation"
	CodeInvalidState        = "invalid_state"
	CodeInvalidTrigger      = "invalid_trigger"
	CodeInvalidOccurrences  = "invalid_occurrences"
	CodeInvalidSchedule     = "invalid_schedule"
	CodeInvalidKey          = "invalid_idempotency_key"
	CodeKeyReused           = "idempotency_key_reused"
	CodeTooManyRuns         = "too_many_manual_runs"
	CodeNotFound            = "not_found"
	CodeMethodNotAllowed    = "method_not_allowed"
	CodeTooLarge            = "payload_too_large"
	CodeConflict            = "conflict"
	CodeUnavailable         = "unavailable"
	CodeSchedulerBusy       = "scheduler_busy"
	CodeStorage             = "storage_unavailable"
	CodeTimeout             = "timeout"
	CodeInternal            = "internal_error"
)

func errorReply(status int, code, message string) Reply {
	return Reply{Status: status, JSON: ErrorBody{Error: ErrorDetail{Code: code, Message: message}}}
}

// ManualRunsRetryAfter is the Retry-After of a 429 (too_many_manual_runs): a hint, since a
// slot frees when any manual run in progress ends.
const ManualRunsRetryAfter = 30 * time.Second

// refusedStart answers a manual run the coordinator refused for a reason of its own, and ok
// false for any other error: 422 when its Idempotency-Key names another request's run, 429
// with Retry-After when the manual runs in progress fill a cap.
func refusedStart(err error) (Reply, bool) {
	switch {
	case errors.Is(err, coordinator.ErrKeyReused):
		return errorReply(http.StatusUnprocessableEntity, CodeKeyReused, err.Error()), true
	case errors.Is(err, coordinator.ErrTooManyRuns):
		r := errorReply(http.StatusTooManyRequests, CodeTooManyRuns, err.Error())
		r.Headers = map[string]string{"Retry-After": fmt.Sprint(int(ManualRunsRetryAfter.Seconds()))}
		return r, true
	}
	return Reply{}, false
}

func methodNotAllowed(allow ...string) Reply {
	r := errorReply(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "use "+strings.Join(allow, " or "))
	r.Headers = map[string]string{"Allow": strings.Join(allow, ", ")}
	return r
}

// storageError answers a failed call: 504 when the invocation ran out of time, 502 when storage
// could not be reached (ledger.ErrUnavailable), 500 for anything else. The full error goes to
// the log only (it can be long and name the account).
func (a *API) storageError(r Request, what string, err error) Reply {
	a.logger(r).Error(what, "err", err)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return errorReply(http.StatusGatewayTimeout, CodeTimeout, fmt.Sprintf("%s: timed out", what))
	case errors.Is(err, ledger.ErrUnavailable):
		return errorReply(http.StatusBadGateway, CodeStorage, fmt.Sprintf("%s: storage is unavailable; see the handler log", what))
	}
	return errorReply(http.StatusInternalServerError, CodeInternal, fmt.Sprintf("%s failed; see the handler log", what))
}

func jsonReply(status int, v any) Reply { return Reply{Status: status, JSON: v} }
