package ledger

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Budget is a run's failure budget: past it the run stops early as failed (Manifest.Stop).
// A zero field is no bound of its kind; the zero Budget bounds nothing.
type Budget struct {
	// MaxFailed: the run stops once more partitions than this have failed for good.
	MaxFailed int `json:"maxFailed,omitempty"`
	// MaxPercent: the run stops once more than this share (0–100) of its planned partitions
	// has failed; checked once the partition count is known (planning ended).
	MaxPercent float64 `json:"maxPercent,omitempty"`
}

// Validate refuses negative bounds and a percentage above 100.
func (b Budget) Validate() error {
	switch {
	case b.MaxFailed < 0:
		return fmt.Errorf("maxFailed %d: want 0 (no bound) or more", b.MaxFailed)
	case b.MaxPercent < 0 || b.MaxPercent > 100 || math.IsNaN(b.MaxPercent):
		return fmt.Errorf("maxPercent %v: want 0 (no bound) to 100", b.MaxPercent)
	}
	return nil
}

// IsZero reports whether b bounds nothing.
func (b Budget) IsZero() bool { return b.MaxFailed == 0 && b.MaxPercent == 0 }

// Exceeded reports whether failed partitions out of planned (0 while unknown) are past b.
func (b Budget) Exceeded(failed, planned int) bool {
	return b.MaxFailed > 0 && failed > b.MaxFailed ||
		b.MaxPercent > 0 && planned > 0 && float64(failed)*100 > b.MaxPercent*float64(planned)
}

// String is the budget in words, e.g. "at most 10 failed partitions or 5% of them".
func (b Budget) String() string {
	pct := strconv.FormatFloat(b.MaxPercent, 'f', -1, 64) + "%"
	switch {
	case b.MaxFailed > 0 && b.MaxPercent > 0:
		return fmt.Sprintf("at most %d failed partitions or %s of them", b.MaxFailed, pct)
	case b.MaxFailed > 0:
		return fmt.Sprintf("at most %d failed partitions", b.MaxFailed)
	case b.MaxPercent > 0:
		return "at most " + pct + " of the partitions failed"
	}
	return "no failure budget"
}

// ErrInvalidBudget marks a budget Validate refuses.
var ErrInvalidBudget = errors.New("invalid failure budget")
