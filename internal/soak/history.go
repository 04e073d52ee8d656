package soak

import (
	"time"

	"github.com/batonfn/baton/coordinator"
	"github.com/batonfn/baton/internal/devhost"
	"github.com/batonfn/baton/ledger"
)

// History is everything the checker reads about one soak.
type History struct {
	// Schedule is the timer's schedule (BATON_SCHEDULE).
	Schedule coordinator.Schedule
	// LeaseDuration is BATON_LEASE_DURATION; Slack is added to FinalBound (default
	// DefaultSlack).
	LeaseDuration time.Duration
	Slack         time.Duration
	// Fires are the timer occurrences the host fired, in order; an occurrence fired on no
	// instance (none was running) has no Instances.
	Fires []devhost.TimerFire
	// Runs is the ledger as read at End, by run ID.
	Runs map[string]Run
	// Lines are the handler log lines the host kept.
	Lines []devhost.LogLine
	// Lease are samples of the lease blob (each differs from the previous one).
	Lease []LeaseSample
	// Manual are the POST /api/runs calls the driver made.
	Manual []ManualCall
	// Faults are the faults the driver injected.
	Faults []Fault
	// End is when the ledger was read.
	End time.Time
}

// Run is one run's records in the ledger.
type Run struct {
	Manifest ledger.Manifest
	// Indexes is the results/ listing, in listing order.
	Indexes []int
	// Results are the results read back, by index.
	Results map[int]ledger.Result
	// Report is report.json, nil when there is none.
	Report *ledger.Report
}

// LeaseSample is one read of the lease blob.
type LeaseSample struct {
	At     time.Time
	Held   bool
	Epoch  int64
	Holder string // app/instance/pid
}

// ManualCall is one POST /api/runs as the driver saw it.
type ManualCall struct {
	At time.Time
	// Key is the Idempotency-Key ("" for none); Body the request body.
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
	FaultKillLeader = "kill-leader"     // kill -9 of the instance that just took the lease
	FaultKillOther  = "kill-other"      // kill -9 of an instance that does not hold the lease
	FaultPause      = "pause-leader"    // SIGSTOP of the instance that just took the lease, SIGCONT past the lease
	FaultTerm       = "term"            // SIGTERM of an instance (graceful: it releases its lease)
	FaultAzurite    = "azurite-restart" // storage down for a few seconds, back with its data
	FaultPoison     = "poison"          // a manual run with a partition that always fails
)

// FaultKinds lists every fault kind.
var FaultKinds = []string{FaultKillLeader, FaultKillOther, FaultPause, FaultTerm, FaultAzurite, FaultPoison}

// Fault is one injected fault.
type Fault struct {
	At   time.Time
	Kind string
	// Instance and PID name the process hit (empty for Azurite and poison).
	Instance string
	PID      int
	// Until is when a pause or an outage ended.
	Until time.Time
	// Note says what happened (e.g. "no leader seen; hit instance-3").
	Note string
}
