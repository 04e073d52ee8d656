package soak

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestNewPlan_SeedDecidesEverything: the same seed gives the same plan; another seed another.
func TestNewPlan_SeedDecidesEverything(t *testing.T) {
	o := PlanOptions{Seed: 12345, Span: 5 * time.Minute, Lease: 15 * time.Second, Pausable: "p"}
	a, b := NewPlan(o), NewPlan(o)
	if !slices.Equal(a, b) {
		t.Fatalf("seed %d gave two plans:\n%v\n%v", o.Seed, a, b)
	}
	o.Seed++
	if c := NewPlan(o); slices.Equal(a, c) {
		t.Errorf("seeds %d and %d gave the same plan", o.Seed-1, o.Seed)
	}
}

// TestNewPlan_Shape: steps in time order inside the span; faults never overlap and any six
// consecutive faults cover every kind; any five consecutive delivery faults cover every kind of
// theirs, each with its target; pauses outlast the lease; keys repeat with one body
// each; poison steps carry a key and a failAlways rule; the pausable schedule is paused and
// resumed in turn, each pause 8-20 s.
func TestNewPlan_Shape(t *testing.T) {
	const lease = 15 * time.Second
	for seed := int64(1); seed <= 20; seed++ {
		steps := NewPlan(PlanOptions{Seed: seed, Span: 5 * time.Minute, Lease: lease, Pausable: "p"})
		var faults, delivery []Step
		var pauses, cancels, redrives []Step
		keyBody := map[string]string{}
		keyUses := map[string]int{}
		for i, s := range steps {
			if i > 0 && s.At < steps[i-1].At {
				t.Fatalf("seed %d: step %d at %s before step %d at %s", seed, i, s.At, i-1, steps[i-1].At)
			}
			if s.At >= 5*time.Minute {
				t.Errorf("seed %d: step %v outside the span", seed, s)
			}
			switch s.Kind {
			case StepManual:
				if s.Key != "" {
					if b, ok := keyBody[s.Key]; ok && b != s.Body {
						t.Errorf("seed %d: key %s sent with bodies %q and %q", seed, s.Key, b, s.Body)
					}
					keyBody[s.Key] = s.Body
					keyUses[s.Key]++
				}
			case StepCancel:
				cancels = append(cancels, s)
			case StepRedrive:
				redrives = append(redrives, s)
				if s.Key == "" {
					t.Errorf("seed %d: redrive without a key", seed)
				}
			case StepPause, StepResume:
				if s.Schedule != "p" {
					t.Errorf("seed %d: %v is not for the pausable schedule", seed, s)
				}
				pauses = append(pauses, s)
			case FaultControlLost, FaultAnswerLost, FaultCheckCrash, FaultBlackout, FaultWorkLost:
				delivery = append(delivery, s)
				if s.Wait <= 0 || s.Kind != FaultWorkLost && s.Target != TargetStart && s.Target != TargetAny ||
					s.Kind == FaultBlackout && s.Target != TargetStart || s.CrashAfter < 0 || s.CrashAfter > 1500*time.Millisecond ||
					s.Kind != FaultCheckCrash && s.CrashAfter != 0 {
					t.Errorf("seed %d: delivery fault %v", seed, s)
				}
			default:
				faults = append(faults, s)
			}
			if s.Kind == FaultPause && s.Hold <= lease {
				t.Errorf("seed %d: pause of %s does not outlast the %s lease", seed, s.Hold, lease)
			}
			if s.Kind == FaultPoison && (s.Key == "" || !contains(s.Body, "failAlways")) {
				t.Errorf("seed %d: poison step %v", seed, s)
			}
		}
		if len(pauses) < 2 || len(pauses)%2 != 0 {
			t.Errorf("seed %d: pauses and resumes %v, want pairs", seed, pauses)
		}
		for i := 0; i+1 < len(pauses); i += 2 {
			p, r := pauses[i], pauses[i+1]
			if p.Kind != StepPause || r.Kind != StepResume || r.At-p.At < 8*time.Second || r.At-p.At > 20*time.Second {
				t.Errorf("seed %d: pause %v then %v, want a resume 8-20 s after each pause", seed, p, r)
			}
		}
		for i := 1; i < len(faults); i++ {
			prev := faults[i-1]
			if faults[i].At < prev.At+prev.Hold {
				t.Errorf("seed %d: fault %v starts before %v ended", seed, faults[i], prev)
			}
		}
		for i := 0; i+6 <= len(faults); i += 6 {
			kinds := map[string]bool{}
			for _, f := range faults[i : i+6] {
				kinds[f.Kind] = true
			}
			if len(kinds) != len(FaultKinds) {
				t.Errorf("seed %d: faults %d..%d cover %d kinds, want all %d", seed, i, i+5, len(kinds), len(FaultKinds))
			}
		}
		n := len(DeliveryFaultKinds)
		if len(delivery) < 3*n {
			t.Errorf("seed %d: %d delivery faults in 5 minutes, want at least %d", seed, len(delivery), 3*n)
		}
		for i := 0; i+n <= len(delivery); i += n {
			kinds := map[string]bool{}
			for _, f := range delivery[i : i+n] {
				kinds[f.Kind] = true
			}
			if len(kinds) != n {
				t.Errorf("seed %d: delivery faults %d..%d cover %d kinds, want all %d", seed, i, i+n-1, len(kinds), n)
			}
		}
		if len(redrives) < 8 {
			t.Errorf("seed %d: %d redrives in 5 minutes, want one every 15-30 s", seed, len(redrives))
		}
		if len(cancels) < 10 {
			t.Errorf("seed %d: %d cancels in 5 minutes, want one every 10-25 s", seed, len(cancels))
		}
		repeated := false
		for _, n := range keyUses {
			repeated = repeated || n > 1
		}
		if !repeated {
			t.Errorf("seed %d: no Idempotency-Key is used twice in 5 minutes", seed)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
