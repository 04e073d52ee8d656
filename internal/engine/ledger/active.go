package ledger

import "time"

// ActiveRun is an entry of the ledger's index of runs that are not final: the run and what a
// caller needs to count it without reading its record.
type ActiveRun struct {
	Run      string
	Trigger  Trigger
	Schedule string // "" for an ad-hoc run
	Job      string
	Created  time.Time
}

// ActiveOf is m's entry in the index of runs that are not final.
func ActiveOf(m *Manifest) ActiveRun {
	return ActiveRun{Run: m.RunID, Trigger: m.Trigger, Schedule: m.Schedule, Job: m.Job, Created: m.Created}
}

// Backfill is how far the index of active runs has been filled from the runs a ledger recorded
// before it had one: every run up to After (in run-ID order) has been checked, and Done once
// every run has.
type Backfill struct {
	After string
	Done  bool
}
