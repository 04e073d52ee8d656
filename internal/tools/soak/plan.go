package soak

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Plan steps that are not faults.
const (
	// StepManual is a manual start (POST /api/runs).
	StepManual = "manual"
	// StepPause and StepResume pause and resume a schedule (Step.Schedule) through its ledger
	// state, as the API's pause does.
	StepPause  = "pause"
	StepResume = "resume"
)

// Step is one thing the driver does, at an offset from the start of the fault phase.
type Step struct {
	At   time.Duration
	Kind string // a fault kind (FaultKinds) or StepManual
	// Pick chooses among the candidates the driver finds at run time (the instances that are
	// running, the leader seen): candidates[Pick % len(candidates)]. The decision is the
	// seed's; what it lands on depends on the system's state.
	Pick uint64
	// Hold is how long a pause or an Azurite outage lasts.
	Hold time.Duration
	// Wait is how long a leader fault waits for a leader to strike (a "leadership acquired"
	// or "run created" line, per On) before it falls back to the last known holder, and how
	// long a delivery fault waits for its message before it is disarmed.
	Wait time.Duration
	On   string
	// Key and Body are a manual start's Idempotency-Key ("" for none) and body ("" runs the
	// settings' schedule now). A poison step is a manual start too, retried on 409 with its key.
	Key  string
	Body string
	// Schedule is the schedule a pause or a resume is for.
	Schedule string
	// Target is the control message a delivery fault waits for (TargetStart or TargetAny);
	// CrashAfter how long into its check's invocation a check-crash crashes the instance.
	Target     string
	CrashAfter time.Duration
}

// Delivery fault targets: the message a delivery fault on the control queue hits.
const (
	// TargetStart is the check that starts a run: the first of its chain (epoch 0, round 1),
	// which takes the run's lease and plans it.
	TargetStart = "start"
	// TargetAny is the next control message: a start, a planning slice's follow-up, a lease
	// probe, a handover or a deadline check.
	TargetAny = "any"
)

func (s Step) String() string {
	out := fmt.Sprintf("+%s %s", s.At.Round(time.Millisecond), s.Kind)
	switch s.Kind {
	case StepManual, FaultPoison:
		out += fmt.Sprintf(" key=%q body=%s", s.Key, s.Body)
	case FaultPause, FaultAzurite:
		out += fmt.Sprintf(" hold=%s", s.Hold.Round(time.Millisecond))
	case StepPause, StepResume:
		out += " " + s.Schedule
	case FaultControlLost, FaultAnswerLost, FaultBlackout:
		out += " target=" + s.Target
	case FaultCheckCrash:
		out += fmt.Sprintf(" target=%s after=%s", s.Target, s.CrashAfter.Round(time.Millisecond))
	}
	if s.On != "" {
		out += " on=" + s.On
	}
	return out
}

// PlanOptions shape a plan.
type PlanOptions struct {
	Seed int64
	// Span is how long the fault phase lasts; no fault starts after it.
	Span time.Duration
	// Lease is BATON_LEASE_DURATION: a pause lasts past it.
	Lease time.Duration
	// Pausable, when set, is the schedule the plan pauses and resumes: paused 8–20 s at a
	// time, 10–30 s apart, from a fifth of the span on.
	Pausable string
}

// Leader-fault triggers: the log line at which the driver strikes. A leadership is acquired
// by a heartbeat (the scheduler lease, every heartbeat), a run's planner or a check (a run's
// lease); a run is created by the heartbeat that decided its occurrence, before the check that
// plans it is sent; planning begins under the run's own lease.
const (
	OnAcquired = "leadership acquired"
	OnCreated  = "run created"
	OnPlanning = "planning the run"
)

// NewPlan returns the seed's steps, in time order. Faults (FaultKinds) never overlap: each
// starts after the previous one ended (its Hold) and a gap of 2–6 s. Fault kinds are drawn from
// a shuffled bag of every kind, refilled when empty, so any six consecutive faults cover every
// kind. Delivery faults (DeliveryFaultKinds) come beside them, every 3–8 s, from a bag of their
// own (any five consecutive cover every kind) and a random source of their own, so a seed's
// other steps are what they were before delivery faults existed: a lost control message, a lost
// answer or a crash aimed at a run's start check two times in three (else at the next control
// message), a crash 0–1.5 s into its check, a blackout of the run whose start check comes next,
// a lost partition message. Manual starts come every 3–8 s throughout: a third without a key,
// the rest with one of three keys (so keys repeat), each key always with the same body. With
// Pausable, its pauses and resumes. Cancels of a run in progress come every 10–25 s, from a
// random source of their own.
func NewPlan(o PlanOptions) []Step {
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 0x50a4))
	dur := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	var steps []Step
	var bag []string
	poisons := 0
	for at := dur(2*time.Second, 5*time.Second); at < o.Span; {
		if len(bag) == 0 {
			bag = append([]string(nil), FaultKinds...)
			rng.Shuffle(len(bag), func(i, j int) { bag[i], bag[j] = bag[j], bag[i] })
		}
		s := Step{At: at, Kind: bag[0], Pick: rng.Uint64()}
		bag = bag[1:]
		switch s.Kind {
		case FaultPause:
			s.Hold = o.Lease + dur(2*time.Second, 5*time.Second)
		case FaultAzurite:
			s.Hold = dur(3*time.Second, 8*time.Second)
		case FaultPoison:
			poisons++
			s.Key = fmt.Sprintf("soak-%d-poison-%d", o.Seed, poisons)
			// 32 partitions go in bundles of 4: the poison partition fails inside a bundle.
			s.Body = fmt.Sprintf(`{"job":"synthetic","params":{"partitions":32,"workMs":50,"failAlways":[%d]}}`, rng.IntN(32))
		}
		if s.Kind == FaultKillLeader || s.Kind == FaultPause {
			s.On = []string{OnAcquired, OnCreated, OnPlanning}[rng.IntN(3)]
			s.Wait = 8 * time.Second
		}
		steps = append(steps, s)
		at += s.Hold + s.Wait/2 + dur(2*time.Second, 6*time.Second)
	}
	// 24 partitions go in bundles of 2, so kills and restarts meet bundles in flight.
	bodies := []string{"", `{"job":"synthetic","params":{"partitions":24,"workMs":50}}`}
	keyBody := map[int]string{}
	for at := dur(time.Second, 4*time.Second); at < o.Span; at += dur(3*time.Second, 8*time.Second) {
		s := Step{At: at, Kind: StepManual}
		if rng.IntN(3) == 0 {
			s.Body = bodies[rng.IntN(len(bodies))]
		} else {
			k := rng.IntN(3)
			if _, ok := keyBody[k]; !ok {
				keyBody[k] = bodies[rng.IntN(len(bodies))]
			}
			s.Key, s.Body = fmt.Sprintf("soak-%d-key-%d", o.Seed, k), keyBody[k]
		}
		steps = append(steps, s)
	}
	if o.Pausable != "" {
		for at := o.Span/5 + dur(0, o.Span/10); at+20*time.Second < o.Span; {
			steps = append(steps, Step{At: at, Kind: StepPause, Schedule: o.Pausable})
			at += dur(8*time.Second, 20*time.Second)
			steps = append(steps, Step{At: at, Kind: StepResume, Schedule: o.Pausable})
			at += dur(10*time.Second, 30*time.Second)
		}
	}
	steps = append(steps, deliveryFaults(o)...)
	return withCancels(steps, o)
}

// deliveryFaults are the plan's delivery faults (see NewPlan).
func deliveryFaults(o PlanOptions) []Step {
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 0xde11))
	dur := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	var steps []Step
	var bag []string
	for at := dur(2*time.Second, 5*time.Second); at < o.Span; at += dur(3*time.Second, 8*time.Second) {
		if len(bag) == 0 {
			bag = append([]string(nil), DeliveryFaultKinds...)
			rng.Shuffle(len(bag), func(i, j int) { bag[i], bag[j] = bag[j], bag[i] })
		}
		s := Step{At: at, Kind: bag[0], Wait: 10 * time.Second}
		bag = bag[1:]
		switch s.Kind {
		case FaultControlLost, FaultAnswerLost, FaultCheckCrash:
			s.Target = TargetStart
			if rng.IntN(3) == 0 {
				s.Target = TargetAny
			}
			if s.Kind == FaultCheckCrash {
				s.CrashAfter = dur(0, 1500*time.Millisecond)
			}
		case FaultBlackout:
			s.Target = TargetStart
		}
		steps = append(steps, s)
	}
	return steps
}
