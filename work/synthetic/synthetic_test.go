package synthetic_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton"

	"github.com/batonfn/baton/work/synthetic"
)

func TestParseParams(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  string
		ok   bool
	}{
		{"minimal", `{"partitions":1}`, true},
		{"everything", `{"partitions":1000000,"workMs":600000,"payloadBytes":100,"failAlways":[1],"failOncePercent":100,"permanent":[2]}`, true},
		{"empty", ``, false},
		{"missing partitions", `{}`, false},
		{"zero partitions", `{"partitions":0}`, false},
		{"too many partitions", `{"partitions":1000001}`, false},
		{"negative work", `{"partitions":1,"workMs":-1}`, false},
		{"work too long", `{"partitions":1,"workMs":600001}`, false},
		{"payload too large", fmt.Sprintf(`{"partitions":1,"payloadBytes":%d}`, baton.MaxPayloadBytes+1), false},
		{"percent over 100", `{"partitions":1,"failOncePercent":101}`, false},
		{"unknown field", `{"partitions":1,"bogus":1}`, false},
		{"not an object", `[1]`, false},
		{"string count", `{"partitions":"5"}`, false},
		{"fail until a time", `{"partitions":1,"failUntil":"2026-11-25T13:00:00Z"}`, true},
		{"fail until no time", `{"partitions":1,"failUntil":"soon"}`, false},
		{"every index listed", `{"partitions":3,"failAlways":[0,1,2],"permanent":[2,1,0]}`, true},
		{"failAlways longer than the run", `{"partitions":2,"failAlways":[0,0,0]}`, false},
		{"permanent longer than the run", `{"partitions":1,"permanent":[0,0]}`, false},
		{"failAlways index past the run", `{"partitions":2,"failAlways":[2]}`, false},
		{"negative permanent index", `{"partitions":2,"permanent":[-1]}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := synthetic.ParseParams(json.RawMessage(tc.raw))
			if (err == nil) != tc.ok {
				t.Errorf("ParseParams(%s) = %v, want ok=%v", tc.raw, err, tc.ok)
			}
			if err2 := synthetic.New().ValidateParams(json.RawMessage(tc.raw)); (err2 == nil) != (err == nil) {
				t.Errorf("ValidateParams disagrees with ParseParams: %v vs %v", err2, err)
			}
		})
	}
}

// plan collects what Plan emits from cursor.
func plan(t *testing.T, params, cursor string) (payloads []json.RawMessage, cursors []string) {
	t.Helper()
	err := synthetic.New().Plan(context.Background(), json.RawMessage(params), cursor, func(p json.RawMessage, next string) error {
		payloads = append(payloads, p)
		cursors = append(cursors, next)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return payloads, cursors
}

func TestPlan_ResumesFromCursor(t *testing.T) {
	all, cursors := plan(t, `{"partitions":5}`, "")
	if len(all) != 5 || cursors[4] != "5" {
		t.Fatalf("planned %d partitions ending at cursor %v, want 5 ending at 5", len(all), cursors)
	}
	for k, c := range []string{"", "1", "3", "5"} {
		got, _ := plan(t, `{"partitions":5}`, c)
		want := all[[]int{0, 1, 3, 5}[k]:]
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("cursor %q: got %s, want %s", c, got, want)
		}
	}
	for _, bad := range []string{"x", "-1", "6"} {
		err := synthetic.New().Plan(context.Background(), json.RawMessage(`{"partitions":5}`), bad, func(json.RawMessage, string) error { return nil })
		if err == nil {
			t.Errorf("cursor %q accepted", bad)
		}
	}
	stop := errors.New("stop")
	err := synthetic.New().Plan(context.Background(), json.RawMessage(`{"partitions":5}`), "", func(json.RawMessage, string) error { return stop })
	if !errors.Is(err, stop) {
		t.Errorf("emit's error: got %v, want it returned as is", err)
	}
}

func TestPlan_PayloadSize(t *testing.T) {
	for _, size := range []int{0, 5, 100, 4096} {
		p, _ := plan(t, fmt.Sprintf(`{"partitions":12,"payloadBytes":%d}`, size), "10")
		for _, pl := range p {
			if len(pl) != max(size, len(`{"i":10}`)) {
				t.Errorf("payloadBytes %d: payload is %d bytes", size, len(pl))
			}
		}
	}
}

func process(t *testing.T, params string, i, attempt int) (synthetic.Output, error) {
	t.Helper()
	out, err := synthetic.New().Process(context.Background(), baton.Partition{Run: "r", Index: i, Attempt: attempt,
		Params: json.RawMessage(params), Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
	var o synthetic.Output
	if err == nil {
		if jerr := json.Unmarshal(out, &o); jerr != nil {
			t.Fatal(jerr)
		}
	}
	return o, err
}

func TestProcess_FailureRules(t *testing.T) {
	params := `{"partitions":100,"failAlways":[3],"permanent":[4],"failOncePercent":50}`
	onceIdx := -1
	for i := range 100 {
		if i != 3 && i != 4 && synthetic.FailsOnce(i, 50) {
			onceIdx = i
			break
		}
	}
	okIdx := -1
	for i := range 100 {
		if i != 3 && i != 4 && !synthetic.FailsOnce(i, 50) {
			okIdx = i
			break
		}
	}
	for _, tc := range []struct {
		name      string
		index     int
		attempt   int
		wantErr   bool
		permanent bool
	}{
		{"always fails, first delivery", 3, 1, true, false},
		{"always fails, fifth delivery", 3, 5, true, false},
		{"permanent", 4, 1, true, true},
		{"fails once: first delivery", onceIdx, 1, true, false},
		{"fails once: second delivery succeeds", onceIdx, 2, false, false},
		{"healthy", okIdx, 1, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := process(t, params, tc.index, tc.attempt)
			switch {
			case tc.wantErr && err == nil:
				t.Errorf("got no error, want one")
			case !tc.wantErr && err != nil:
				t.Errorf("got %v, want success", err)
			case err != nil && errors.Is(err, baton.ErrPermanent) != tc.permanent:
				t.Errorf("got %v, permanent=%v; want permanent=%v", err, errors.Is(err, baton.ErrPermanent), tc.permanent)
			case err == nil && (o.I != tc.index || o.V != int64(tc.index*tc.index)):
				t.Errorf("output %+v, want i=%d v=%d", o, tc.index, tc.index*tc.index)
			}
		})
	}
	// A payload naming another index is a permanent error.
	_, err := synthetic.New().Process(context.Background(), baton.Partition{Index: 1, Attempt: 1,
		Params: json.RawMessage(`{"partitions":5}`), Payload: json.RawMessage(`{"i":2}`)})
	if !errors.Is(err, baton.ErrPermanent) {
		t.Errorf("mismatched payload: got %v, want a permanent error", err)
	}
}

func TestFailsOnce_DeterministicAndProportional(t *testing.T) {
	for _, pct := range []int{0, 5, 50, 100} {
		n := 0
		for i := range 10000 {
			if first, second := synthetic.FailsOnce(i, pct), synthetic.FailsOnce(i, pct); first != second {
				t.Fatalf("FailsOnce(%d, %d) is not deterministic", i, pct)
			}
			if synthetic.FailsOnce(i, pct) {
				n++
			}
		}
		if got := float64(n) / 100; got < float64(pct)-2 || got > float64(pct)+2 {
			t.Errorf("FailsOnce at %d%% picked %.1f%% of 10,000 indexes", pct, got)
		}
	}
}

func TestProcess_WorkHonoursTheContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := synthetic.New().Process(ctx, baton.Partition{Index: 0, Attempt: 1,
		Params: json.RawMessage(`{"partitions":1,"workMs":600000}`), Payload: json.RawMessage(`{"i":0}`)})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want the context's deadline", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("Process took %v after its context ended", d)
	}
}

func results(rs ...baton.Result) iter.Seq2[baton.Result, error] {
	return func(yield func(baton.Result, error) bool) {
		for _, r := range rs {
			if !yield(r, nil) {
				return
			}
		}
	}
}

func TestAggregate(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []baton.Result
		want synthetic.Summary
	}{
		{"empty", nil, synthetic.Summary{Partitions: 0}},
		{"mixed", []baton.Result{
			{Index: 0, OK: true, Output: json.RawMessage(`{"i":0,"v":0}`), Attempts: 1},
			{Index: 1, OK: false, Error: "x", Attempts: 5},
			{Index: 2, OK: true, Output: json.RawMessage(`{"i":2,"v":4}`), Attempts: 2},
			{Index: 3, OK: true, Output: json.RawMessage(`{"i":3,"v":9}`), Attempts: 1},
		}, synthetic.Summary{Partitions: 4, OK: 3, Failed: 1, SumV: 13, Attempts: 9, Retried: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := synthetic.New().Aggregate(context.Background(), baton.RunInfo{Partitions: len(tc.in)}, results(tc.in...))
			if err != nil {
				t.Fatal(err)
			}
			var got synthetic.Summary
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	readErr := errors.New("read failed")
	_, err := synthetic.New().Aggregate(context.Background(), baton.RunInfo{}, func(yield func(baton.Result, error) bool) {
		yield(baton.Result{}, readErr)
	})
	if !errors.Is(err, readErr) {
		t.Errorf("a read error: got %v, want it returned", err)
	}
}

// failUntil fails every partition, transiently, while the job's clock is before it.
func TestProcess_FailUntil(t *testing.T) {
	until := time.Date(2026, 11, 25, 13, 1, 0, 0, time.UTC)
	now := until.Add(-time.Second)
	job := synthetic.NewWithClock(func() time.Time { return now })
	part := baton.Partition{Run: "r", Index: 2, Attempt: 1, Params: json.RawMessage(`{"partitions":3,"failUntil":"2026-11-25T13:01:00Z"}`),
		Payload: json.RawMessage(`{"i":2}`)}
	if _, err := job.Process(context.Background(), part); err == nil || errors.Is(err, baton.ErrPermanent) {
		t.Fatalf("before failUntil: got %v, want a transient error", err)
	}
	now = until
	if out, err := job.Process(context.Background(), part); err != nil || string(out) != `{"i":2,"v":4}` {
		t.Fatalf("at failUntil: %s, %v; want the output", out, err)
	}
}

// The caps Baton's app settings give (Configure) bound what a run may cost beyond the package
// limits: its total payload (partitions × payloadBytes) and how far ahead failUntil may lie; a
// tighter cap the job was built with stays, and zero leaves a limit alone.
func TestConfigure_Caps(t *testing.T) {
	now := time.Date(2026, 11, 25, 13, 0, 0, 0, time.UTC)
	job := synthetic.NewWithClock(func() time.Time { return now })
	job.Configure(10_000, 60_000, 16<<20, time.Hour)
	for _, c := range []struct {
		params, want string // want "": accepted
	}{
		{`{"partitions":10000,"payloadBytes":1677}`, ""},
		{fmt.Sprintf(`{"partitions":10000,"payloadBytes":%d}`, baton.MaxPayloadBytes), "cap of 16777216 bytes"},
		{`{"partitions":348,"payloadBytes":48128}`, ""},
		{`{"partitions":349,"payloadBytes":48128}`, "16796672 bytes"},
		{`{"partitions":10000}`, ""},
		{`{"partitions":1,"failUntil":"2026-11-25T14:00:00Z"}`, ""},
		{`{"partitions":1,"failUntil":"2026-11-25T14:00:01Z"}`, "cap of 1h0m0s ahead"},
		{`{"partitions":10001}`, "cap of 10000"},
		{`{"partitions":1,"workMs":60001}`, "cap of 60000"},
	} {
		err := job.ValidateParams(json.RawMessage(c.params))
		if c.want == "" && err != nil {
			t.Errorf("%s: %v, want accepted", c.params, err)
		}
		if c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want an error saying %q", c.params, err, c.want)
		}
		// Planning checks the same caps: a run admitted before a restart with tighter caps
		// never plans past them.
		perr := job.Plan(context.Background(), json.RawMessage(c.params), "", func(json.RawMessage, string) error { return nil })
		if (perr == nil) != (err == nil) {
			t.Errorf("%s: Plan %v, ValidateParams %v; want them to agree", c.params, perr, err)
		}
	}

	tight := synthetic.NewCapped(synthetic.Caps{MaxPayloadBytes: 1000, MaxFailFor: time.Minute})
	tight.Configure(0, 0, 16<<20, time.Hour)
	if err := tight.ValidateParams(json.RawMessage(`{"partitions":2,"payloadBytes":501}`)); err == nil || !strings.Contains(err.Error(), "cap of 1000 bytes") {
		t.Errorf("a tighter built-in payload cap: %v, want it kept", err)
	}
	late := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if err := tight.ValidateParams(json.RawMessage(`{"partitions":1,"failUntil":"` + late + `"}`)); err == nil || !strings.Contains(err.Error(), "cap of 1m0s") {
		t.Errorf("a tighter built-in failUntil cap: %v, want it kept", err)
	}
	if err := synthetic.New().ValidateParams(json.RawMessage(fmt.Sprintf(`{"partitions":1000000,"payloadBytes":%d,"failUntil":"2999-01-01T00:00:00Z"}`,
		baton.MaxPayloadBytes))); err != nil {
		t.Errorf("without caps: %v, want only the package limits", err)
	}
}
