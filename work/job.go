package work

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"sort"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/limit"
)

// Job is one kind of partitioned work.
type Job interface {
	// Plan streams the run's partitions in order, starting after cursor ("" starts at the
	// beginning). For each partition it calls emit with the partition's payload (a JSON value,
	// at most MaxPayloadBytes) and the cursor that resumes planning right after it. Planning
	// the same params from the same cursor must yield the same partitions while the input is
	// unchanged. An error from emit must be returned as is.
	Plan(ctx context.Context, params json.RawMessage, cursor string, emit func(payload json.RawMessage, next string) error) error
	// Process does the work of one partition and returns its output (a JSON value). It may run
	// more than once for the same partition. Wrap errors that retrying cannot fix with
	// Permanent so the partition is recorded as failed at once.
	Process(ctx context.Context, p Partition) (json.RawMessage, error)
	// Aggregate combines the results of a run into the report's aggregate. It runs once per
	// run, after every partition has a result (some may be recorded failures).
	Aggregate(ctx context.Context, run RunInfo, results iter.Seq2[ledger.Result, error]) (json.RawMessage, error)
}

// ParamsValidator is implemented by jobs that can check parameters up front, so a manual run
// with bad parameters is refused with 400 instead of failing during planning.
type ParamsValidator interface {
	ValidateParams(params json.RawMessage) error
}

// Partition is one unit of work handed to Job.Process.
type Partition struct {
	Run   string
	Index int
	Epoch int64
	// Attempt counts the times this partition reached Process, 1 for the first: the tries of
	// its job's RetryPolicy plus the host's redeliveries of the current try.
	Attempt int
	Params  json.RawMessage
	Payload json.RawMessage
}

// RunInfo describes the run being aggregated.
type RunInfo struct {
	Run        string
	Job        string
	Params     json.RawMessage
	Partitions int
}

// ErrPermanent marks a job error that retrying cannot fix.
var ErrPermanent = errors.New("permanent failure")

// Permanent wraps err so that errors.Is(err, ErrPermanent) holds.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrPermanent, err)
}

// ErrUnknownJob is returned by Registry.Lookup.
var ErrUnknownJob = errors.New("unknown job")

// Registry maps job names to jobs. Build it once at start-up; it is read-only afterwards.
type Registry struct {
	jobs    map[string]Job
	retry   map[string]RetryPolicy
	bundle  map[string]int
	timeout map[string]time.Duration
	budget  map[string]budgetEntry
	runTime map[string]time.Duration
	limits  map[string]limit.Spec
}

// budgetEntry is a job's failure budget and whether a setting pinned it.
type budgetEntry struct {
	b      ledger.Budget
	pinned bool
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{jobs: map[string]Job{}, retry: map[string]RetryPolicy{}, bundle: map[string]int{},
		timeout: map[string]time.Duration{}, budget: map[string]budgetEntry{}, runTime: map[string]time.Duration{}, limits: map[string]limit.Spec{}}
}

// SetLimit puts the named job's partitions under a limit (spec normalized), shared with every
// job that names the same one.
func (r *Registry) SetLimit(name string, spec limit.Spec) { r.limits[name] = spec }

// Limit is the named job's limit, if it has one.
func (r *Registry) Limit(name string) (limit.Spec, bool) {
	s, ok := r.limits[name]
	return s, ok
}

// SetRunTimeout gives the named job's runs their own run timeout, in place of the app's
// (BATON_RUN_TIMEOUT); 0 restores the app's. The coordinator records it in each new run.
func (r *Registry) SetRunTimeout(name string, d time.Duration) { r.runTime[name] = d }

// RunTimeout is the named job's own run timeout (0: the app's).
func (r *Registry) RunTimeout(name string) time.Duration { return r.runTime[name] }

// SetPartitionTimeout bounds each try of the named job's partitions (0: no bound but the
// invocation's deadline); see Worker.
func (r *Registry) SetPartitionTimeout(name string, d time.Duration) { r.timeout[name] = d }

// PartitionTimeout is the named job's bound on one try of a partition (0: none).
func (r *Registry) PartitionTimeout(name string) time.Duration { return r.timeout[name] }

// SetFailureBudget gives the named job a failure budget; pinned marks one from a setting,
// which a schedule's own budget does not override (FailureBudget).
func (r *Registry) SetFailureBudget(name string, b ledger.Budget, pinned bool) {
	r.budget[name] = budgetEntry{b, pinned}
}

// FailureBudget is the budget of a run of the named job: the setting's when pinned, else the
// schedule's (when not nil), else the job's; nil when it has none.
func (r *Registry) FailureBudget(name string, schedule *ledger.Budget) *ledger.Budget {
	e, ok := r.budget[name]
	var b ledger.Budget
	switch {
	case ok && e.pinned:
		b = e.b
	case schedule != nil:
		b = *schedule
	case ok:
		b = e.b
	}
	if b.IsZero() {
		return nil
	}
	return &b
}

// SetMaxBundle caps how many partitions of the named job one message carries, 1 to MaxBundle
// (1: one partition per message; above DefaultMaxBundle a plan batch spreads over fewer
// messages, see BundleSize).
func (r *Registry) SetMaxBundle(name string, n int) { r.bundle[name] = n }

// MaxBundle is the named job's cap on partitions per message (DefaultMaxBundle unless set).
func (r *Registry) MaxBundle(name string) int {
	if n, ok := r.bundle[name]; ok {
		return n
	}
	return DefaultMaxBundle
}

// SetRetry gives the named job a retry policy (validate it first: see RetryPolicy.Validate).
func (r *Registry) SetRetry(name string, p RetryPolicy) { r.retry[name] = p }

// Retry is the named job's retry policy with its defaults filled in (DefaultRetryPolicy when
// none was set).
func (r *Registry) Retry(name string) RetryPolicy { return r.retry[name].withDefaults() }

// Register adds a job under name; registering a name twice panics (a wiring bug).
func (r *Registry) Register(name string, j Job) {
	if _, dup := r.jobs[name]; dup {
		panic("work: job registered twice: " + name)
	}
	r.jobs[name] = j
}

// Lookup returns the named job or an error wrapping ErrUnknownJob that lists the known ones.
func (r *Registry) Lookup(name string) (Job, error) {
	if j, ok := r.jobs[name]; ok {
		return j, nil
	}
	return nil, fmt.Errorf("%w %q: registered jobs are %v", ErrUnknownJob, name, r.Names())
}

// Names lists the registered job names, sorted.
func (r *Registry) Names() []string {
	names := make([]string, 0, len(r.jobs))
	for n := range r.jobs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ValidateParams checks params for the named job: it must be a JSON object (or empty), and
// the job's own ParamsValidator, when it has one, must accept it.
func (r *Registry) ValidateParams(name string, params json.RawMessage) error {
	j, err := r.Lookup(name)
	if err != nil {
		return err
	}
	if len(params) > 0 {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(params, &obj); err != nil {
			return fmt.Errorf("job %s: params must be a JSON object: %w", name, err)
		}
	}
	if v, ok := j.(ParamsValidator); ok {
		if err := v.ValidateParams(params); err != nil {
			return fmt.Errorf("job %s: %w", name, err)
		}
	}
	return nil
}
