package batontest_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonfn/baton"
	"github.com/batonfn/baton/batontest"
)

// recorder is a testing.TB that records failures instead of failing the test, so a test can
// assert that Check fails, and how.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *recorder) Error(args ...any) { r.Errorf("%s", fmt.Sprint(args...)) }

func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.errors) > 0
}

// Check must report failures through Errorf only; any other way out would end the test.
func (r *recorder) Fatalf(format string, args ...any) {
	r.TB.Fatalf("Check called Fatalf: "+format, args...)
}
func (r *recorder) FailNow() { r.TB.Fatal("Check called FailNow") }

func (r *recorder) text() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.errors, "\n")
}

// counter is a well-behaved job: params {"n": N} plan N partitions in pairs of numbers; each
// partition outputs its numbers' sum and count; the aggregate totals them. Its fields break
// one property each.
type counter struct {
	// plan
	randomPlan   atomic.Int64 // > 0: every plan numbers its partitions from a new base
	ignoreCursor bool         // planning restarts from 0 whatever the cursor
	skipOnResume bool         // resuming skips the partition right after the cursor
	emptyCursor  bool         // the cursor after partition 0 is ""
	bigPayload   int          // > 0: partition 1's payload is padded to this many bytes
	swallowEmit  bool         // emit's error is dropped
	// process
	calls         sync.Map // partition → times processed
	countCalls    bool     // the output counts how often the partition was processed
	attemptOutput bool     // the output includes the attempt number
	transientBad  bool     // an unreadable payload is a plain (transient) error
	failAll       error    // every partition fails with this error (wrapped permanent or not)
	ignoreCancel  bool     // a partition of a cancelled run runs on for 3 s, whatever its context says
	// merge
	mergeable   bool
	singles     bool // Merge counts every part after the first as one partition (not associative)
	ordered     bool // Merge keeps the order it saw (order-sensitive)
	offByOne    bool // Merge adds one (differs from Aggregate)
	refuseMerge bool // Merge fails
	// aggregate
	failOnFailure bool // Aggregate refuses a failed result
}

type counterParams struct {
	N int `json:"n"`
}

type pair struct {
	A, B int
	Pad  string `json:",omitempty"`
}

type counterOut struct {
	Sum   int   `json:"sum"`
	Count int   `json:"count"`
	Seen  []int `json:"seen,omitempty"`
}

func (c *counter) Plan(ctx context.Context, params json.RawMessage, cursor string, emit func(json.RawMessage, string) error) error {
	var p counterParams
	if err := json.Unmarshal(params, &p); err != nil {
		return baton.Permanent(err)
	}
	start := 0
	if cursor != "" && !c.ignoreCursor {
		n, err := strconv.Atoi(cursor)
		if err != nil {
			return baton.Permanent(err)
		}
		start = n
		if c.skipOnResume {
			start++
		}
	}
	base := 0
	if c.randomPlan.Load() > 0 {
		base = int(c.randomPlan.Add(1))
	}
	for i := start; i < p.N; i++ {
		pl := pair{A: base + 2*i, B: base + 2*i + 1}
		if i == 1 && c.bigPayload > 0 {
			pl.Pad = strings.Repeat("x", c.bigPayload)
		}
		b, _ := json.Marshal(pl)
		next := strconv.Itoa(i + 1)
		if i == 0 && c.emptyCursor {
			next = ""
		}
		if err := emit(b, next); err != nil && !c.swallowEmit {
			return err
		}
	}
	return nil
}

func (c *counter) Process(ctx context.Context, part baton.Partition) (json.RawMessage, error) {
	if c.failAll != nil {
		return nil, fmt.Errorf("partition %d: %w", part.Index, c.failAll)
	}
	var pl pair
	if err := json.Unmarshal(part.Payload, &pl); err != nil {
		if c.transientBad {
			return nil, err
		}
		return nil, baton.Permanent(err)
	}
	if c.ignoreCancel && part.Run == "batontest-cancelled" {
		<-time.After(3 * time.Second) // a slow call that takes no context
	}
	n, _ := c.calls.LoadOrStore(part.Index, new(atomic.Int64))
	calls := n.(*atomic.Int64).Add(1)
	out := counterOut{Sum: pl.A + pl.B, Count: 2}
	if c.countCalls {
		out.Count += int(calls) - 1
	}
	if c.attemptOutput {
		out.Sum += part.Attempt
	}
	return json.Marshal(out)
}

func (c *counter) Aggregate(ctx context.Context, run baton.RunInfo, results iter.Seq2[baton.Result, error]) (json.RawMessage, error) {
	var total counterOut
	for r, err := range results {
		if err != nil {
			return nil, err
		}
		var o counterOut
		if !r.OK && c.failOnFailure {
			return nil, fmt.Errorf("partition %d has no output", r.Index)
		}
		if !r.OK || json.Unmarshal(r.Output, &o) != nil {
			continue
		}
		total.Sum += o.Sum
		total.Count += o.Count
		if c.ordered {
			total.Seen = append(total.Seen, o.Sum)
		}
	}
	return json.Marshal(total)
}

func (c *counter) merge(ctx context.Context, run baton.RunInfo, parts []json.RawMessage) (json.RawMessage, error) {
	if c.refuseMerge {
		return nil, errors.New("cannot merge")
	}
	var total counterOut
	for i, p := range parts {
		var o counterOut
		if err := json.Unmarshal(p, &o); err != nil {
			return nil, baton.Permanent(err)
		}
		total.Sum += o.Sum
		total.Count += o.Count
		if c.singles && i > 0 {
			total.Count += 2 - o.Count
		}
		total.Seen = append(total.Seen, o.Seen...)
	}
	if c.offByOne {
		total.Sum++
	}
	return json.Marshal(total)
}

// mergingCounter is a counter with Merge, so it is a baton.Merger.
type mergingCounter struct{ *counter }

func (m mergingCounter) Merge(ctx context.Context, run baton.RunInfo, parts []json.RawMessage) (json.RawMessage, error) {
	return m.merge(ctx, run, parts)
}

func (c *counter) job() baton.Job {
	if c.mergeable {
		return mergingCounter{c}
	}
	return c
}

// The well-behaved job passes, with and without Merge, and Check returns its report.
func TestCheck_AWellBehavedJobPasses(t *testing.T) {
	for _, mergeable := range []bool{false, true} {
		c := &counter{mergeable: mergeable}
		rep := batontest.Check(t, c.job(), `{"n":12}`)
		// Partition i holds 2i and 2i+1: the sum over 12 partitions is 0+1+…+23 = 276.
		if rep.Partitions != 12 || rep.Succeeded != 12 || !strings.Contains(string(rep.Aggregate), `"sum":276`) {
			t.Errorf("mergeable %v: report %+v %s", mergeable, rep, rep.Aggregate)
		}
	}
}

// Each broken job makes Check fail with a message naming the property (and the partition
// where there is one).
func TestCheck_EachBrokenPropertyFails(t *testing.T) {
	random := &counter{}
	random.randomPlan.Store(1)
	for _, c := range []struct {
		name   string
		job    *counter
		params string
		want   []string
		max    int // MaxPartitions; 0: 10
	}{
		{"non-deterministic plan", random, `{"n":4}`, []string{"plan is not deterministic", "partition 0"}, 0},
		{"cursor ignored", &counter{ignoreCursor: true}, `{"n":4}`, []string{"plan resume", "after partition 0", "partition 1"}, 0},
		{"resume skips one", &counter{skipOnResume: true}, `{"n":4}`, []string{"plan resume", "after partition 0", "partition 1"}, 0},
		{"empty cursor", &counter{emptyCursor: true}, `{"n":4}`, []string{"plan cursor", "after partition 0", "from the start"}, 0},
		{"emit error swallowed", &counter{swallowEmit: true}, `{"n":5}`, []string{"plan", "emit's error must be returned as is"}, 3},
		{"too many partitions", &counter{}, `{"n":5}`, []string{"plan", "more than 3 partitions"}, 3},
		{"oversize payload", &counter{bigPayload: 60 << 10}, `{"n":3}`, []string{"payload size", "partition 1"}, 0},
		{"non-idempotent process", &counter{countCalls: true}, `{"n":3}`, []string{"redelivery", "partition 0", "output"}, 0},
		{"output depends on the attempt", &counter{attemptOutput: true}, `{"n":3}`, []string{"failed attempt", "partition 0"}, 0},
		{"non-associative merge", &counter{mergeable: true, singles: true}, `{"n":4}`, []string{"merge is not associative", "partitions 0, 1, 2"}, 0},
		{"order-sensitive merge", &counter{mergeable: true, ordered: true}, `{"n":4}`, []string{"merge is order-sensitive", "partitions 3 down to 0"}, 0},
		// Past 32 partitions several results fold into one partial, in arrival order.
		{"order-sensitive merge, end to end", &counter{mergeable: true, ordered: true}, `{"n":70}`, []string{"out of order", "aggregate"}, 100},
		{"merge differs from aggregate", &counter{mergeable: true, offByOne: true}, `{"n":4}`, []string{"merge", "Aggregate of all of them"}, 0},
		{"merge fails", &counter{mergeable: true, refuseMerge: true}, `{"n":4}`, []string{"merge", "cannot merge"}, 0},
		{"aggregate refuses a failed partition", &counter{failOnFailure: true}, `{"n":2}`, []string{"failed partition", "partition 0", "has no output"}, 0},
		{"transient error on a bad payload", &counter{transientBad: true}, `{"n":2}`, []string{"permanent errors", "partition 0", "not marked permanent"}, 0},
		{"params that plan nothing", &counter{}, `{"n":0}`, []string{"plan", "no partitions"}, 0},
		{"process ignores cancellation", &counter{ignoreCancel: true}, `{"n":2}`, []string{"cancellation", "partition 0", "did not return within 1s"}, 0},
		{"every partition failing permanently", &counter{failAll: baton.Permanent(errors.New("db down"))}, `{"n":28}`,
			[]string{"all partitions failed", "28 of 28 partitions failed", "partition 0: ", "db down", "AllowAllFailed"}, 100},
		{"every partition failing transiently", &counter{failAll: errors.New("timeout")}, `{"n":28}`,
			[]string{"all partitions failed", "28 of 28 partitions failed", "partition 0: ", "timeout"}, 100},
		{"params that are not an object", &counter{}, `[1]`, []string{"params", "JSON object"}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &recorder{TB: t}
			batontest.Check(r, c.job.job(), c.params, batontest.MaxPartitions(cmp.Or(c.max, 10)))
			if !r.Failed() {
				t.Fatalf("Check passed a job with a %s", c.name)
			}
			t.Logf("Check said:\n%s", r.text())
			for _, w := range c.want {
				if !strings.Contains(r.text(), w) {
					t.Errorf("Check's failure does not say %q:\n%s", w, r.text())
				}
			}
		})
	}
}

// A test that expects every partition to fail says so, and the check then passes.
func TestCheck_AllowAllFailed(t *testing.T) {
	rep := batontest.Check(t, (&counter{failAll: baton.Permanent(errors.New("db down"))}).job(), `{"n":5}`, batontest.AllowAllFailed())
	if rep.Failed != 5 || rep.Succeeded != 0 {
		t.Errorf("report %+v, want 5 failed", rep)
	}
}

// A job whose params validator refuses the params is not run at all.
func TestCheck_RefusedParams(t *testing.T) {
	job := baton.TypedJob(
		func(ctx context.Context, p counterParams, cursor string, emit func(int, string) error) error {
			return nil
		},
		func(ctx context.Context, part baton.Part[counterParams, int]) (int, error) { return 0, nil },
		func(ctx context.Context, run baton.RunOf[counterParams], results iter.Seq2[baton.Outcome[int], error]) (int, error) {
			return 0, nil
		})
	r := &recorder{TB: t}
	batontest.Check(r, job, `{"m":1}`)
	if !strings.Contains(r.text(), "params") || !strings.Contains(r.text(), `unknown field "m"`) {
		t.Errorf("Check with an unknown param: %q", r.text())
	}
}

// A typed job with a merge passes, with Baton's JSON in between.
func TestCheck_TypedJobPasses(t *testing.T) {
	type chunk struct{ From, To int }
	job := baton.TypedJob(
		func(ctx context.Context, p counterParams, cursor string, emit func(chunk, string) error) error {
			from, _ := strconv.Atoi(cmp.Or(cursor, "0"))
			for ; from < p.N; from += 3 {
				if err := emit(chunk{from, min(from+3, p.N)}, strconv.Itoa(min(from+3, p.N))); err != nil {
					return err
				}
			}
			return nil
		},
		func(ctx context.Context, part baton.Part[counterParams, chunk]) (int, error) {
			return part.Payload.To - part.Payload.From, nil
		},
		func(ctx context.Context, run baton.RunOf[counterParams], results iter.Seq2[baton.Outcome[int], error]) (int, error) {
			n := 0
			for r, err := range results {
				if err != nil {
					return 0, err
				}
				n += r.Output
			}
			return n, nil
		},
	).WithMerge(func(ctx context.Context, run baton.RunOf[counterParams], parts []int) (int, error) {
		n := 0
		for _, p := range parts {
			n += p
		}
		return n, nil
	})
	if rep := batontest.Check(t, job, counterParams{N: 100}); string(rep.Aggregate) != "100" || rep.Partitions != 34 {
		t.Errorf("report %+v, aggregate %s", rep, rep.Aggregate)
	}
}
