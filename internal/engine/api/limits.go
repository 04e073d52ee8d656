package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/batonfn/baton/internal/engine/limit"
)

// LimitStates reads a limit's shared state (limit.Limiter): the zero State when the limit has
// none yet.
type LimitStates interface {
	Read(ctx context.Context, name string) (limit.State, error)
}

var _ LimitStates = (*limit.Limiter)(nil)

// DeclaredLimit is a limit the app's jobs run under.
type DeclaredLimit struct {
	// Spec is its settings as the jobs run under them (BATON_LIMITS applied).
	Spec limit.Spec
	// Jobs are the jobs naming it.
	Jobs []string
	// Overridden is true when BATON_LIMITS sets its fields.
	Overridden bool
}

// LimitsReply is GET /api/limits: every limit the app declares, by name.
type LimitsReply struct {
	Limits []LimitView `json:"limits"`
	Now    time.Time   `json:"now"`
}

// LimitView is one limit: its settings and its shared state at Now. Every key is always
// present: a limit no partition has run under yet has zeros, an empty holders list and null
// times.
type LimitView struct {
	Name string `json:"name"`
	// MaxInFlight, Rate, Per (with PerSeconds) and Burst are the settings; 0 (Per "") for a
	// bound that is off. Settings says the same in words.
	MaxInFlight int     `json:"maxInFlight"`
	Rate        int     `json:"rate"`
	Per         string  `json:"per"`
	PerSeconds  float64 `json:"perSeconds"`
	Burst       int     `json:"burst"`
	Settings    string  `json:"settings"`
	// Overridden is true when BATON_LIMITS sets the settings; Jobs are the jobs naming it.
	Overridden bool     `json:"overridden"`
	Jobs       []string `json:"jobs"`
	// InFlight is the slots held by unexpired grants; Waiting the partitions of bundles refused
	// lately whose retry is not yet over; Started the partition starts ever granted.
	InFlight int   `json:"inFlight"`
	Waiting  int   `json:"waiting"`
	Started  int64 `json:"started"`
	// Slowed is true while the downstream's last slow-down holds (before SlowUntil); SlowAt
	// is when it last asked and SlowReason what it said (null and "" if it never asked).
	Slowed     bool       `json:"slowed"`
	SlowUntil  *time.Time `json:"slowUntil"`
	SlowAt     *time.Time `json:"slowAt"`
	SlowReason string     `json:"slowReason"`
	// HoldMs is the mean time a partition held a slot lately (0 before the first release).
	HoldMs int64 `json:"holdMs"`
	// Holders are the unexpired grants holding slots, soonest expiry first.
	Holders []LimitHolderView `json:"holders"`
	// Updated is when the state was last written; null before the first grant.
	Updated *time.Time `json:"updated"`
}

// LimitHolderView is one grant holding a limit's slots: the process (instance/pid) that
// took it, its slots and when they expire unless renewed.
type LimitHolderView struct {
	Holder  string    `json:"holder"`
	Slots   int       `json:"slots"`
	Expires time.Time `json:"expires"`
}

// Limits serves GET /api/limits (every limit the app declares, each with its state) and
// GET /api/limits/{name} (one). Each limit costs one read of its state.
func (a *API) Limits(ctx context.Context, r Request) Reply {
	name := strings.Trim(r.Path, "/")
	if strings.Contains(name, "/") {
		return errorReply(http.StatusNotFound, CodeNotFound, fmt.Sprintf(
			"no endpoint limits/%s: use GET limits or GET limits/{name}", shorten(r.Path)))
	}
	if r.Method != http.MethodGet {
		return methodNotAllowed(http.MethodGet)
	}
	if a.cfg.LimitStates == nil {
		return errorReply(http.StatusServiceUnavailable, CodeUnavailable, "limits are not configured on this instance")
	}
	all := slices.SortedFunc(slices.Values(a.cfg.Limits), func(x, y DeclaredLimit) int { return strings.Compare(x.Spec.Name, y.Spec.Name) })
	if name != "" {
		i := slices.IndexFunc(all, func(d DeclaredLimit) bool { return d.Spec.Name == name })
		if i < 0 {
			return unknownLimit(name, all)
		}
		all = all[i : i+1]
	}
	now := a.cfg.Now()
	out := LimitsReply{Limits: make([]LimitView, len(all)), Now: now.UTC()}
	err := forEach(ctx, len(all), func(ctx context.Context, i int) error {
		st, err := a.cfg.LimitStates.Read(ctx, all[i].Spec.Name)
		if err != nil {
			return err
		}
		out.Limits[i] = limitView(all[i], st, now)
		return nil
	})
	if err != nil {
		return a.storageError(r, "read the limits", err)
	}
	if name != "" {
		return jsonReply(http.StatusOK, out.Limits[0])
	}
	return jsonReply(http.StatusOK, out)
}

func shorten(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

func unknownLimit(name string, all []DeclaredLimit) Reply {
	declared := "none"
	if len(all) > 0 {
		names := make([]string, len(all))
		for i, d := range all {
			names[i] = d.Spec.Name
		}
		declared = strings.Join(names, ", ")
	}
	return errorReply(http.StatusNotFound, CodeNotFound, fmt.Sprintf("no limit %q; this app declares: %s", shorten(name), declared))
}

// limitView joins a limit's declaration with its state at now.
func limitView(d DeclaredLimit, st limit.State, now time.Time) LimitView {
	s := d.Spec
	v := LimitView{Name: s.Name, MaxInFlight: s.MaxInFlight, Rate: s.Rate, Burst: s.Burst, Settings: s.String(),
		Overridden: d.Overridden, Jobs: slices.Sorted(slices.Values(d.Jobs)),
		InFlight: st.InFlight(now), Waiting: st.WaitingAt(now), Started: st.Started,
		Slowed: now.Before(st.SlowUntil), SlowReason: st.SlowReason, HoldMs: st.Hold.Milliseconds(),
		SlowUntil: timeOrNull(st.SlowUntil), SlowAt: timeOrNull(st.SlowAt), Updated: timeOrNull(st.Updated),
		Holders: []LimitHolderView{}}
	if v.Jobs == nil {
		v.Jobs = []string{}
	}
	if s.Rate > 0 {
		v.Per, v.PerSeconds = s.Per.String(), s.Per.Seconds()
	}
	for _, g := range st.Slots {
		if now.Before(g.Expires) {
			v.Holders = append(v.Holders, LimitHolderView{Holder: g.Holder, Slots: g.Slots, Expires: g.Expires.UTC()})
		}
	}
	slices.SortStableFunc(v.Holders, func(x, y LimitHolderView) int { return x.Expires.Compare(y.Expires) })
	return v
}

// timeOrNull is t in UTC, or nil when t is zero.
func timeOrNull(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}
