package config

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/lib/strictjson"
)

// Default retention per class of final state: a succeeded run 30 days; a run that ended badly
// (partial, failed, timed-out, cancelled) 90 days, long enough to investigate; a record of an
// occurrence that never ran (skipped, missed, paused) 7 days.
const (
	DefaultRetainSucceeded = 30 * 24 * time.Hour
	DefaultRetainFailed    = 90 * 24 * time.Hour
	DefaultRetainNotRun    = 7 * 24 * time.Hour
	// MinRetention is the shortest retention BATON_RETENTION accepts.
	MinRetention = time.Hour
)

// Retention is how long after it ended (ledger.Manifest.Finished, else Updated) a final run
// is deleted, by final state; a state that is missing or 0 is kept for ever.
type Retention map[ledger.State]time.Duration

// DefaultRetention is the retention with BATON_RETENTION unset.
func DefaultRetention() Retention {
	return Retention{
		ledger.StateSucceeded: DefaultRetainSucceeded,
		ledger.StatePartial:   DefaultRetainFailed, ledger.StateFailed: DefaultRetainFailed,
		ledger.StateTimedOut: DefaultRetainFailed, ledger.StateCancelled: DefaultRetainFailed,
		ledger.StateSkipped: DefaultRetainNotRun, ledger.StateMissed: DefaultRetainNotRun,
		ledger.StatePaused: DefaultRetainNotRun,
	}
}

// FinalStates are the states retention applies to, in the order documented.
var FinalStates = []ledger.State{ledger.StateSucceeded, ledger.StatePartial, ledger.StateFailed, ledger.StateTimedOut,
	ledger.StateCancelled, ledger.StateSkipped, ledger.StateMissed, ledger.StatePaused}

// Off reports whether no run is ever deleted.
func (r Retention) Off() bool {
	for _, d := range r {
		if d > 0 {
			return false
		}
	}
	return true
}

// retention reads BATON_RETENTION: unset keeps the defaults; "off" keeps every run for ever;
// else a JSON object from final state to a duration ("720h", "30d", "30.00:00:00") or "off"
// (kept for ever), each state given replacing its default, e.g. {"succeeded":"14d","paused":"off"}.
func (p *parser) retention() Retention {
	r := DefaultRetention()
	v := strings.TrimSpace(p.get(SettingRetention))
	switch {
	case v == "":
		return r
	case strings.EqualFold(v, "off"):
		return Retention{}
	}
	var raw map[string]json.RawMessage
	if err := strictjson.Decode([]byte(v), &raw); err != nil {
		var ke *strictjson.KeyError
		if errors.As(err, &ke) && len(ke.Path) == 0 {
			p.errf("%s: state %q is given twice", SettingRetention, ke.Key)
		} else {
			p.errf(`%s=%q is neither "off" nor a JSON object from final state to duration, e.g. {"succeeded":"30d","failed":"90d","skipped":"7d"}: %v`,
				SettingRetention, v, err)
		}
		return r
	}
	for _, key := range slices.Sorted(maps.Keys(raw)) {
		state := ledger.State(key)
		if !state.Final() {
			p.errf("%s: %q is not a final state: use %s", SettingRetention, key, statesList())
			continue
		}
		var s string
		if err := json.Unmarshal(raw[key], &s); err != nil {
			p.errf(`%s: %s: %s is not a string: use a duration such as "30d" or "720h", or "off"`, SettingRetention, key, raw[key])
			continue
		}
		d, err := parseRetention(s)
		if err != nil {
			p.errf("%s: %s: %q %v", SettingRetention, key, s, err)
			continue
		}
		r[state] = d
	}
	return r
}

// parseRetention reads one state's retention: "off" or "0" (0: kept for ever), whole days
// ("30d"), or a duration of at least MinRetention.
func parseRetention(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "off") || s == "0" {
		return 0, nil
	}
	var d time.Duration
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days < 0 {
			return 0, errors.New(`is not a duration: use e.g. "30d", "720h" or "off"`)
		}
		d = time.Duration(days) * 24 * time.Hour
	} else {
		var err error
		if d, err = ParseDuration(s); err != nil || d < 0 {
			return 0, errors.New(`is not a duration: use e.g. "30d", "720h" or "off"`)
		}
	}
	if d == 0 {
		return 0, nil
	}
	if d < MinRetention {
		return 0, errors.New(`is too short: at least 1h, or "off"`)
	}
	return d, nil
}

func statesList() string {
	var out []string
	for _, s := range FinalStates {
		out = append(out, string(s))
	}
	return strings.Join(out, ", ")
}
