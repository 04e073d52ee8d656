package baton_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"testing"

	"github.com/batonfn/baton"
)

// sumParams are the typed test job's params: count numbers from 0, in chunks of Chunk.
type sumParams struct {
	Count int `json:"count"`
	Chunk int `json:"chunk"`
}

func (p sumParams) Validate() error {
	if p.Count < 0 || p.Chunk < 1 {
		return fmt.Errorf("count %d, chunk %d: want count >= 0 and chunk >= 1", p.Count, p.Chunk)
	}
	return nil
}

type chunk struct{ From, To int }

func planSum(ctx context.Context, p sumParams, cursor string, emit func(chunk, string) error) error {
	from := 0
	if cursor != "" {
		var err error
		if from, err = strconv.Atoi(cursor); err != nil {
			return baton.Permanent(err)
		}
	}
	for ; from < p.Count; from += p.Chunk {
		to := min(from+p.Chunk, p.Count)
		if err := emit(chunk{from, to}, strconv.Itoa(to)); err != nil {
			return err
		}
	}
	return nil
}

func processSum(ctx context.Context, part baton.Part[sumParams, chunk]) (int, error) {
	if part.Payload.From == 13 {
		return 0, baton.Permanent(errors.New("unlucky chunk"))
	}
	s := 0
	for i := part.Payload.From; i < part.Payload.To; i++ {
		s += i
	}
	return s, nil
}

type total struct{ Sum, Failed int }

func aggregateSum(ctx context.Context, run baton.RunOf[sumParams], results iter.Seq2[baton.Outcome[int], error]) (total, error) {
	var t total
	for r, err := range results {
		if err != nil {
			return t, err
		}
		if !r.OK {
			t.Failed++
			continue
		}
		t.Sum += r.Output
	}
	return t, nil
}

func mergeSum(ctx context.Context, run baton.RunOf[sumParams], parts []total) (total, error) {
	var t total
	for _, p := range parts {
		t.Sum += p.Sum
		t.Failed += p.Failed
	}
	return t, nil
}

// Params are decoded strictly: an unknown field is refused naming it, P's Validate runs, and
// a registration's default params get the same checks.
func TestTypedJob_ParamsAreStrict(t *testing.T) {
	job := baton.TypedJob(planSum, processSum, aggregateSum)
	for _, c := range []struct{ params, want string }{
		{`{"count":3,"chunk":1}`, ""},
		{`{"count":3,"chunk":1,"chnk":2}`, `unknown field "chnk"`},
		{`{"count":3}`, "chunk 0"},
		{``, "chunk 0"},
		{`{"count":"3","chunk":1}`, "count"},
		{`{"count":3,"chunk":1} {}`, "more than one JSON value"},
	} {
		err := job.ValidateParams(json.RawMessage(c.params))
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("ValidateParams(%s) = %v, want %q", c.params, err, c.want)
		}
	}
	reg := baton.New()
	reg.Register("sum", job, baton.WithDefaultParams(`{"count":3,"chunk":1,"cunt":2}`))
	err := reg.Err()
	var re *baton.RegistrationError
	if !errors.As(err, &re) || re.Field != "params" || !errors.Is(err, baton.ErrInvalidParams) || !strings.Contains(err.Error(), `"cunt"`) {
		t.Errorf("Register with a typo in the default params: %v", err)
	}
	// Plan and Process refuse bad params as permanent: retrying cannot fix them.
	err = job.Plan(context.Background(), json.RawMessage(`{"x":1}`), "", func(json.RawMessage, string) error { return nil })
	if !errors.Is(err, baton.ErrPermanent) {
		t.Errorf("Plan with bad params: %v, want permanent", err)
	}
}

// Plan, Process and Aggregate speak JSON on Baton's side and Go types on the job's.
func TestTypedJob_EncodesAndDecodes(t *testing.T) {
	ctx := context.Background()
	job := baton.TypedJob(planSum, processSum, aggregateSum)
	params := json.RawMessage(`{"count":20,"chunk":13}`)
	var payloads []string
	var cursors []string
	if err := job.Plan(ctx, params, "", func(p json.RawMessage, next string) error {
		payloads, cursors = append(payloads, string(p)), append(cursors, next)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(payloads, " ") != `{"From":0,"To":13} {"From":13,"To":20}` || strings.Join(cursors, " ") != "13 20" {
		t.Fatalf("plan: %v %v", payloads, cursors)
	}
	out, err := job.Process(ctx, baton.Partition{Run: "r", Index: 0, Attempt: 1, Params: params, Payload: json.RawMessage(payloads[0])})
	if err != nil || string(out) != "78" {
		t.Errorf("process 0: %s %v, want 78", out, err)
	}
	if _, err := job.Process(ctx, baton.Partition{Index: 1, Params: params, Payload: json.RawMessage(payloads[1])}); !errors.Is(err, baton.ErrPermanent) {
		t.Errorf("process 1: %v, want the job's permanent error", err)
	}
	if _, err := job.Process(ctx, baton.Partition{Index: 2, Params: params, Payload: json.RawMessage(`"x"`)}); !errors.Is(err, baton.ErrPermanent) {
		t.Errorf("undecodable payload: %v, want permanent", err)
	}
	results := func(yield func(baton.Result, error) bool) {
		_ = yield(baton.Result{Index: 0, OK: true, Output: out}, nil) &&
			yield(baton.Result{Index: 1, Error: "unlucky chunk"}, nil)
	}
	rep, err := job.Aggregate(ctx, baton.RunInfo{Run: "r", Params: params, Partitions: 2}, results)
	if err != nil || string(rep) != `{"Sum":78,"Failed":1}` {
		t.Errorf("aggregate: %s %v", rep, err)
	}
	bad := func(yield func(baton.Result, error) bool) {
		yield(baton.Result{Index: 0, OK: true, Output: json.RawMessage(`"x"`)}, nil)
	}
	if _, err := job.Aggregate(ctx, baton.RunInfo{Params: params}, bad); !errors.Is(err, baton.ErrPermanent) || !strings.Contains(err.Error(), "partition 0") {
		t.Errorf("aggregate of an unreadable output: %v, want permanent naming the partition", err)
	}
}

// WithMerge makes the job a Merger; without it the job is not one, so Baton reads every
// result at the end instead of folding.
func TestTypedJob_WithMerge(t *testing.T) {
	plain := baton.TypedJob(planSum, processSum, aggregateSum)
	if _, ok := baton.Job(plain).(baton.Merger); ok {
		t.Error("a typed job without WithMerge is a Merger")
	}
	m, ok := plain.WithMerge(mergeSum).(baton.Merger)
	if !ok {
		t.Fatal("WithMerge's job is not a Merger")
	}
	out, err := m.Merge(context.Background(), baton.RunInfo{Params: json.RawMessage(`{"count":1,"chunk":1}`)},
		[]json.RawMessage{json.RawMessage(`{"Sum":1,"Failed":0}`), json.RawMessage(`{"Sum":2,"Failed":1}`)})
	if err != nil || string(out) != `{"Sum":3,"Failed":1}` {
		t.Errorf("merge: %s %v", out, err)
	}
}

// A typed job missing a function is refused at registration, not at the first run.
func TestTypedJob_MissingFunctionIsARegistrationError(t *testing.T) {
	for name, job := range map[string]baton.Job{
		"no-plan":  baton.TypedJob[sumParams, chunk, int, total](nil, processSum, aggregateSum),
		"no-merge": baton.TypedJob(planSum, processSum, aggregateSum).WithMerge(nil),
	} {
		app := baton.New()
		app.Register(name, job)
		err := app.Err()
		var re *baton.RegistrationError
		if !errors.As(err, &re) || re.Field != "job" || !errors.Is(err, baton.ErrNilJob) {
			t.Errorf("%s: %v, want a registration error on the job", name, err)
		}
	}
}

// A typed aggregate reads each failed try's error of a result.
func TestTypedJob_OutcomeCarriesTheTriesErrors(t *testing.T) {
	var got []baton.Outcome[int]
	job := baton.TypedJob(planSum, processSum, func(ctx context.Context, run baton.RunOf[sumParams], results iter.Seq2[baton.Outcome[int], error]) (int, error) {
		for r, err := range results {
			if err != nil {
				return 0, err
			}
			got = append(got, r)
		}
		return len(got), nil
	})
	results := func(yield func(baton.Result, error) bool) {
		yield(baton.Result{Index: 0, Error: "down", Attempts: 2, Errors: []string{"down", "still down"}}, nil)
	}
	if _, err := job.Aggregate(context.Background(), baton.RunInfo{Params: json.RawMessage(`{"count":20,"chunk":13}`)}, results); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Attempts != 2 || strings.Join(got[0].Errors, "|") != "down|still down" {
		t.Errorf("outcomes %+v, want one with 2 attempts and both tries' errors", got)
	}
}
