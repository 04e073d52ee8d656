package soak

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// Print writes the figures, then every violation (or "violations: 0").
func (r Result) Print(w io.Writer) {
	f := r.Figures
	fmt.Fprintf(w, "occurrences: %d in the window, %d fired, %d due with no instance running\n", f.Occurrences, f.Fired, f.FiredNowhere)
	fmt.Fprintf(w, "timer records by state: %s\n", counts(f.TimerStates))
	codes := map[string]int{}
	for k, v := range f.ManualByCode {
		name := fmt.Sprint(k)
		if k == 0 {
			name = "no-answer"
		}
		codes[name] = v
	}
	fmt.Fprintf(w, "manual calls: %d (by status: %s); manual runs by state: %s\n", f.ManualCalls, counts(codes), counts(f.ManualRuns))
	fmt.Fprintf(w, "faults by kind: %s\n", counts(f.Faults))
	fmt.Fprintf(w, "runs: %d records, %d planned, %d partitions; leaderships: %d (leases of killed holders lost to an Azurite restart: %d)\n",
		f.Runs, f.Planned, f.Partitions, f.Epochs, f.LeasesLostToRestart)
	fmt.Fprintf(w, "violations: %d\n", len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  %s\n", v)
	}
}

func counts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}
