package soak

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/lib/ncrontab"
	"github.com/batonfn/baton/internal/tools/devhost"
)

// History is everything the checker reads about one soak.
type History struct {
	// Schedules are the app's schedules as it declared them.
	Schedules []Schedule
	// Heartbeat is the period of the Tick timer (BATON_HEARTBEAT): how long a due occurrence
	// may wait for a heartbeat to decide it.
	Heartbeat time.Duration
	// LeaseDuration is BATON_LEASE_DURATION; Slack is added to the final bound (default
	// DefaultSlack).
	LeaseDuration time.Duration
	Slack         time.Duration
	// RunTimeout and CheckRounds are BATON_RUN_TIMEOUT and BATON_CHECK_ROUNDS: when a planned
	// run's re-enqueue rounds come due (zero RunTimeout: the rounds are not checked).
	RunTimeout  time.Duration
	CheckRounds int
	// Started is when the host was started: no schedule existed before, so no occurrence before
	// it may have a record.
	Started time.Time
	// First is, per schedule, its cursor as first read from the ledger (runs/_schedules/<name>):
	// every occurrence after it must have a record. A schedule without one is checked from
	// Started.
	First map[string]time.Time
	// WindowEnd bounds the occurrences that must have a record: the last heartbeat less one
	// heartbeat and a margin (those after it may not have been decided yet). Records of later
	// occurrences are checked like the others.
	WindowEnd time.Time
	// Pauses are the pauses the driver made, per schedule, in time order.
	Pauses []Pause
	// Fires are the heartbeats the host fired, in order; one fired on no instance (none was
	// running) has no Instances.
	Fires []devhost.TimerFire
	// Runs is the ledger as read at End, by run ID.
	Runs map[string]Run
	// Lines are the handler log lines the host kept.
	Lines []devhost.LogLine
	// Lease are samples of the scheduler lease blob (each differs from the previous one).
	Lease []LeaseSample
	// RunLeases are the runs' lease blobs (leases/runs/<run>) as read at End, by lease name.
	RunLeases map[string]LeaseSample
	// Manual are the POST /api/runs calls the driver made.
	Manual []ManualCall
	// Cancels and Redrives are the cancels and redrives the driver made.
	Cancels  []Cancel
	Redrives []RedriveCall
	// Faults are the faults the driver injected.
	Faults []Fault
	// End is when the ledger was read.
	End time.Time
}

// Schedule is one of the app's schedules as the checker needs it.
type Schedule struct {
	Name    string
	Job     string
	Cron    coordinator.Cron
	Overlap config.Overlap
	// CatchUp is how late an occurrence may still start; a later one is recorded missed.
	CatchUp time.Duration
	// Jitter is the longest delay of a run's start after its occurrence.
	Jitter time.Duration
	// Limited says the job runs under a limit: a deadline that finds a run of it progressing
	// moves a run timeout on instead of spending a re-enqueue round (for every run of the job).
	Limited bool
}

// UTC is an NCRONTAB expression evaluated in UTC, as a coordinator.Cron.
func UTC(expr string) (coordinator.Cron, error) {
	e, err := ncrontab.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("cron %q: %w", expr, err)
	}
	return utcCron{e}, nil
}

type utcCron struct{ e ncrontab.Expr }

func (c utcCron) Next(t time.Time) (time.Time, bool) { return c.e.Next(t, time.UTC) }
func (c utcCron) Prev(t time.Time) (time.Time, bool) { return c.e.Prev(t, time.UTC) }
func (c utcCron) String() string                     { return c.e.String() }

// Pause is one pause of a schedule through its ledger state (what the API's pause writes), and
// the resume that ended it.
type Pause struct {
	Schedule string
	Note     string
	// From is when the pause was written (the write sent), FromDone when storage confirmed it.
	From, FromDone time.Time
	// To and ToDone are the same for the resume; zero To: paused to the end.
	To, ToDone time.Time
}

// Run is one run's records in the ledger.
type Run struct {
	Manifest ledger.Manifest
	// Indexes is the results/ listing, in listing order.
	Indexes []int
	// InBlocks counts the listed results recorded in their span's block (the rest are their own).
	InBlocks int
	// Results are the results read back, by index.
	Results map[int]ledger.Result
	// Report is report.json, nil when there is none.
	Report *ledger.Report
	// Rounds are the run's redrive rounds (Manifest.Redrives), in order.
	Rounds []Round
}

// Round is one redrive round of a run as the ledger holds it (ledger.RoundRun).
type Round struct {
	Round int
	// Indexes is the round's results listing; Results its results by index.
	Indexes []int
	Results map[int]ledger.Result
	// Report is the round's report, nil when there is none.
	Report *ledger.Report
}

// LeaseSample is one read of a lease blob.
type LeaseSample struct {
	At     time.Time
	Held   bool
	Epoch  int64
	Holder string // app/instance/pid
}

// ManualCall is one POST /api/runs as the driver saw it.
type ManualCall struct {
	At time.Time
	// Key is the Idempotency-Key ("" for none); Body the request body ("" runs the settings'
	// schedule now).
	Key  string
	Body string
	// Status is the HTTP status (0 when the call itself failed: no answer); Run the run ID in
	// a 2xx reply.
	Status int
	Run    string
	Err    string
}

// Fault kinds.
const (
	FaultKillLeader = "kill-leader"     // kill -9 of the instance that just took a lease, created or began planning a run
	FaultKillOther  = "kill-other"      // kill -9 of an instance that does not hold the scheduler lease
	FaultPause      = "pause-leader"    // SIGSTOP of the instance that just took a lease, SIGCONT past the lease
	FaultTerm       = "term"            // SIGTERM of an instance (graceful: it releases its leases)
	FaultAzurite    = "azurite-restart" // storage down for a few seconds, back with its data
	FaultPoison     = "poison"          // a manual run with a partition that always fails
)

// Delivery fault kinds: the local host's delivery faults (devhost.FaultKind) on the control
// queue, and on the work queue for lost partitions.
const (
	// FaultControlLost: a control message (a check) accepted by the queue and never delivered.
	FaultControlLost = "control-lost"
	// FaultAnswerLost: a receive of a control message that took effect while its answer was
	// lost: the message is back only after the host's message lease (Storage queue, 10 minutes)
	// or the lock (Service Bus), its delivery spent.
	FaultAnswerLost = "control-answer-lost"
	// FaultCheckCrash: the instance handling a check crashes (handler killed, nothing it held
	// settled): the check, and whatever else it held, is back only when its lease or lock lapses.
	FaultCheckCrash = "check-crash"
	// FaultBlackout: every control message of one run is lost, from its start check on (start,
	// slices, lease probes, handover and deadline checks): only the heartbeat moves the run.
	FaultBlackout = "control-blackout"
	// FaultWorkLost: a partition message accepted by the work queue and never delivered.
	FaultWorkLost = "work-lost"
)

// FaultKinds lists the process, storage and poison fault kinds the driver injects, one at a
// time; DeliveryFaultKinds the delivery faults, injected beside them.
var (
	FaultKinds         = []string{FaultKillLeader, FaultKillOther, FaultPause, FaultTerm, FaultAzurite, FaultPoison}
	DeliveryFaultKinds = []string{FaultControlLost, FaultAnswerLost, FaultCheckCrash, FaultBlackout, FaultWorkLost}
)

// FaultStall is a fault seen, not injected: a heartbeat that failed because storage did not
// answer in time (see StorageStalls). Storage that other tests share, or a loaded machine,
// stalls without the driver's doing, and a stalled heartbeat decides nothing.
const FaultStall = "storage-stall"

// StorageStalls are the heartbeats the handlers' logs show failed by storage: a Tick
// invocation that failed with status 504 (it ran out of time waiting for storage), with a
// transient storage failure (the lease lock's words for a call storage did not answer) or with
// ledger.ErrUnavailable. Each is a FaultStall from the invocation's start to its failure.
func StorageStalls(lines []devhost.LogLine) []Fault {
	var out []Fault
	for _, l := range lines {
		if l.Msg != "invocation failed" || l.Str("function") != "Tick" {
			continue
		}
		err := l.Str("err")
		if l.Int("status") != http.StatusGatewayTimeout && !strings.Contains(err, "transient storage failure") &&
			!strings.Contains(err, ledger.ErrUnavailable.Error()) {
			continue
		}
		out = append(out, Fault{At: l.Time.Add(-time.Duration(l.Int("ms")) * time.Millisecond), Until: l.Time, Kind: FaultStall,
			Instance: l.Instance, PID: l.PID, Note: err})
	}
	return out
}

// Fault is one fault: injected by the driver, or a storage stall seen in the logs (FaultStall).
type Fault struct {
	At   time.Time
	Kind string
	// Instance and PID name the process hit (empty for Azurite and poison).
	Instance string
	PID      int
	// Until is when a pause or an outage ended.
	Until time.Time
	// Run is the run whose message a delivery fault hit.
	Run string
	// Note says what happened (e.g. "no leader seen; hit instance-3").
	Note string
}

// Effect is the span in which f may hold up the scheduler: a killed or stopped process may have
// held the scheduler lease (it lapses a lease duration after its last renewal), a SIGSTOPped
// one until then or its SIGCONT, storage until it is back and the leases it lost or kept have
// lapsed. Each ends one heartbeat later, when the next heartbeat decides. A poison run and a
// lost or delayed message hold up nothing (a crash is a kill).
func (f Fault) Effect(lease, heartbeat time.Duration) (from, to time.Time) {
	until := f.Until
	if until.Before(f.At) {
		until = f.At
	}
	switch f.Kind {
	case FaultPoison, FaultControlLost, FaultAnswerLost, FaultBlackout, FaultWorkLost:
		return f.At, f.At
	case FaultPause:
		end := f.At.Add(lease)
		if until.After(end) {
			end = until
		}
		return f.At, end.Add(heartbeat)
	case FaultAzurite, FaultStall:
		return f.At, until.Add(lease + heartbeat)
	}
	return f.At, f.At.Add(lease + heartbeat)
}
