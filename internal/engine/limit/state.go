// Package limit keeps named limits that hold across instances: at most MaxInFlight partitions
// in flight and at most Rate partition starts per Per (with a burst), and a slow-down time
// before which nothing of the limit starts. A limit's whole state is one small document,
// updated under optimistic concurrency (Store); slots are taken per bundle of partitions, not
// per partition, and expire unless renewed, so a dead holder's slots come back.
package limit

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"
)

// Spec is a limit's settings. A zero MaxInFlight or Rate leaves that bound off; at least one
// is set.
type Spec struct {
	Name        string        `json:"name"`
	MaxInFlight int           `json:"maxInFlight,omitempty"`
	Rate        int           `json:"rate,omitempty"`
	Per         time.Duration `json:"per,omitempty"`
	Burst       int           `json:"burst,omitempty"`
}

// Bounds on a Spec.
const (
	MaxInFlightLimit = 100_000
	MaxRate          = 1_000_000
	MinPer           = time.Millisecond
	MaxPer           = 24 * time.Hour
)

var namePattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

// FieldError is a Spec field out of range.
type FieldError struct {
	Field string // "name", "maxInFlight", "rate", "per" or "burst"
	Err   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// Normalize fills in defaults (Per 1 s when Rate is set; Burst 1 when Rate is set) and
// validates the spec; an error is a *FieldError.
func (s Spec) Normalize() (Spec, error) {
	bad := func(field, format string, args ...any) (Spec, error) {
		return s, &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
	}
	if !namePattern.MatchString(s.Name) {
		return bad("name", "%q: want 1-63 characters of a-z, 0-9, '-' and '_' starting with a letter", s.Name)
	}
	if s.MaxInFlight < 0 || s.MaxInFlight > MaxInFlightLimit {
		return bad("maxInFlight", "%d, want 0 (none) to %d", s.MaxInFlight, MaxInFlightLimit)
	}
	if s.Rate < 0 || s.Rate > MaxRate {
		return bad("rate", "%d, want 0 (none) to %d", s.Rate, MaxRate)
	}
	if s.MaxInFlight == 0 && s.Rate == 0 {
		return bad("maxInFlight", "a limit needs maxInFlight or rate")
	}
	if s.Rate == 0 {
		if s.Per != 0 || s.Burst != 0 {
			return bad("rate", "per and burst need a rate")
		}
		return s, nil
	}
	if s.Per == 0 {
		s.Per = time.Second
	}
	if s.Per < MinPer || s.Per > MaxPer {
		return bad("per", "%s, want %s to %s", s.Per, MinPer, MaxPer)
	}
	if s.Burst == 0 {
		s.Burst = 1
	}
	if s.Burst < 1 || s.Burst > s.Rate {
		return bad("burst", "%d, want 1 to the rate (%d)", s.Burst, s.Rate)
	}
	return s, nil
}

// String is the spec in the settings' words, e.g. "maxInFlight 2, rate 10/1s, burst 5".
func (s Spec) String() string {
	out := ""
	if s.MaxInFlight > 0 {
		out = fmt.Sprintf("maxInFlight %d", s.MaxInFlight)
	}
	if s.Rate > 0 {
		if out != "" {
			out += ", "
		}
		out += fmt.Sprintf("rate %d/%s, burst %d", s.Rate, s.Per, s.Burst)
	}
	return out
}

// interval is the time between two starts at the spec's rate.
func (s Spec) interval() time.Duration { return s.Per / time.Duration(s.Rate) }

// State is a limit's shared document.
type State struct {
	// Slots are the grants that hold in-flight slots (or reserved starts) until they expire.
	Slots []Slot `json:"slots,omitempty"`
	// Waiting are the bundles refused lately, until their retry is due (plus a lease).
	Waiting []Waiter `json:"waiting,omitempty"`
	// Next is the rate's theoretical arrival time (GCRA): a start at t is allowed when
	// Next − (Burst−1)·interval ≤ t, and moves Next to max(Next, t) + interval.
	Next time.Time `json:"next,omitzero"`
	// SlowUntil: nothing of the limit starts before it (the downstream asked to slow down).
	SlowUntil time.Time `json:"slowUntil,omitzero"`
	// SlowAt is when the downstream last asked, SlowReason what it said.
	SlowAt     time.Time `json:"slowAt,omitzero"`
	SlowReason string    `json:"slowReason,omitempty"`
	// Hold is the mean time one partition held a slot lately (for a waiter's retry delay).
	Hold time.Duration `json:"hold,omitempty"`
	// Started counts partition starts granted, for the dashboard.
	Started int64     `json:"started,omitempty"`
	Updated time.Time `json:"updated,omitzero"`
}

// Slot is one grant: Slots partitions at once, for the holder Holder, until Expires.
type Slot struct {
	Token   string    `json:"token"`
	Holder  string    `json:"holder"`
	Slots   int       `json:"slots"`
	Expires time.Time `json:"expires"`
	// Ends is when the holder expects to give the slots back (zero: not known), from which
	// the bundle first in line is told when to ask again.
	Ends time.Time `json:"ends,omitzero"`
}

// Waiter is a bundle refused a grant, and the holder (process) it waits in ("": not known).
type Waiter struct {
	ID     string    `json:"id"`
	N      int       `json:"n"`
	Until  time.Time `json:"until"`
	Holder string    `json:"holder,omitempty"`
}

// Clone is a copy of st that shares no slice with it.
func (st State) Clone() State {
	st.Slots, st.Waiting = slices.Clone(st.Slots), slices.Clone(st.Waiting)
	return st
}

// InFlight is the slots held by grants unexpired at now.
func (st *State) InFlight(now time.Time) int {
	n := 0
	for _, s := range st.Slots {
		if now.Before(s.Expires) {
			n += s.Slots
		}
	}
	return n
}

// WaitingAt is the partitions of bundles waiting at now.
func (st *State) WaitingAt(now time.Time) int {
	n := 0
	for _, w := range st.Waiting {
		if now.Before(w.Until) {
			n += w.N
		}
	}
	return n
}

// prune drops the grants and waiters expired at now.
func (st *State) prune(now time.Time) {
	st.Slots = slices.DeleteFunc(st.Slots, func(s Slot) bool { return !now.Before(s.Expires) })
	st.Waiting = slices.DeleteFunc(st.Waiting, func(w Waiter) bool { return !now.Before(w.Until) })
}

func (st *State) slot(token string) int {
	return slices.IndexFunc(st.Slots, func(s Slot) bool { return s.Token == token })
}

// ErrLost is the error of a Renew or a start whose grant has expired or was taken: the holder
// must not start anything more under it.
var ErrLost = errors.New("limit slot lost")

// ErrContended is wrapped by a Store update that kept losing the race for the limit's state:
// the limit is busy, not broken, and the caller may ask again later.
var ErrContended = errors.New("limit state contended")
