package soak

import (
	"time"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
)

// CheckMargin is the coordinator's delay beyond the lease duration for a check message: a
// check is due lease + CheckMargin after it is scheduled.
const CheckMargin = config.CheckMargin

// DefaultSlack is what the checker adds to a run's bound for its own sake (log and storage
// timestamps, a busy machine).
const DefaultSlack = 30 * time.Second

// DefaultDelayMargin is how long after a heartbeat's period an occurrence's record may still
// appear without a fault to explain it (History.Heartbeat + this): a heartbeat's storage calls
// on a loaded machine, and the timer's skew.
const DefaultDelayMargin = 5 * time.Second

// DecisionMargin is how long after a heartbeat's period an occurrence may still be decided
// without a fault to explain it. It is wider than DefaultDelayMargin because it bounds a whole
// heartbeat, not one reading of the state: a heartbeat that decides every schedule makes
// several storage calls per schedule, and on a loaded 2-core machine (make test runs packages
// side by side while five instances and Azurite share it) one heartbeat took 7.9 s and the
// next 5.5 s, one of its sends alone 5.6 s (the storage client's three backed-off retries).
// That a long planning slice never holds up another schedule is proven without timing, in the
// coordinator's tests; this bound catches a scheduler that stops deciding, not a slow one.
const DecisionMargin = 15 * time.Second

// FinalBound is the latest time a run whose manifest has no hard deadline (written before
// Manifest.Expires existed) may still be non-final: its deadline, plus the lease duration (a
// leader that died holding the lease), plus two check delays (lease + CheckMargin each: the
// check that finds the run overdue and the one that finishes it).
func FinalBound(deadline time.Time, lease time.Duration) time.Time {
	return deadline.Add(lease + 2*(lease+CheckMargin))
}

// DocumentedBound is coordinator.Coordinator.FinalBound, the bound docs/design.md promises: a
// run is final by its hard deadline (Manifest.Expires) plus one check delay (lease +
// CheckMargin) while checks flow, plus one lease for a report claim whose aggregator died. A
// manifest without Expires falls back to FinalBound of its deadline. (The checker computes it
// from the manifest alone; a test holds it to the coordinator's.) A stopped run's bound is its
// stop's (stoppedBound).
func DocumentedBound(m ledger.Manifest, lease time.Duration) time.Time {
	if m.Stop != nil {
		return stoppedBound(m, lease)
	}
	if m.Expires.IsZero() {
		return FinalBound(m.Deadline, lease)
	}
	return m.Expires.Add(2*lease + CheckMargin)
}
