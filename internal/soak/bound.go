package soak

import "time"

// CheckMargin is the coordinator's delay beyond the lease duration for a check message: a
// check is due lease + CheckMargin after it is scheduled.
const CheckMargin = 5 * time.Second

// DefaultSlack is what the checker adds to FinalBound for its own sake (log and storage
// timestamps, a busy machine).
const DefaultSlack = 30 * time.Second

// FinalBound is the latest time a run with this deadline may still be non-final: the deadline,
// plus the lease duration (a leader that died holding the lease), plus two check delays
// (lease + CheckMargin each: the check that finds the run overdue and the one that finishes
// it). It is the one place the documented bound is computed, so it can be tightened later.
func FinalBound(deadline time.Time, lease time.Duration) time.Time {
	return deadline.Add(lease + 2*(lease+CheckMargin))
}
