package soak

import (
	"time"

	"github.com/batonfn/baton/config"
)

// CheckMargin is the coordinator's delay beyond the lease duration for a check message: a
// check is due lease + CheckMargin after it is scheduled.
const CheckMargin = config.CheckMargin

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

// DocumentedBound is the bound docs/design.md promises for a run with a hard deadline
// (Manifest.Expires): final by Expires plus one check delay while checks flow. A manifest
// without Expires falls back to FinalBound of its deadline.
func DocumentedBound(expires, deadline time.Time, lease time.Duration) time.Time {
	if expires.IsZero() {
		return FinalBound(deadline, lease)
	}
	return expires.Add(lease + CheckMargin)
}
