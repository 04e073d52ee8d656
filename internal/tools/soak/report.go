package soak

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// Print writes the figures, then every violation (or "violations: 0").
func (r Result) Print(w io.Writer) {
	f := r.Figures
	fmt.Fprintf(w, "heartbeats: %d fired, %d due with no instance running\n", f.Heartbeats, f.HeartbeatsNowhere)
	for _, name := range slices.Sorted(maps.Keys(f.Schedules)) {
		s := f.Schedules[name]
		fmt.Fprintf(w, "schedule %s: %d due occurrences in the window; records by state: %s; queued first: %d; runs now: %d; occurrence→record at most %s (%s), %s under a fault\n",
			name, s.Occurrences, counts(s.States), s.Queued, s.Now, s.MaxDelay.Round(time.Millisecond), s.MaxDelayRun, s.MaxDelayFault.Round(time.Millisecond))
	}
	fmt.Fprintf(w, "manual calls: %d (by status: %s); manual runs by state: %s\n", f.ManualCalls, byStatus(f.ManualByCode), counts(f.ManualRuns))
	fmt.Fprintf(w, "cancels by status: %s; runs stopped: %d; redrives by status: %s; runs redriven: %d\n", byStatus(f.CancelByCode), f.Stopped,
		byStatus(f.RedriveByCode), f.Redriven)
	fmt.Fprintf(w, "faults by kind: %s\n", counts(f.Faults))
	fmt.Fprintf(w, "runs: %d records, %d planned, %d partitions (%d results in blocks); leaderships: %d of the scheduler lease, %d of %d run leases (leases of killed holders lost to an Azurite restart: %d; epochs whose record it lost: %d)\n",
		f.Runs, f.Planned, f.Partitions, f.InBlocks, f.SchedulerEpochs, f.RunLeaderships, f.RunLeases, f.LeasesLostToRestart, f.EpochsLostToRestart)
	fmt.Fprintf(w, "supervision: runs the heartbeat drove %d times; in their bounds: %d first planners, %d planners replaced, %d re-enqueue rounds\n",
		f.HeartbeatDriven, f.StartsChecked, f.TakeoversChecked, f.RoundsChecked)
	fmt.Fprintf(w, "violations: %d\n", len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  %s\n", v)
	}
}

// byStatus formats calls counted by HTTP status (0: no answer).
func byStatus(m map[int]int) string {
	named := map[string]int{}
	for k, v := range m {
		name := fmt.Sprint(k)
		if k == 0 {
			name = "no-answer"
		}
		named[name] = v
	}
	return counts(named)
}

// Counts formats a count per name, sorted by name.
func Counts(m map[string]int) string { return counts(m) }

func counts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}
