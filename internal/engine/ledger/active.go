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

// Sweep is how far the retention sweep has gone through the ledger's runs: a pass lists them in
// name order a page at a time from Token (a ListRunPage token; "" with Started zero when no pass
// is under way), and Started is when the pass under way, or the last one, began.
type Sweep struct {
	Token   string    `json:"token,omitempty"`
	Started time.Time `json:"started,omitzero"`
	// Active is true while a pass is under way (Token may be "" on its first page).
	Active bool `json:"active,omitempty"`
}
