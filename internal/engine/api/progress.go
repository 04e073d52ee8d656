package api

import (
	"context"
	"errors"
	"math"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// Progress is how far a run got.
//
// A finished run's counts come from its manifest and are exact. An unfinished run's
// Completed counts recorded results: exactly, by listing results/, when it has at most
// ExactProgressLimit partitions (one listing call per 5,000); otherwise from the done shards
// (a HEAD per shard, 16 per 262,144 partitions; a process reads again only the shards still
// filling), which count a redelivered partition twice when its worker appended twice, so the
// count is capped at Total and Approximate is set.
type Progress struct {
	// Total is the partition count; 0 until planning finished (TotalKnown false).
	Total      int  `json:"total"`
	TotalKnown bool `json:"totalKnown"`
	// Enqueued is the number of partitions enqueued so far (the enqueue checkpoint).
	Enqueued int `json:"enqueued"`
	// Completed is the number of partitions with a recorded result (success or failure).
	Completed int `json:"completed"`
	// Succeeded and Failed are final counts, filled in when the run finishes (0 before).
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	// Percent is Completed/Total in percent, rounded down to one decimal (0 while Total is
	// unknown), so 100 means every partition has a result.
	Percent float64 `json:"percent"`
	// Approximate is true when Completed came from the done shards.
	Approximate bool `json:"approximate"`
	// Source names where Completed came from: "manifest", "results", "done", or "redrive" (a
	// redrive round in progress: Total, Enqueued and Completed are the round's).
	Source string `json:"source"`
}

// progress computes a run's progress from its manifest and, for an unfinished run, from the
// ledger's results.
func (a *API) progress(ctx context.Context, m ledger.Manifest) (Progress, error) {
	p := Progress{Total: m.Partitions, TotalKnown: m.PlanDone, Enqueued: m.Checkpoint.Next}
	if m.PlanDone {
		p.Enqueued = max(p.Enqueued, m.Partitions)
	}
	if m.State.Final() {
		p.Succeeded, p.Failed = m.Succeeded, m.Failed
		p.Completed, p.Source = m.Succeeded+m.Failed, "manifest"
		if m.State == ledger.StateSkipped || m.State == ledger.StateMissed {
			p.Total, p.TotalKnown = 0, true
		}
		p.Percent = percent(p.Completed, p.Total)
		return p, nil
	}
	if rd := m.Redriving(); rd != nil {
		// A redrive round in progress: its own partitions, counted in the round (at most
		// ledger.MaxRedrive: one listing call per 5,000).
		count := 0
		if err := a.cfg.Ledger.ListResults(ctx, ledger.RoundRun(m.RunID, m.Round), func(ledger.ResultRef) error { count++; return nil }); err != nil &&
			!errors.Is(err, ledger.ErrNotFound) {
			return p, err
		}
		p.Total, p.Enqueued, p.Completed, p.Source = len(rd.Indexes), len(rd.Indexes), min(count, len(rd.Indexes)), "redrive"
		p.Percent = percent(p.Completed, p.Total)
		return p, nil
	}
	// Partitions beyond the enqueue position have no results yet.
	n := max(p.Enqueued, p.Total)
	if n == 0 {
		p.Source = "results"
		return p, nil
	}
	if n <= ExactProgressLimit {
		count := 0
		err := a.cfg.Ledger.ListResults(ctx, m.RunID, func(ledger.ResultRef) error { count++; return nil })
		if err != nil && !errors.Is(err, ledger.ErrNotFound) {
			return p, err
		}
		p.Completed, p.Source = count, "results"
	} else {
		count, err := a.done.count(ctx, a.cfg.Ledger, m, n)
		if err != nil {
			return p, err
		}
		p.Completed, p.Source, p.Approximate = int(count), "done", true
	}
	p.Completed = min(p.Completed, n)
	if p.TotalKnown {
		p.Percent = percent(p.Completed, p.Total)
	}
	return p, nil
}

// percent is done/total in percent, rounded down to one decimal: 99.96% shows as 99.9, never
// as 100 before the last partition.
func percent(done, total int) float64 {
	if total <= 0 {
		return 0
	}
	return math.Floor(float64(done)*1000/float64(total)) / 10
}
