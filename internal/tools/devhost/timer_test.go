package devhost

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

func seeded(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 1)) }

// TestPickOne_OnlyRunningInstances: paused, starting, restarting and failed instances are never
// chosen; every running one is, over enough draws; with none running nothing is.
func TestPickOne_OnlyRunningInstances(t *testing.T) {
	cands := []timerCandidate{
		{"instance-1", StateRunning}, {"instance-2", StatePaused}, {"instance-3", StateRunning},
		{"instance-4", StateRestarting}, {"instance-5", StateFailed}, {"instance-6", StateStarting},
		{"instance-7", StateRunning},
	}
	rng := seeded(7)
	seen := map[string]int{}
	for range 300 {
		name, ok := pickOne(rng, cands)
		if !ok {
			t.Fatal("no instance picked while three are running")
		}
		seen[name]++
	}
	for name := range seen {
		if name != "instance-1" && name != "instance-3" && name != "instance-7" {
			t.Errorf("picked %s, which is not running (picks %v)", name, seen)
		}
	}
	for _, want := range []string{"instance-1", "instance-3", "instance-7"} {
		if seen[want] == 0 {
			t.Errorf("running %s never picked in 300 draws: %v", want, seen)
		}
	}
	none := []timerCandidate{{"instance-1", StatePaused}, {"instance-2", StateRestarting}}
	if name, ok := pickOne(rng, none); ok {
		t.Errorf("picked %s with no running instance", name)
	}
}

// TestPickOne_SeededIsReproducible: the same seed and the same states give the same choices;
// another seed gives other choices.
func TestPickOne_SeededIsReproducible(t *testing.T) {
	cands := []timerCandidate{{"a", StateRunning}, {"b", StateRunning}, {"c", StateRunning}, {"d", StateRunning}, {"e", StateRunning}}
	draw := func(seed uint64) []string {
		rng := seeded(seed)
		var out []string
		for range 40 {
			name, _ := pickOne(rng, cands)
			out = append(out, name)
		}
		return out
	}
	a, b, c := draw(42), draw(42), draw(43)
	if !slices.Equal(a, b) {
		t.Errorf("seed 42 drew %v then %v", a, b)
	}
	if slices.Equal(a, c) {
		t.Errorf("seeds 42 and 43 drew the same 40 choices %v", a)
	}
}

func TestParseTimerMode(t *testing.T) {
	for in, want := range map[string]TimerMode{"": TimerAll, "all": TimerAll, "ONE": TimerOne, " one ": TimerOne} {
		if got, err := ParseTimerMode(in); err != nil || got != want {
			t.Errorf("ParseTimerMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseTimerMode("some"); err == nil {
		t.Error(`ParseTimerMode("some") accepted`)
	}
	if _, err := New(Options{AppRoot: t.TempDir(), TimerMode: "every"}); err == nil {
		t.Error("New accepted TimerMode \"every\"")
	}
}

// TestHost_TimerOneFiresOnOneRunningInstance: in mode one each occurrence fires on exactly one
// instance, never on a paused one, and the paused instance gets no past-due fire on SIGCONT
// (the occurrence went to another instance).
func TestHost_TimerOneFiresOnOneRunningInstance(t *testing.T) {
	var mu sync.Mutex
	ticks := map[string][]string{} // occurrence → instances invoked
	h := startFake(t, fakeApp(t, false), 3, map[string]string{"FAKE_SCHEDULE": "* * * * * *"}, func(o *Options) {
		o.TimerMode = TimerOne
		o.TimerSeed = 99
		o.MaxTimerFires = 4
		o.OnInvoke = func(r InvokeRecord) {
			if r.Function == "Tick" {
				mu.Lock()
				ticks[r.Detail] = append(ticks[r.Detail], r.Instance)
				mu.Unlock()
			}
		}
	})
	ctx := testCtx(t, 30*time.Second)
	if err := h.Do(ctx, "instance-2", ActionStop); err != nil {
		t.Fatal(err)
	}
	fires, err := h.WaitFires(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing is kept for the paused instance to fire past due on SIGCONT: in this mode the
	// occurrence went to another instance.
	tt := h.timers[0]
	tt.mu.Lock()
	kept := len(tt.missed)
	tt.mu.Unlock()
	if kept != 0 {
		t.Errorf("%d occurrence(s) kept to fire past due on resume, want none in mode one", kept)
	}
	if err := h.Do(ctx, "instance-2", ActionCont); err != nil {
		t.Fatal(err)
	}
	for {
		mu.Lock()
		n := 0
		for _, ins := range ticks {
			n += len(ins)
		}
		mu.Unlock()
		if n >= 4 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%d Tick invocations, want 4 (one per occurrence)", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, f := range fires {
		if len(f.Instances) != 1 || f.Instances[0] == "instance-2" {
			t.Errorf("occurrence %s fired on %v, want one running instance (instance-2 is paused)", f.Occurrence, f.Instances)
		}
		got := ticks[f.Occurrence.UTC().Format(time.RFC3339)]
		if !slices.Equal(got, f.Instances) {
			t.Errorf("occurrence %s invoked on %v, recorded as fired on %v", f.Occurrence, got, f.Instances)
		}
	}
	if n := len(ticks); n != len(fires) {
		t.Errorf("Tick invoked for %d occurrences, %d fired: %v", n, len(fires), ticks)
	}
}
