package ledger

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Redrive is one redrive round of a run (Manifest.Redrives): the partitions whose outcome was
// not a success, run again into the same run. Their results, done records and the round's
// report are kept under the round's key (RoundRun), beside the earlier rounds'.
type Redrive struct {
	Round int       `json:"round"`
	Key   string    `json:"key"` // the caller's Idempotency-Key
	By    string    `json:"by"`
	At    time.Time `json:"at"`
	// Indexes are the partitions it runs again, ascending.
	Indexes []int `json:"indexes"`
	// From and FromReason are the final state it reopened and that state's reason.
	From       State  `json:"from"`
	FromReason string `json:"fromReason,omitempty"`
}

// MaxRedrive bounds the partitions one redrive round runs again.
const MaxRedrive = 10_000

// ErrReopen refuses a redrive the run's state does not allow.
var ErrReopen = errors.New("the run cannot be redriven")

// RoundRun is the ledger key under which round r of run records its results, done records and
// report: run itself for round 0, <run>/redrive-<r> after.
func RoundRun(run string, r int) string {
	if r <= 0 {
		return run
	}
	return run + "/redrive-" + strconv.Itoa(r)
}

// SplitRunKey returns the run and the redrive round of a key RoundRun made (round 0 for a run
// ID).
func SplitRunKey(key string) (run string, round int) {
	run, r, ok := strings.Cut(key, "/redrive-")
	if !ok {
		return key, 0
	}
	n, _ := strconv.Atoi(r)
	return run, n
}

// ValidateRunKey accepts a run ID (ValidateRunID) or a redrive round's key (RoundRun).
func ValidateRunKey(key string) error {
	run, round, ok := strings.Cut(key, "/redrive-")
	if !ok {
		return ValidateRunID(key)
	}
	if n, err := strconv.Atoi(round); err != nil || n < 1 || strconv.Itoa(n) != round {
		return fmt.Errorf("run key %q: the redrive round must be a positive number", key)
	}
	return ValidateRunID(run)
}

// Reopen starts redrive round rd on m, a run that ended partial, failed or timed out without a
// Stop: it goes back to running in round rd.Round (m.Round+1), its previous outcome kept as
// rd.From. Every other state is ErrReopen. This is the one way a final state changes.
func (m *Manifest) Reopen(rd Redrive) error {
	switch {
	case m.Stop != nil:
		return fmt.Errorf("%w: run %s was stopped (%s); start a new run instead", ErrReopen, m.RunID, m.Stop.State)
	case m.State != StatePartial && m.State != StateFailed && m.State != StateTimedOut:
		return fmt.Errorf("%w: run %s is %s; only a run that ended partial, failed or timed out is redriven", ErrReopen, m.RunID, m.State)
	case !m.PlanDone:
		return fmt.Errorf("%w: run %s never finished planning", ErrReopen, m.RunID)
	case rd.Round != m.Round+1:
		return fmt.Errorf("%w: run %s is in round %d, not %d", ErrReopen, m.RunID, m.Round, rd.Round-1)
	}
	rd.From, rd.FromReason = m.State, m.Reason
	m.Redrives = append(m.Redrives, rd)
	m.Round = rd.Round
	m.State, m.Reason = StateRunning, ""
	m.Finished, m.CheckRound, m.Waited = time.Time{}, 0, 0
	return nil
}

// Redriving returns the round m is running (nil for round 0).
func (m *Manifest) Redriving() *Redrive {
	for i := range m.Redrives {
		if m.Redrives[i].Round == m.Round {
			return &m.Redrives[i]
		}
	}
	return nil
}
