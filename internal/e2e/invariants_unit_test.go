package e2e_test

import (
	"testing"
	"time"

	"github.com/batonfn/baton/internal/tools/devhost"
)

func TestAcquiredInside(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	tn := tenure{Epoch: 2, Instance: "instance-2", PID: 722, Acquired: t0.Add(2 * time.Second)}
	check := devhost.Invocation{Function: "ControlQueue", Instance: "instance-2", PID: 722, Started: t0.Add(time.Second)}
	finished := func(inv devhost.Invocation, end time.Time) []devhost.InvokeRecord {
		return []devhost.InvokeRecord{{Invocation: inv, End: end}}
	}
	other := check
	other.PID = 723
	worker := check
	worker.Function = "Dashboard"
	for _, tc := range []struct {
		name     string
		recs     []devhost.InvokeRecord
		inFlight []devhost.Invocation
		want     bool
	}{
		{"inside a finished check invocation", finished(check, t0.Add(3*time.Second)), nil, true},
		{"inside a check invocation still running (the run is final, its leader not yet released)", nil, []devhost.Invocation{check}, true},
		{"a finished invocation that ended before the acquisition", finished(check, t0.Add(1500*time.Millisecond)), nil, false},
		{"an invocation that started after the acquisition", nil, []devhost.Invocation{{Function: "Tick", Instance: "instance-2", PID: 722, Started: t0.Add(3 * time.Second)}}, false},
		{"the same instance name in another process", nil, []devhost.Invocation{other}, false},
		{"a function that never contends", nil, []devhost.Invocation{worker}, false},
		{"no invocation at all", nil, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := acquiredInside(tn, tc.recs, tc.inFlight, t0.Add(10*time.Second)); got != tc.want {
				t.Errorf("acquiredInside = %v, want %v", got, tc.want)
			}
		})
	}
}
