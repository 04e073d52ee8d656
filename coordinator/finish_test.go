package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/work"
)

// planEndFinisher records each TryFinish: when, whether the run's planning was recorded done
// by then, and whether the run's lease was held; it finishes the run on the call numbered finishOn (1-based; 0: never).
type planEndFinisher struct {
	e        *schedEnv
	finishOn int

	mu    sync.Mutex
	calls []planEndCall
}

type planEndCall struct {
	at        time.Time
	planDone  bool
	leaseHeld bool
}

func (f *planEndFinisher) TryFinish(ctx context.Context, run string) (bool, error) {
	m, err := f.e.fake.ReadManifest(ctx, run)
	if err != nil {
		return false, err
	}
	lease, err := f.e.locks.Get(ledger.RunLeaseName(run)).State(ctx)
	if err != nil {
		return false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, planEndCall{at: time.Now(), planDone: m.PlanDone, leaseHeld: lease.Held})
	return len(f.calls) == f.finishOn, nil
}

func (f *planEndFinisher) TryFinishByListing(ctx context.Context, run string) (bool, error) {
	return false, nil
}

func (f *planEndFinisher) FinishStopped(context.Context, string) (bool, error) { return false, nil }

func (f *planEndFinisher) FinishRound(context.Context, string) (bool, error) { return false, nil }

// The leader that ends a run's planning tries to finish it, and unless that finished it,
// tries again FinishGrace later: a worker whose copy of the manifest still said planning when
// its done append may have completed the run left the finish to that second try. Both tries
// come after the run's lease is released: held through the grace, the lease would be lost to
// a storage outage beginning meanwhile, failing an invocation whose planning was done.
func TestEnqueue_TriesToFinishAgainAfterTheGrace(t *testing.T) {
	const grace = 300 * time.Millisecond
	for _, tc := range []struct {
		name      string
		finishOn  int
		wantCalls int
	}{
		{"first try does not finish: a second one after the grace", 0, 2},
		{"first try finishes: no second one", 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newSchedEnv(t, "2026-11-21T10:00:01Z")
			fin := &planEndFinisher{e: e, finishOn: tc.finishOn}
			c := e.instanceWith("a", func(cfg *Config) { cfg.Finisher, cfg.FinishGrace = fin, grace })
			out, err := c.StartManual(testCtx(t), ManualRequest{Job: "count", Params: json.RawMessage(`{"n":6}`), IdempotencyKey: "k"})
			if err != nil {
				t.Fatal(err)
			}
			e.deliverChecks(c)
			if m := e.manifest(out.Run); !m.PlanDone || m.Partitions != 6 {
				t.Fatalf("run not planned: %+v", m)
			}
			fin.mu.Lock()
			defer fin.mu.Unlock()
			if len(fin.calls) != tc.wantCalls {
				t.Fatalf("%d TryFinish calls after planning, want %d", len(fin.calls), tc.wantCalls)
			}
			for i, call := range fin.calls {
				if !call.planDone {
					t.Errorf("TryFinish %d ran before the plan was recorded done", i+1)
				}
				if call.leaseHeld {
					t.Errorf("TryFinish %d ran while the planner still held the run's lease", i+1)
				}
			}
			if tc.wantCalls == 2 {
				if gap := fin.calls[1].at.Sub(fin.calls[0].at); gap < grace {
					t.Errorf("second TryFinish %s after the first, want at least FinishGrace (%s)", gap, grace)
				}
			}
		})
	}
}

// FinishGrace defaults to a quarter second past how old a worker's copy of a planning manifest
// may be, and may not be negative.
func TestNew_FinishGrace(t *testing.T) {
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	cfg := e.instanceWith("a", func(cfg *Config) { cfg.FinishGrace = 0 }).cfg
	if cfg.FinishGrace != DefaultFinishGrace || DefaultFinishGrace <= work.PlanningCopyTTL {
		t.Errorf("default FinishGrace = %s, want DefaultFinishGrace %s, above work.PlanningCopyTTL %s", cfg.FinishGrace, DefaultFinishGrace, work.PlanningCopyTTL)
	}
	cfg.FinishGrace = -time.Second
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "FinishGrace") {
		t.Errorf("New with a negative FinishGrace: %v, want an error naming it", err)
	}
}

// The last plan batch's messages carry the run's partition count, which the leader knows once
// its planner is done, so the workers whose appends end the run need no copy of the manifest
// that says so; the earlier batches' carry none (the count is not known when they are sent).
func TestEnqueue_LastBatchCarriesTheCount(t *testing.T) {
	const n = 10 // batches of 4: 0-3, 4-7, 8-9
	e := newSchedEnv(t, "2026-11-21T10:00:01Z")
	c := e.instance("a")
	out, err := c.StartManual(testCtx(t), ManualRequest{Job: "count", Params: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)), IdempotencyKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	e.deliverChecks(c)
	if m := e.manifest(out.Run); !m.PlanDone || m.Partitions != n {
		t.Fatalf("run not planned: %+v", m)
	}
	e.sender.mu.Lock()
	defer e.sender.mu.Unlock()
	seen := 0
	for _, msg := range e.sender.msgs {
		env, err := work.DecodeEnvelope(msg.Body)
		if err != nil {
			t.Fatal(err)
		}
		if env.Kind != work.KindPartition {
			continue
		}
		for _, one := range env.Singles() {
			seen++
			if want := map[bool]int{true: n, false: 0}[one.Part >= 8]; one.Parts != want {
				t.Errorf("partition %d sent with Parts %d, want %d", one.Part, one.Parts, want)
			}
		}
	}
	if seen != n {
		t.Errorf("%d partitions sent, want %d", seen, n)
	}
}
