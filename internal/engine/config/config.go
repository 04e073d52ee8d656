// Package config reads Baton's settings once, from the environment the Functions host passes to
// the custom handler (app settings in Azure, local.settings.json Values locally), and validates
// them. Every error names the setting, the value it saw and what is allowed; Load reports all of
// them at once.
//
// Connections follow the Functions conventions so that one set of app settings serves both the
// host's triggers and Baton's own SDK clients: a connection NAME is either a connection string
// in the setting NAME, or identity-based settings NAME__blobServiceUri, NAME__queueServiceUri,
// NAME__fullyQualifiedNamespace, NAME__credential and NAME__clientId.
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/batonfn/baton/internal/engine/limit"
	"github.com/batonfn/baton/internal/lib/strictjson"
)

// Setting names. The Bicep app settings, local.settings.example.json and the README table use
// exactly these names; the config contract test (infra) and the README test (internal/readme)
// keep them in step.
const (
	SettingPort        = "FUNCTIONS_CUSTOMHANDLER_PORT"
	SettingLegacyPort  = "FUNCTIONS_HTTPWORKER_PORT"
	SettingAppRoot     = "FUNCTIONS_APP_ROOT_PATH"
	SettingHostStorage = "AzureWebJobsStorage"
	SettingStorage     = "BATON_STORAGE"
	SettingServiceBus  = "ServiceBusConnection"
	SettingTransport   = "BATON_TRANSPORT"
	SettingSchedule    = "BATON_SCHEDULE"
	SettingHeartbeat   = "BATON_HEARTBEAT"
	SettingSchedules   = "BATON_SCHEDULES"
	// SettingFailureBudgets overrides jobs' failure budgets: a JSON object of job names, each
	// {"maxFailed": n, "maxPercent": p} (0 or absent: no bound of that kind).
	SettingFailureBudgets = "BATON_FAILURE_BUDGETS"
	// SettingLimits overrides named limits' settings: a JSON object of limit names, each
	// {"maxInFlight": n, "rate": r, "per": "1s", "burst": b} (replacing the declared settings).
	SettingLimits         = "BATON_LIMITS"
	SettingWorkQueue      = "BATON_WORK_QUEUE"
	SettingControlQueue   = "BATON_CONTROL_QUEUE"
	SettingJob            = "BATON_JOB"
	SettingJobParams      = "BATON_JOB_PARAMS"
	SettingManualJobs     = "BATON_MANUAL_JOBS"
	SettingMaxManual      = "BATON_MAX_MANUAL_RUNS"
	SettingMaxManualJob   = "BATON_MAX_MANUAL_RUNS_PER_JOB"
	SettingSyntheticMax   = "BATON_SYNTHETIC_MAX_PARTITIONS"
	SettingSyntheticWork  = "BATON_SYNTHETIC_MAX_WORK_MS"
	SettingSyntheticBytes = "BATON_SYNTHETIC_MAX_PAYLOAD_BYTES"
	SettingInventory      = "BATON_INVENTORY_STORAGE"
	SettingLeaseContainer = "BATON_LEASE_CONTAINER"
	SettingRunsContainer  = "BATON_RUNS_CONTAINER"
	SettingLeaseName      = "BATON_LEASE_NAME"
	SettingLeaseDuration  = "BATON_LEASE_DURATION"
	SettingStallTimeout   = "BATON_STALL_TIMEOUT"
	SettingOverlap        = "BATON_OVERLAP"
	// SettingMisfire and SettingStartDeadline are read by no version since schedules have
	// catch-up windows; Load refuses them, naming what replaces them.
	SettingMisfire       = "BATON_MISFIRE"
	SettingStartDeadline = "BATON_STARTING_DEADLINE"
	SettingMaxDeliveries = "BATON_MAX_DELIVERIES"
	SettingRunTimeout    = "BATON_RUN_TIMEOUT"
	SettingCheckRounds   = "BATON_CHECK_ROUNDS"
	SettingEnqueueBatch  = "BATON_ENQUEUE_BATCH"
	SettingBatchSpread   = "BATON_BATCH_SPREAD"
	SettingSliceBudget   = "BATON_SLICE_BUDGET"
	SettingMaxBacklog    = "BATON_MAX_BACKLOG"
	SettingLogLevel      = "BATON_LOG_LEVEL"
	// SettingTraceURL is the address of a run's trace in a trace UI, {trace} standing for the
	// trace ID: the dashboard's run page links to it.
	SettingTraceURL        = "BATON_TRACE_URL"
	SettingRetention       = "BATON_RETENTION"
	SettingInstanceID      = "BATON_INSTANCE_ID"
	SettingSiteName        = "WEBSITE_SITE_NAME"
	SettingWebsiteInstance = "WEBSITE_INSTANCE_ID"
)

// Defaults for settings that may be left unset.
const (
	DefaultPort            = 8080
	DefaultTransport       = TransportServiceBus
	DefaultWorkQueue       = "baton-work"
	DefaultControlQueue    = "baton-control"
	DefaultJob             = "synthetic"
	DefaultLeaseContainer  = "leases"
	DefaultRunsContainer   = "runs"
	DefaultLeaseName       = "baton-leader"
	DefaultLeaseDuration   = 30 * time.Second
	DefaultStallTimeout    = 2 * time.Minute
	DefaultOverlap         = OverlapSkip
	DefaultMaxDeliveries   = 5
	DefaultRunTimeout      = time.Hour
	DefaultCheckRounds     = 3
	DefaultEnqueueBatch    = 2048
	DefaultBatchSpread     = 8
	DefaultMaxBacklog      = 50000
	DefaultFunctionTimeout = 30 * time.Minute
	// DefaultCatchUp is a schedule's catch-up window unless it sets one: how late a due
	// occurrence may still start.
	DefaultCatchUp = 10 * time.Minute
	// DefaultSyntheticMax and DefaultSyntheticWorkMs are the synthetic job's own limits (a
	// million partitions of up to ten minutes): a load generator locally. Deployments cap both.
	DefaultSyntheticMax    = 1_000_000
	DefaultSyntheticWorkMs = 600_000
	// DefaultSyntheticPayloadBytes caps a synthetic run's payloads (partitions × payloadBytes)
	// at 16 MiB, locally and deployed: far below a Service Bus queue's 1 GiB.
	DefaultSyntheticPayloadBytes = 16 << 20
	// MaxSyntheticPayloadBytes is the highest BATON_SYNTHETIC_MAX_PAYLOAD_BYTES: the job's
	// own limits (a million partitions of at most 48 KiB) allow no more.
	MaxSyntheticPayloadBytes = DefaultSyntheticMax * (48 << 10)
	// DefaultMaxManualRuns and DefaultMaxManualRunsPerJob cap the manual runs (ad-hoc runs and
	// runs now) in progress at once, in the app and of one job: room for a rerun and a few
	// backfill slices, while at most that many manual runs' checks and partitions can queue
	// ahead of a schedule's occurrence. MaxManualRuns bounds both settings.
	DefaultMaxManualRuns       = 10
	DefaultMaxManualRunsPerJob = 3
	MaxManualRuns              = 1000
)

// AllJobs, as BATON_MANUAL_JOBS, lets a manual run start every registered job.
const AllJobs = "*"

// DefaultJobParams are the timer job's params when BATON_JOB is the default job (synthetic) and
// BATON_JOB_PARAMS is unset or {} (what the Bicep deploys when no params are given): a small run
// that needs no input (16 partitions of 200 ms each), so a fresh deployment's first occurrence
// really runs. Any other job gets no default params.
const DefaultJobParams = `{"partitions":16,"workMs":200}`

// Limits enforced by Load.
const (
	MinLeaseDuration = 15 * time.Second // Azure Blob leases are 15–60 s (or infinite, never used)
	MaxLeaseDuration = 60 * time.Second
	MaxEnqueueBatch  = 5000
	MaxBatchSpread   = 64
	// MaxStallTimeout bounds BATON_STALL_TIMEOUT when functionTimeout is unbounded; otherwise
	// the stall timeout must be shorter than the invocation timeout.
	MaxStallTimeout = time.Hour
	// MaxRunTimeout is the Service Bus work queue's message time to live (infra: P1D): a
	// partition still queued when the run times out must still be there to be counted missing
	// and re-enqueued, not dead-lettered by expiry first.
	MaxRunTimeout = 24 * time.Hour
	// MaxRunHorizon bounds how long a run may stay open: BATON_RUN_TIMEOUT plus
	// BATON_CHECK_ROUNDS re-enqueue rounds (see RunHorizon). Every run reaches a final state
	// within a week of being planned.
	MaxRunHorizon = 7 * 24 * time.Hour
	// CheckMargin is how long after a lease could have expired a check message is scheduled
	// (the coordinator's spacing of re-enqueue rounds is max(BATON_RUN_TIMEOUT/2, lease+margin)).
	CheckMargin = 5 * time.Second
	// MaxJitter bounds a schedule's jitter.
	MaxJitter = time.Hour
	// MaxAutoPause bounds a schedule's auto-pause threshold: the failed or timed-out runs in
	// a row after which it pauses itself.
	MaxAutoPause = 100
)

// Transport names the queue service that carries partition and check messages.
type Transport string

const (
	// TransportServiceBus sends to a Service Bus queue (production).
	TransportServiceBus Transport = "servicebus"
	// TransportQueue sends to an Azure Storage queue (local runs with only Azurite).
	TransportQueue Transport = "queue"
)

// Overlap decides what a schedule does with an occurrence (or a run now) that comes while its
// latest run is still in progress.
type Overlap string

const (
	// OverlapSkip records the occurrence skipped, naming the run in progress (a run now gets
	// 409).
	OverlapSkip Overlap = "skip"
	// OverlapBufferOne queues the occurrence and starts it once the run in progress ends;
	// while one is queued, later occurrences are skipped.
	OverlapBufferOne Overlap = "buffer-one"
	// OverlapAllow starts the occurrence beside the run in progress.
	OverlapAllow Overlap = "allow"
)

// Valid reports whether o is one of the policies.
func (o Overlap) Valid() bool { return o == OverlapSkip || o == OverlapBufferOne || o == OverlapAllow }

// Config is the handler's whole configuration, read once at start-up.
type Config struct {
	// Port is the loopback port the host told the handler to listen on.
	Port int
	// AppRoot is the function app's root folder (host.json lives there).
	AppRoot string
	// Storage is the account holding the leases and runs containers (and the work queue when
	// Transport is queue): BATON_STORAGE names the connection, default AzureWebJobsStorage.
	Storage StorageConnection
	// ServiceBus is the ServiceBusConnection; required when Transport is servicebus.
	ServiceBus ServiceBusConnection
	// Transport selects the sender for partition and check messages.
	Transport Transport
	// Heartbeat is the NCRONTAB expression of the Tick timer (BATON_HEARTBEAT): on each
	// heartbeat the scheduler decides every schedule's due occurrences.
	Heartbeat string
	// Schedule is the NCRONTAB expression of the schedule the settings declare, named "tick",
	// of Job with JobParams (BATON_SCHEDULE); "" declares none.
	Schedule string
	// Overrides change declared schedules without a rebuild (BATON_SCHEDULES), by name.
	Overrides map[string]ScheduleOverride
	// Budgets are the failure budgets BATON_FAILURE_BUDGETS gives jobs, by job name; they win
	// over the budgets the code gives jobs and schedules.
	Budgets map[string]Budget
	// Limits are the settings BATON_LIMITS gives named limits, by name, validated and with
	// their defaults filled in; they win over the settings the code declares.
	Limits map[string]limit.Spec
	// WorkQueue is the queue name on either transport.
	WorkQueue string
	// ControlQueue carries check messages (the Control and ControlQueue functions), so they
	// never wait behind the partition backlog; it must differ from WorkQueue.
	ControlQueue string
	// Job is the registered job of the settings' schedule and of a manual run that names none;
	// JobParams its JSON parameters.
	Job       string
	JobParams string
	// ManualJobs lists the jobs a manual run naming a "job" (POST /api/runs) may start besides
	// the jobs of the app's schedules, which always may (BATON_MANUAL_JOBS, comma-separated;
	// empty: those alone). ManualAll is BATON_MANUAL_JOBS=* (AllJobs): every registered job.
	// Whether each listed name is a registered job is checked where the jobs are known.
	ManualJobs []string
	ManualAll  bool
	// MaxManualRuns and MaxManualRunsPerJob cap the manual runs in progress, in the app and of
	// one job (BATON_MAX_MANUAL_RUNS, BATON_MAX_MANUAL_RUNS_PER_JOB; 1 to MaxManualRuns): a
	// manual run beyond either is refused until one ends.
	MaxManualRuns       int
	MaxManualRunsPerJob int
	// SyntheticMax and SyntheticWorkMs cap the synthetic job's partitions and per-partition
	// work (BATON_SYNTHETIC_MAX_PARTITIONS, BATON_SYNTHETIC_MAX_WORK_MS), and
	// SyntheticPayloadBytes its partitions × payloadBytes (BATON_SYNTHETIC_MAX_PAYLOAD_BYTES),
	// for every run of it; defaults DefaultSyntheticMax, DefaultSyntheticWorkMs and
	// DefaultSyntheticPayloadBytes.
	SyntheticMax          int
	SyntheticWorkMs       int
	SyntheticPayloadBytes int
	// Inventory is the storage account the inventory job reads (BATON_INVENTORY_STORAGE names
	// the connection). Unset, it is Storage when that is a connection string (local runs on
	// Azurite), else nil: in Azure the job reads only an account the operator names, never the
	// host's storage through the app's identity.
	Inventory *StorageConnection
	// LeaseContainer, RunsContainer and LeaseName place the lease blob and the run ledger.
	LeaseContainer string
	RunsContainer  string
	LeaseName      string
	// LeaseDuration is the blob lease duration, 15–60 s. Renewals run every third of it.
	LeaseDuration time.Duration
	// StallTimeout stops a leader whose task reported no progress for this long; it must be
	// longer than one renew interval.
	StallTimeout time.Duration
	// Overlap is the settings' schedule's policy when its latest run is still in progress
	// (BATON_OVERLAP).
	Overlap Overlap
	// MaxDeliveries is the number of deliveries a message gets before it is dead-lettered or
	// poisoned; it must match host.json extensions.queues.maxDequeueCount and the Service Bus
	// queue's max delivery count.
	MaxDeliveries int
	// RunTimeout is how long after planning a run may take before its missing partitions are
	// re-enqueued and finally marked failed.
	RunTimeout time.Duration
	// SliceBudget is how long one invocation may plan a run before it checkpoints and hands
	// the rest to a follow-up invocation (a control message), so no step of a run is bounded
	// by one invocation. 0 (unset) means half the invocation timeout.
	SliceBudget time.Duration
	// MaxBacklog bounds the partitions enqueued but not yet done: the leader feeds a large run
	// to the queue in waves (0: the whole run at once).
	MaxBacklog int
	// CheckRounds bounds the re-enqueue rounds of the check message.
	CheckRounds int
	// EnqueueBatch is the number of partitions sent and checkpointed together.
	EnqueueBatch int
	// BatchSpread is the fewest messages a plan batch of at least that many partitions goes
	// out as (fewer for a job whose cap is above the default's), so it spreads over instances.
	BatchSpread int
	// FunctionTimeout is host.json's functionTimeout; each invocation gets a deadline a little
	// under it.
	FunctionTimeout time.Duration
	// Retention is how long final runs are kept, by final state (BATON_RETENTION; default
	// DefaultRetention): the heartbeat's retention sweep deletes older ones.
	Retention Retention
	// LogLevel is the minimum slog level.
	LogLevel slog.Level
	// AppName and InstanceID name this process (with its PID) in leadership records and logs:
	// WEBSITE_SITE_NAME (else "local") and BATON_INSTANCE_ID, else WEBSITE_INSTANCE_ID, else
	// the host name.
	AppName    string
	InstanceID string
	// TraceURL is BATON_TRACE_URL: an http(s) address with {trace} in it, or empty.
	TraceURL string
}

// Getenv reads one setting; os.Getenv in production, a map in tests.
type Getenv func(string) string

// Load reads and validates every setting. All problems are reported together, each naming
// its setting.
func Load(getenv Getenv) (Config, error) {
	p := &parser{get: getenv}
	c := Config{
		Port:            p.port(),
		AppRoot:         p.str(SettingAppRoot, "."),
		Transport:       Transport(strings.ToLower(p.str(SettingTransport, string(DefaultTransport)))),
		Heartbeat:       strings.TrimSpace(getenv(SettingHeartbeat)),
		Schedule:        strings.TrimSpace(getenv(SettingSchedule)),
		WorkQueue:       p.str(SettingWorkQueue, DefaultWorkQueue),
		ControlQueue:    p.str(SettingControlQueue, DefaultControlQueue),
		Job:             p.str(SettingJob, DefaultJob),
		JobParams:       strings.TrimSpace(getenv(SettingJobParams)),
		LeaseContainer:  p.str(SettingLeaseContainer, DefaultLeaseContainer),
		RunsContainer:   p.str(SettingRunsContainer, DefaultRunsContainer),
		LeaseName:       p.str(SettingLeaseName, DefaultLeaseName),
		LeaseDuration:   p.duration(SettingLeaseDuration, DefaultLeaseDuration),
		StallTimeout:    p.duration(SettingStallTimeout, DefaultStallTimeout),
		Overlap:         Overlap(strings.ToLower(p.str(SettingOverlap, string(DefaultOverlap)))),
		MaxDeliveries:   p.integer(SettingMaxDeliveries, DefaultMaxDeliveries, 1, 100),
		RunTimeout:      p.duration(SettingRunTimeout, DefaultRunTimeout),
		CheckRounds:     p.integer(SettingCheckRounds, DefaultCheckRounds, 0, 20),
		EnqueueBatch:    p.integer(SettingEnqueueBatch, DefaultEnqueueBatch, 1, MaxEnqueueBatch),
		BatchSpread:     p.integer(SettingBatchSpread, DefaultBatchSpread, 1, MaxBatchSpread),
		SliceBudget:     p.duration(SettingSliceBudget, 0),
		MaxBacklog:      p.integer(SettingMaxBacklog, DefaultMaxBacklog, 0, 10_000_000),
		ManualJobs:      p.list(SettingManualJobs),
		MaxManualRuns:   p.integer(SettingMaxManual, DefaultMaxManualRuns, 1, MaxManualRuns),
		SyntheticMax:    p.integer(SettingSyntheticMax, DefaultSyntheticMax, 1, DefaultSyntheticMax),
		SyntheticWorkMs: p.integer(SettingSyntheticWork, DefaultSyntheticWorkMs, 0, DefaultSyntheticWorkMs),
		LogLevel:        p.level(),
		Retention:       p.retention(),
	}
	c.SyntheticPayloadBytes = p.integer(SettingSyntheticBytes, DefaultSyntheticPayloadBytes, 1, MaxSyntheticPayloadBytes)
	c.MaxManualRunsPerJob = p.integer(SettingMaxManualJob, DefaultMaxManualRunsPerJob, 1, MaxManualRuns)
	if slices.Contains(c.ManualJobs, AllJobs) {
		if len(c.ManualJobs) > 1 {
			p.errf("%s=%q: %q allows every job and stands alone: list job names, or give %q only",
				SettingManualJobs, strings.Join(c.ManualJobs, ","), AllJobs, AllJobs)
		}
		c.ManualJobs, c.ManualAll = nil, true
	}
	c.AppName, c.InstanceID = identity(getenv)
	c.TraceURL = p.traceURL()
	if (c.JobParams == "" || c.JobParams == "{}") && c.Job == DefaultJob {
		c.JobParams = DefaultJobParams
	}

	storageName := p.str(SettingStorage, SettingHostStorage)
	storage, err := ParseStorageConnection(storageName, getenv)
	p.add(err)
	c.Storage = storage
	if name := p.str(SettingInventory, ""); name != "" {
		inv, err := ParseStorageConnection(name, getenv)
		p.add(err)
		c.Inventory = &inv
	} else if storage.ConnectionString != "" {
		c.Inventory = &storage
	}

	switch c.Transport {
	case TransportServiceBus:
		sb, err := ParseServiceBusConnection(SettingServiceBus, getenv)
		p.add(err)
		c.ServiceBus = sb
	case TransportQueue:
		if c.Storage.QueueServiceURL == "" && c.Storage.ConnectionString == "" {
			p.errf("%s=queue needs a queue endpoint: set %s (a connection string) or %s__queueServiceUri",
				SettingTransport, storageName, storageName)
		}
	default:
		p.errf("%s=%q is not a transport: use %q or %q", SettingTransport, c.Transport, TransportServiceBus, TransportQueue)
	}

	if !c.Overlap.Valid() {
		p.errf("%s=%q is not a policy: use %q, %q or %q", SettingOverlap, c.Overlap, OverlapSkip, OverlapBufferOne, OverlapAllow)
	}
	for _, gone := range []string{SettingMisfire, SettingStartDeadline} {
		if v := strings.TrimSpace(getenv(gone)); v != "" {
			p.errf("%s=%q is no longer read: each schedule has a catch-up window instead (how late a due occurrence may still start; older ones are recorded missed), for the settings' schedule %s={\"tick\":{\"catchUp\":\"10m\"}}; remove %s",
				gone, v, SettingSchedules, gone)
		}
	}
	c.Overrides = p.overrides()
	c.Budgets = p.budgets()
	c.Limits = p.limits()
	switch {
	case c.LeaseDuration < MinLeaseDuration || c.LeaseDuration > MaxLeaseDuration:
		p.errf("%s=%s is out of range: Azure Blob leases last 15s to 60s", SettingLeaseDuration, c.LeaseDuration)
	case c.LeaseDuration%time.Second != 0:
		p.errf("%s=%s is not a whole number of seconds: Azure Blob leases are acquired in whole seconds (15s to 60s)",
			SettingLeaseDuration, c.LeaseDuration)
	}
	if c.StallTimeout <= c.LeaseDuration/3 {
		p.errf("%s=%s must be longer than the renew interval (%s = a third of %s)",
			SettingStallTimeout, c.StallTimeout, c.LeaseDuration/3, SettingLeaseDuration)
	}
	if c.RunTimeout < time.Minute {
		p.errf("%s=%s is too short: a run needs at least 1m before its missing partitions are retried", SettingRunTimeout, c.RunTimeout)
	}
	if c.RunTimeout > MaxRunTimeout {
		p.errf("%s=%s is too long: at most %s, the work queue's message time to live, so a partition still queued at the timeout has not expired",
			SettingRunTimeout, c.RunTimeout, MaxRunTimeout)
	}
	if h := c.RunHorizon(); c.RunTimeout <= MaxRunTimeout && h > MaxRunHorizon {
		p.errf("%s=%s with %s=%d keeps a run open up to %s (the timeout plus %d re-enqueue rounds %s apart): at most %s; lower one of them",
			SettingRunTimeout, c.RunTimeout, SettingCheckRounds, c.CheckRounds, h, c.CheckRounds, c.retryInterval(), MaxRunHorizon)
	}
	for _, n := range []struct{ setting, value string }{
		{SettingLeaseContainer, c.LeaseContainer}, {SettingRunsContainer, c.RunsContainer},
	} {
		if err := ValidateContainerName(n.value); err != nil {
			p.errf("%s=%q: %v", n.setting, n.value, err)
		}
	}
	if err := ValidateQueueName(c.WorkQueue); err != nil {
		p.errf("%s=%q: %v", SettingWorkQueue, c.WorkQueue, err)
	}
	if err := ValidateQueueName(c.ControlQueue); err != nil {
		p.errf("%s=%q: %v", SettingControlQueue, c.ControlQueue, err)
	} else if strings.EqualFold(c.ControlQueue, c.WorkQueue) {
		p.errf("%s=%q: must differ from %s (checks must not wait behind the partition backlog)", SettingControlQueue, c.ControlQueue, SettingWorkQueue)
	}
	if err := ValidateBlobName(c.LeaseName); err != nil {
		p.errf("%s=%q: %v", SettingLeaseName, c.LeaseName, err)
	}

	host, err := ReadHostJSON(c.AppRoot)
	switch {
	case errors.Is(err, os.ErrNotExist):
		c.FunctionTimeout = DefaultFunctionTimeout
	case err != nil:
		p.add(err)
	default:
		c.FunctionTimeout = host.FunctionTimeout
		if c.Transport == TransportServiceBus && host.FunctionTimeout > 0 && host.MaxAutoLockRenewal < host.FunctionTimeout {
			p.errf("host.json extensions.serviceBus.maxAutoLockRenewalDuration=%s is shorter than functionTimeout=%s: a Work invocation that runs longer would lose its message lock and the message would be delivered again while it still runs",
				host.MaxAutoLockRenewal, host.FunctionTimeout)
		}
		if host.MaxDequeueCount != 0 && host.MaxDequeueCount != c.MaxDeliveries {
			p.errf("%s=%d does not match host.json extensions.queues.maxDequeueCount=%d: they must be equal so the last delivery records a failure",
				SettingMaxDeliveries, c.MaxDeliveries, host.MaxDequeueCount)
		}
	}
	if c.Heartbeat == "" {
		p.errf("%s is not set: the Tick function's timer reads it; set it to \"0 * * * * *\" (every minute, the default cadence at which schedules are decided)", SettingHeartbeat)
	}
	if c.FunctionTimeout > 0 && c.FunctionTimeout < 30*time.Second {
		p.errf("host.json functionTimeout=%s is too short for Baton: use at least 00:00:30", c.FunctionTimeout)
	}
	switch it := c.InvocationTimeout(); {
	case c.SliceBudget < 0 || (it > 0 && c.SliceBudget >= it):
		p.errf("%s=%s must be positive and shorter than the invocation timeout (%s)", SettingSliceBudget, c.SliceBudget, it)
	case c.SliceBudget == 0 && it > 0:
		c.SliceBudget = it / 2
	case c.SliceBudget == 0:
		c.SliceBudget = DefaultFunctionTimeout / 2
	}
	switch it := c.InvocationTimeout(); {
	case it > 0 && c.StallTimeout >= it:
		p.errf("%s=%s must be shorter than the invocation timeout (%s: host.json functionTimeout=%s less a margin), or the host kills a stalled leader's invocation before Baton notices",
			SettingStallTimeout, c.StallTimeout, it, c.FunctionTimeout)
	case it == 0 && c.StallTimeout > MaxStallTimeout:
		p.errf("%s=%s is too long: at most %s", SettingStallTimeout, c.StallTimeout, MaxStallTimeout)
	}
	return c, p.err()
}

// RunHorizon is the longest a run stays open after planning: BATON_RUN_TIMEOUT, then
// BATON_CHECK_ROUNDS re-enqueue rounds one retry interval apart, then the final check that
// records the still-missing partitions as failed.
func (c Config) RunHorizon() time.Duration { return c.RunHorizonOf(c.RunTimeout) }

// RunHorizonOf is RunHorizon for a run whose own timeout is rt (a job's WithRunTimeout).
func (c Config) RunHorizonOf(rt time.Duration) time.Duration {
	return rt + time.Duration(c.CheckRounds)*c.retryIntervalOf(rt)
}

// retryInterval mirrors the coordinator's spacing of check rounds.
func (c Config) retryInterval() time.Duration { return c.retryIntervalOf(c.RunTimeout) }

func (c Config) retryIntervalOf(rt time.Duration) time.Duration {
	return max(rt/2, c.LeaseDuration+CheckMargin)
}

// InvocationTimeout is the deadline Baton gives each invocation: functionTimeout less a margin,
// so a slow call fails cleanly before the host restarts the handler process.
func (c Config) InvocationTimeout() time.Duration {
	if c.FunctionTimeout <= 0 {
		return 0 // unbounded
	}
	margin := c.FunctionTimeout / 10
	margin = min(max(margin, 5*time.Second), time.Minute)
	return c.FunctionTimeout - margin
}

func identity(getenv Getenv) (app, instance string) {
	app = getenv(SettingSiteName)
	if app == "" {
		app = "local"
	}
	inst := getenv(SettingInstanceID)
	if inst == "" {
		inst = getenv(SettingWebsiteInstance)
	}
	if inst == "" {
		inst, _ = os.Hostname()
	}
	if len(inst) > 64 {
		inst = inst[:64]
	}
	return app, inst
}

type parser struct {
	get  Getenv
	errs []error
}

func (p *parser) add(err error) {
	if err != nil {
		p.errs = append(p.errs, err)
	}
}

func (p *parser) errf(format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf(format, args...))
}

func (p *parser) err() error { return errors.Join(p.errs...) }

// traceURL reads BATON_TRACE_URL: empty, or an http(s) URL holding {trace}.
func (p *parser) traceURL() string {
	v := strings.TrimSpace(p.get(SettingTraceURL))
	if v == "" {
		return ""
	}
	u, err := url.Parse(strings.ReplaceAll(v, "{trace}", "0"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || !strings.Contains(v, "{trace}") {
		p.errf("%s=%q: want an http or https address with {trace} where the trace ID goes (e.g. http://localhost:16686/trace/{trace})",
			SettingTraceURL, v)
		return ""
	}
	return v
}

func (p *parser) str(name, def string) string {
	if v := strings.TrimSpace(p.get(name)); v != "" {
		return v
	}
	return def
}

func (p *parser) port() int {
	name := SettingPort
	v := strings.TrimSpace(p.get(name))
	if v == "" {
		name = SettingLegacyPort
		v = strings.TrimSpace(p.get(name))
	}
	if v == "" {
		return DefaultPort
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 65535 {
		p.errf("%s=%q is not a TCP port (1-65535)", name, v)
		return 0
	}
	return n
}

// duration accepts Go durations ("30s", "2m") and the host's "hh:mm:ss".
func (p *parser) duration(name string, def time.Duration) time.Duration {
	v := strings.TrimSpace(p.get(name))
	if v == "" {
		return def
	}
	d, err := ParseDuration(v)
	if err != nil || d <= 0 {
		p.errf("%s=%q is not a positive duration: use e.g. 30s, 5m or 00:05:00", name, v)
		return def
	}
	return d
}

// list reads a comma-separated list, dropping empty items.
func (p *parser) list(name string) []string {
	var out []string
	for _, s := range strings.Split(p.get(name), ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func (p *parser) integer(name string, def, lo, hi int) int {
	v := strings.TrimSpace(p.get(name))
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		p.errf("%s=%q is not an integer from %d to %d", name, v, lo, hi)
		return def
	}
	return n
}

func (p *parser) level() slog.Level {
	v := strings.TrimSpace(p.get(SettingLogLevel))
	if v == "" {
		return slog.LevelInfo
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(v)); err != nil {
		p.errf("%s=%q is not a level: use debug, info, warn or error", SettingLogLevel, v)
		return slog.LevelInfo
	}
	return l
}

// ParseDuration accepts a Go duration ("90s") or the host's TimeSpan form ("hh:mm:ss", "-1"
// meaning unbounded, returned as 0).
func ParseDuration(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if v == "-1" {
		return 0, nil
	}
	if d, err := time.ParseDuration(v); err == nil {
		return d, nil
	}
	parts := strings.Split(v, ":")
	if len(parts) != 3 {
		return 0, fmt.Errorf("duration %q: want e.g. 30s or hh:mm:ss", v)
	}
	days := 0
	hh := parts[0]
	if d, h, ok := strings.Cut(hh, "."); ok { // d.hh:mm:ss
		n, err := strconv.Atoi(d)
		if err != nil {
			return 0, fmt.Errorf("duration %q: bad days", v)
		}
		days, hh = n, h
	}
	h, err1 := strconv.Atoi(hh)
	m, err2 := strconv.Atoi(parts[1])
	s, err3 := strconv.ParseFloat(parts[2], 64)
	if err1 != nil || err2 != nil || err3 != nil || h < 0 || m < 0 || m > 59 || s < 0 || s >= 60 {
		return 0, fmt.Errorf("duration %q: want hh:mm:ss", v)
	}
	return time.Duration(days)*24*time.Hour + time.Duration(h)*time.Hour + time.Duration(m)*time.Minute +
		time.Duration(s*float64(time.Second)), nil
}

// ScheduleOverride is one schedule's entry in BATON_SCHEDULES: what the app settings change of
// a schedule the app declares, without a rebuild. Empty fields change nothing.
type ScheduleOverride struct {
	// Cron replaces the NCRONTAB expression; TimeZone the IANA time zone.
	Cron, TimeZone string
	// Paused, when set, pauses (true) or keeps running (false) the schedule by configuration.
	Paused *bool
	// Overlap replaces the overlap policy.
	Overlap Overlap
	// CatchUp and Jitter replace the catch-up window and the jitter (nil: unchanged).
	CatchUp, Jitter *time.Duration
	// AutoPause replaces the auto-pause threshold (0 turns it off; nil: unchanged).
	AutoPause *int
}

// overrides reads BATON_SCHEDULES: a JSON object from schedule name to an object with any of
// cron, timeZone, paused, overlap, catchUp, jitter and autoPause. Whether each name is a schedule the app
// declares, and whether cron and timeZone parse, is checked where the schedules are known.
// Budget is a job's failure budget as BATON_FAILURE_BUDGETS gives it.
type Budget struct {
	MaxFailed  int     `json:"maxFailed"`
	MaxPercent float64 `json:"maxPercent"`
}

// budgets parses BATON_FAILURE_BUDGETS strictly: an object of job names, each with maxFailed
// (0 or more) and maxPercent (0 to 100).
func (p *parser) budgets() map[string]Budget {
	v := strings.TrimSpace(p.get(SettingFailureBudgets))
	if v == "" {
		return nil
	}
	var raw map[string]json.RawMessage
	if err := strictjson.Decode([]byte(v), &raw); err != nil {
		p.errf(`%s is not a JSON object of job names, e.g. {"sync-crm":{"maxFailed":10,"maxPercent":5}}: %v`, SettingFailureBudgets, err)
		return nil
	}
	out := map[string]Budget{}
	for job, body := range raw {
		var b Budget
		if err := strictjson.Decode(body, &b); err != nil {
			p.errf("%s: job %q: %v (the fields are maxFailed and maxPercent)", SettingFailureBudgets, job, err)
			continue
		}
		if b.MaxFailed < 0 || b.MaxPercent < 0 || b.MaxPercent > 100 {
			p.errf("%s: job %q: maxFailed %d, maxPercent %v: want maxFailed 0 or more and maxPercent 0 to 100 (0: no bound)",
				SettingFailureBudgets, job, b.MaxFailed, b.MaxPercent)
			continue
		}
		out[job] = b
	}
	return out
}

// limits parses BATON_LIMITS strictly: an object of limit names, each with maxInFlight, rate,
// per (a duration) and burst, valid as limit.Spec.Normalize checks them.
func (p *parser) limits() map[string]limit.Spec {
	v := strings.TrimSpace(p.get(SettingLimits))
	if v == "" {
		return nil
	}
	var raw map[string]json.RawMessage
	if err := strictjson.Decode([]byte(v), &raw); err != nil {
		p.errf(`%s is not a JSON object of limit names, e.g. {"crm":{"maxInFlight":4,"rate":10,"per":"1s","burst":5}}: %v`, SettingLimits, err)
		return nil
	}
	out := map[string]limit.Spec{}
	for name, body := range raw {
		var l struct {
			MaxInFlight int    `json:"maxInFlight"`
			Rate        int    `json:"rate"`
			Per         string `json:"per"`
			Burst       int    `json:"burst"`
		}
		if err := strictjson.Decode(body, &l); err != nil {
			p.errf("%s: limit %q: %v (the fields are maxInFlight, rate, per and burst)", SettingLimits, name, err)
			continue
		}
		spec := limit.Spec{Name: name, MaxInFlight: l.MaxInFlight, Rate: l.Rate, Burst: l.Burst}
		if l.Per != "" {
			d, err := time.ParseDuration(l.Per)
			if err != nil {
				p.errf("%s: limit %q: per %q is not a duration such as \"1s\" or \"1m\"", SettingLimits, name, l.Per)
				continue
			}
			spec.Per = d
		}
		spec, err := spec.Normalize()
		if err != nil {
			p.errf("%s: limit %q: %v", SettingLimits, name, err)
			continue
		}
		out[name] = spec
	}
	return out
}

func (p *parser) overrides() map[string]ScheduleOverride {
	v := strings.TrimSpace(p.get(SettingSchedules))
	if v == "" {
		return nil
	}
	// Decoded strictly: encoding/json would keep the last of a repeated key, so
	// {"tick":{"paused":true},"tick":{"paused":false}} would silently unpause tick.
	var raw map[string]json.RawMessage
	if err := strictjson.Decode([]byte(v), &raw); err != nil {
		var ke *strictjson.KeyError
		switch {
		case errors.As(err, &ke) && len(ke.Path) == 0:
			p.errf("%s: schedule %q is given twice", SettingSchedules, ke.Key)
		case errors.As(err, &ke):
			p.errf("%s: schedule %q: %v", SettingSchedules, ke.Path[0], &strictjson.KeyError{Path: ke.Path[1:], Key: ke.Key, Field: ke.Field})
		default:
			p.errf(`%s is not a JSON object of schedule names, e.g. {"nightly":{"cron":"0 0 3 * * *","timeZone":"Europe/Berlin","paused":true}}: %v`, SettingSchedules, err)
		}
		return nil
	}
	out := map[string]ScheduleOverride{}
	for name, body := range raw {
		var o struct {
			Cron     *string `json:"cron"`
			TimeZone *string `json:"timeZone"`
			Paused   *bool   `json:"paused"`
			Overlap  *string `json:"overlap"`
			CatchUp  *string `json:"catchUp"`
			Jitter   *string `json:"jitter"`
			// AutoPause is a number of runs: 0 turns auto-pause off.
			AutoPause *int `json:"autoPause"`
		}
		// Strict too: a field in another case ({"PAUSED":true}) is refused, not taken.
		if err := strictjson.Decode(body, &o); err != nil {
			p.errf("%s: schedule %q: %v (the fields are cron, timeZone, paused, overlap, catchUp, jitter and autoPause)", SettingSchedules, name, err)
			continue
		}
		var so ScheduleOverride
		if o.Cron != nil {
			so.Cron = strings.TrimSpace(*o.Cron)
			if so.Cron == "" {
				p.errf("%s: schedule %q: cron is empty", SettingSchedules, name)
			}
		}
		if o.TimeZone != nil {
			so.TimeZone = strings.TrimSpace(*o.TimeZone)
		}
		so.Paused = o.Paused
		if o.AutoPause != nil && (*o.AutoPause < 0 || *o.AutoPause > MaxAutoPause) {
			p.errf("%s: schedule %q: autoPause %d is out of range: use 1 to %d runs, or 0 to turn it off", SettingSchedules, name, *o.AutoPause, MaxAutoPause)
		} else {
			so.AutoPause = o.AutoPause
		}
		if o.Overlap != nil {
			so.Overlap = Overlap(strings.ToLower(strings.TrimSpace(*o.Overlap)))
			if !so.Overlap.Valid() {
				p.errf("%s: schedule %q: overlap %q is not a policy: use %q, %q or %q", SettingSchedules, name, *o.Overlap, OverlapSkip, OverlapBufferOne, OverlapAllow)
			}
		}
		for _, d := range []struct {
			field string
			v     *string
			to    **time.Duration
			zero  bool
		}{{"catchUp", o.CatchUp, &so.CatchUp, false}, {"jitter", o.Jitter, &so.Jitter, true}} {
			if d.v == nil {
				continue
			}
			dur, err := ParseDuration(*d.v)
			if err != nil || dur < 0 || dur == 0 && !d.zero {
				p.errf("%s: schedule %q: %s %q is not a positive duration: use e.g. 30s, 10m or 00:10:00", SettingSchedules, name, d.field, *d.v)
				continue
			}
			*d.to = &dur
		}
		out[name] = so
	}
	return out
}
