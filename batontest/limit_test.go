package batontest_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonfn/baton"
	"github.com/batonfn/baton/batontest"
)

// gauge counts a job's partitions in Process at once; the first to start waits until want of
// them run together (or its context ends), so a run that never overlaps them cannot pass.
type gauge struct {
	want           int64
	inFlight, peak atomic.Int64
	reached        chan struct{}
	once           sync.Once
}

func newGauge(want int64) *gauge { return &gauge{want: want, reached: make(chan struct{})} }

// enter counts a partition in and returns how many run now, and the function that counts it out.
func (g *gauge) enter(ctx context.Context) (int64, func(), error) {
	n := g.inFlight.Add(1)
	for q := g.peak.Load(); n > q && !g.peak.CompareAndSwap(q, n); q = g.peak.Load() {
	}
	if n >= g.want {
		g.once.Do(func() { close(g.reached) })
	}
	select {
	case <-g.reached:
	case <-ctx.Done():
		g.inFlight.Add(-1)
		return n, nil, ctx.Err()
	}
	return n, func() { g.inFlight.Add(-1) }, nil
}

type nParams struct{ N int }

func planN(ctx context.Context, p nParams, cursor string, emit func(int, string) error) error {
	start := 0
	if cursor != "" {
		if _, err := fmt.Sscan(cursor, &start); err != nil {
			return baton.Permanent(err)
		}
	}
	for i := start; i < p.N; i++ {
		if err := emit(i, fmt.Sprint(i+1)); err != nil {
			return err
		}
	}
	return nil
}

func sumOutputs(ctx context.Context, run baton.RunOf[nParams], results iter.Seq2[baton.Outcome[int], error]) (int, error) {
	sum := 0
	for r, err := range results {
		if err != nil {
			return 0, err
		}
		sum += r.Output
	}
	return sum, nil
}

// Under a limit of 2 in flight the job's partitions run 2 at once, never more, and a job that
// never asks to slow down shows no slow-down.
func TestUnderLimit_RunsUpToMaxInFlightAtOnce(t *testing.T) {
	g := newGauge(2)
	job := baton.TypedJob(planN, func(ctx context.Context, part baton.Part[nParams, int]) (int, error) {
		_, done, err := g.enter(ctx)
		if err != nil {
			return 0, err
		}
		defer done()
		return part.Payload, nil
	}, sumOutputs)
	rep := batontest.Check(t, job, nParams{N: 8}, batontest.UnderLimit(baton.Limit{Name: "crm", MaxInFlight: 2}),
		batontest.Timeout(time.Minute))
	if got := g.peak.Load(); got != 2 {
		t.Errorf("the job saw %d partitions at once, want 2", got)
	}
	if rep.SlowDowns != 0 || rep.Succeeded != 8 || string(rep.Aggregate) != "28" {
		t.Errorf("report %+v %s, want 8 succeeded, an aggregate of 28 and no slow-down", rep, rep.Aggregate)
	}
}

// A partition that asks to slow down more times than it has tries (5) and deliveries (5) is
// run again each time on its first try, and succeeds; the report counts every slow-down.
func TestUnderLimit_SlowDownSpendsNoTry(t *testing.T) {
	var (
		mu       sync.Mutex
		slow     = 7
		attempts []int
	)
	job := baton.TypedJob(planN, func(ctx context.Context, part baton.Part[nParams, int]) (int, error) {
		if part.Index != 0 {
			return part.Payload, nil
		}
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, part.Attempt)
		if slow > 0 {
			slow--
			return 0, baton.SlowDown(10*time.Second, errors.New("429 Too Many Requests"))
		}
		return part.Payload, nil
	}, sumOutputs)
	rep := batontest.Check(t, job, nParams{N: 4}, batontest.UnderLimit(baton.Limit{Name: "api", MaxInFlight: 1}))
	if rep.SlowDowns != 7 || rep.Succeeded != 4 {
		t.Errorf("report %+v, want 7 slow-downs and 4 partitions succeeded", rep)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(attempts) < 8 {
		t.Fatalf("partition 0 ran %d times, want 7 slow-downs and a success first", len(attempts))
	}
	for k, a := range attempts[:8] {
		if a != 1 {
			t.Fatalf("partition 0's run %d was attempt %d (all: %v): a slow-down spent a try", k+1, a, attempts)
		}
	}
}

// A limit with a rate runs every partition, its waits taking none of the test's time: at 1
// partition a minute, 10 partitions take 9 minutes of the run's time; at 1 in 40 minutes, 4
// take 2 hours, longer than a run timeout, but never a run timeout without a result.
func TestUnderLimit_RateWaitsTakeNoRealTime(t *testing.T) {
	var ran atomic.Int64
	job := baton.TypedJob(planN, func(ctx context.Context, part baton.Part[nParams, int]) (int, error) {
		ran.Add(1)
		return part.Payload, nil
	}, sumOutputs)
	rep := batontest.Check(t, job, nParams{N: 10}, batontest.UnderLimit(baton.Limit{Name: "api", Rate: 1, Per: time.Minute}),
		batontest.Timeout(time.Minute))
	if rep.Succeeded != 10 || ran.Load() < 10 {
		t.Errorf("report %+v after %d runs, want every partition succeeded", rep, ran.Load())
	}
	if rep := batontest.Check(t, job, nParams{N: 4}, batontest.UnderLimit(baton.Limit{Name: "api", Rate: 1, Per: 40 * time.Minute})); rep.Succeeded != 4 {
		t.Errorf("report %+v at 1 in 40 minutes, want every partition succeeded", rep)
	}
}

// A Merger keeps its Merge under a limit.
func TestUnderLimit_MergerPasses(t *testing.T) {
	c := &counter{mergeable: true}
	rep := batontest.Check(t, c.job(), `{"n":12}`, batontest.UnderLimit(baton.Limit{Name: "crm", MaxInFlight: 3, Rate: 20, Burst: 4}))
	if rep.Succeeded != 12 || !strings.Contains(string(rep.Aggregate), `"sum":276`) {
		t.Errorf("report %+v %s", rep, rep.Aggregate)
	}
}

// What fails a check under a limit: a limit out of range (naming the field, before anything
// runs), a job that keeps slowing down or a rate that cannot run it within a run's time, and
// results that differ under the limit.
func TestUnderLimit_Failures(t *testing.T) {
	var calls atomic.Int64
	plain := baton.TypedJob(planN, func(ctx context.Context, part baton.Part[nParams, int]) (int, error) {
		calls.Add(1)
		return part.Payload, nil
	}, sumOutputs)
	alwaysOK := baton.TypedJob(planN, func(ctx context.Context, part baton.Part[nParams, int]) (int, error) {
		return part.Payload, nil
	}, sumOutputs)
	alwaysSlow := baton.TypedJob(planN, func(ctx context.Context, part baton.Part[nParams, int]) (int, error) {
		return 0, baton.SlowDown(time.Hour, errors.New("503 Service Unavailable"))
	}, sumOutputs)
	g := newGauge(2)
	crowded := baton.TypedJob(planN, func(ctx context.Context, part baton.Part[nParams, int]) (int, error) {
		n, done, err := g.enter(ctx) // the output is how many ran at once: 1 unless under the limit
		if err != nil {
			return 0, err
		}
		defer done()
		return int(n), nil
	}, sumOutputs)
	for _, c := range []struct {
		name  string
		job   baton.Job
		limit baton.Limit
		want  []string
	}{
		{"bad name", plain, baton.Limit{Name: "CRM", MaxInFlight: 1}, []string{"batontest: limit:", "invalid limit", "name:"}},
		{"no bound", plain, baton.Limit{Name: "crm"}, []string{"batontest: limit:", "invalid limit", "maxInFlight: a limit needs maxInFlight or rate"}},
		{"negative", plain, baton.Limit{Name: "crm", MaxInFlight: -1}, []string{"batontest: limit:", "maxInFlight: -1"}},
		{"burst above rate", plain, baton.Limit{Name: "crm", Rate: 2, Burst: 3}, []string{"batontest: limit:", "burst: 3"}},
		{"keeps slowing down", alwaysSlow, baton.Limit{Name: "crm", MaxInFlight: 2},
			[]string{"batontest: under limit: 1h0m0s of the run's time went by without a try that ended other than by slowing down", "slow-downs"}},
		{"rate too slow for a run", alwaysOK, baton.Limit{Name: "crm", Rate: 1, Per: 2 * time.Hour},
			[]string{"batontest: under limit: 1h0m0s of the run's time went by without a try that ended other than by slowing down"}},
		{"differs under the limit", crowded, baton.Limit{Name: "crm", MaxInFlight: 2},
			[]string{"batontest: under limit: partition", "output 2, but 1 when every partition is processed once in order"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls.Store(0)
			r := &recorder{TB: t}
			batontest.Check(r, c.job, nParams{N: 4}, batontest.UnderLimit(c.limit), batontest.AllowAllFailed(), batontest.Timeout(time.Minute))
			got := r.text()
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("failures %q, want one with %q", got, w)
				}
			}
			if c.job == plain && calls.Load() != 0 {
				t.Errorf("Process ran %d times with a limit out of range, want none", calls.Load())
			}
		})
	}
}

// A larger run goes out in bundles, as the leader sends it: a bundle runs its partitions under
// its grant's slots, and one that slows down sends the rest of its bundle back with it.
func TestUnderLimit_Bundles(t *testing.T) {
	g := newGauge(3)
	var (
		mu   sync.Mutex
		slow = 2
	)
	job := baton.TypedJob(planN, func(ctx context.Context, part baton.Part[nParams, int]) (int, error) {
		_, done, err := g.enter(ctx)
		if err != nil {
			return 0, err
		}
		defer done()
		if part.Index == 9 {
			mu.Lock()
			defer mu.Unlock()
			if slow > 0 {
				slow--
				return 0, baton.SlowDown(time.Minute, errors.New("429 Too Many Requests"))
			}
		}
		return 1, nil
	}, sumOutputs)
	rep := batontest.Check(t, job, nParams{N: 64}, batontest.UnderLimit(baton.Limit{Name: "crm", MaxInFlight: 3}),
		batontest.Timeout(time.Minute))
	if got := g.peak.Load(); got != 3 {
		t.Errorf("the job saw %d partitions at once, want 3", got)
	}
	if rep.SlowDowns != 2 || rep.Succeeded != 64 || string(rep.Aggregate) != "64" {
		t.Errorf("report %+v %s, want 64 succeeded and 2 slow-downs", rep, rep.Aggregate)
	}
}

// A job that fails with a plain error on a 429 (instead of baton.SlowDown) spends its tries
// and shows no slow-down: the report tells it from a job that slows down.
func TestUnderLimit_PlainErrorIsNoSlowDown(t *testing.T) {
	var calls atomic.Int64
	job := baton.TypedJob(planN, func(ctx context.Context, part baton.Part[nParams, int]) (int, error) {
		if calls.Add(1) <= 3 {
			return 0, errors.New("GET /contacts: 429 Too Many Requests")
		}
		return part.Payload, nil
	}, sumOutputs)
	rep := batontest.Check(t, job, nParams{N: 4}, batontest.UnderLimit(baton.Limit{Name: "crm", MaxInFlight: 2}))
	if rep.SlowDowns != 0 || rep.Succeeded != 4 {
		t.Errorf("report %+v, want 4 succeeded and no slow-down", rep)
	}
}
