package election

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
)

func TestLeaderState_JSON(t *testing.T) {
	since := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		in   LeaderState
		want string
	}{
		{"never contended", LeaderState{}, `{"held":false,"epoch":0,"leaseState":""}`},
		{"held", LeaderState{Held: true, Holder: ledger.Holder{App: "app", Instance: "i1", PID: 7}, Epoch: 3, Since: since, LeaseState: LeaseStateLeased},
			`{"held":true,"holder":{"app":"app","instance":"i1","pid":7},"epoch":3,"since":"2026-11-21T10:00:00Z","leaseState":"leased"}`},
		{"released", LeaderState{Holder: ledger.Holder{App: "app", Instance: "i1", PID: 7}, Epoch: 3, Since: since, ReleasedAt: since.Add(time.Second), LeaseState: LeaseStateAvailable},
			`{"held":false,"holder":{"app":"app","instance":"i1","pid":7},"epoch":3,"since":"2026-11-21T10:00:00Z","releasedAt":"2026-11-21T10:00:01Z","leaseState":"available"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("json = %s\nwant   %s", got, tt.want)
			}
		})
	}
}

func TestIdentity_String(t *testing.T) {
	if got, want := (ledger.Holder{App: "baton", Instance: "host-1", PID: 42}).String(), "baton/host-1/42"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}
