package batontest

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonfn/baton"
	"github.com/batonfn/baton/internal/engine/limit"
)

// failures is a testing.TB that keeps what Check reports.
type failures struct {
	testing.TB
	mu  sync.Mutex
	got []string
}

func (f *failures) Helper() {}

func (f *failures) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, fmt.Sprintf(format, args...))
}

// crowd is a job whose partitions wait, each, until want of them run at once (or their
// context ends).
type crowd struct {
	want     int64
	inFlight atomic.Int64
	reached  chan struct{}
	once     sync.Once
}

func (c *crowd) Plan(ctx context.Context, params json.RawMessage, cursor string, emit func(json.RawMessage, string) error) error {
	start := 0
	if cursor != "" {
		var err error
		if start, err = strconv.Atoi(cursor); err != nil {
			return baton.Permanent(err)
		}
	}
	for i := start; i < 6; i++ {
		if err := emit(json.RawMessage(fmt.Sprint(i)), fmt.Sprint(i+1)); err != nil {
			return err
		}
	}
	return nil
}

func (c *crowd) Process(ctx context.Context, p baton.Partition) (json.RawMessage, error) {
	if c.inFlight.Add(1) >= c.want {
		c.once.Do(func() { close(c.reached) })
	}
	defer c.inFlight.Add(-1)
	select {
	case <-c.reached:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return p.Payload, nil
}

func (c *crowd) Aggregate(ctx context.Context, run baton.RunInfo, results iter.Seq2[baton.Result, error]) (json.RawMessage, error) {
	return json.RawMessage("0"), nil
}

// A limit that does not hold (the run enforces a looser one) lets more partitions than its
// MaxInFlight run at once: Check catches it, naming the bound and what it saw.
func TestUnderLimit_CatchesTooManyAtOnce(t *testing.T) {
	job := &crowd{want: 3, reached: make(chan struct{})}
	f := &failures{TB: t}
	Check(f, job, `{}`, UnderLimit(baton.Limit{Name: "crm", MaxInFlight: 2}), Timeout(time.Minute),
		func(s *settings) { s.enforced = &baton.Limit{Name: "crm", MaxInFlight: 6} })
	got := strings.Join(f.got, "\n")
	if !strings.Contains(got, "batontest: under limit: ") || !strings.Contains(got, "partitions ran at once, more than the limit's MaxInFlight 2") {
		t.Fatalf("failures %q, want the breach of MaxInFlight 2", got)
	}
}

// The run's clock under the real limiter: a wait for a start the rate reserved moves the
// clock there at once, and a grant's renewals wait for the clock (they would run it away if
// they moved it): runClock.sleep tells them apart by length, which this pins.
func TestRunClock_StartsMoveItRenewalsWaitForIt(t *testing.T) {
	ctx := t.Context()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := newRunClock(t0)
	store := newMemLimits()
	lim, err := limit.New(limit.Config{Store: store, Holder: "h", Lease: limitLease, Horizon: limitHorizon, Now: clock.now, Sleep: clock.sleep})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := limitSpec(baton.Limit{Name: "api", MaxInFlight: 1, Rate: 1, Per: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	g, _, err := lim.Acquire(ctx, spec, "bundle", 2)
	if err != nil || g.Partitions != 2 {
		t.Fatalf("grant %+v %v, want 2 starts", g, err)
	}
	h := lim.Hold(ctx, g)
	for k := range 2 {
		if err := h.Start(ctx); err != nil {
			t.Fatalf("start %d: %v", k, err)
		}
		h.Done()
	}
	if got := clock.now(); !got.Equal(t0.Add(30 * time.Second)) {
		t.Fatalf("the clock is at +%s after the second start, want +30s: the start did not move it, or a renewal did", got.Sub(t0))
	}
	deadline := time.Now().Add(time.Minute)
	for clock.waiting() == 0 { // the renewals' wait
		if time.Now().After(deadline) {
			t.Fatal("the grant's renewals never wait on the clock")
		}
		time.Sleep(time.Millisecond)
	}
	clock.advance(t0.Add(limitLease/3 + time.Minute)) // they may have begun their wait at +30s
	for {
		st, err := store.Read(ctx, "api")
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Slots) == 1 && st.Slots[0].Expires.After(g.Expires) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no renewal once the clock passed a third of a lease: %+v", st)
		}
		time.Sleep(time.Millisecond)
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := clock.now(); !got.Equal(t0.Add(limitLease/3 + time.Minute)) {
		t.Fatalf("the clock is at +%s, want where the test moved it: a renewal moved it", got.Sub(t0))
	}
}
