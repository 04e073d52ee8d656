package synthetic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"iter"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/batonfn/baton"
)

// Name is the job's registry name.
const Name = "synthetic"

// Limits on the params.
const (
	MaxPartitions = 1_000_000
	MaxWorkMs     = 600_000
)

// Params configure a synthetic run (see the package doc).
type Params struct {
	Partitions      int   `json:"partitions"`
	WorkMs          int   `json:"workMs,omitempty"`
	PayloadBytes    int   `json:"payloadBytes,omitempty"`
	FailAlways      []int `json:"failAlways,omitempty"`
	FailOncePercent int   `json:"failOncePercent,omitempty"`
	Permanent       []int `json:"permanent,omitempty"`
	// FailUntil, when set, fails every partition (transiently) while the job's clock is
	// before it: a dependency that is down until then.
	FailUntil time.Time `json:"failUntil,omitzero"`
}

// ParseParams strictly decodes and validates params.
func ParseParams(raw json.RawMessage) (Params, error) {
	var p Params
	if len(bytes.TrimSpace(raw)) == 0 {
		return p, errors.New("params: partitions is required")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, fmt.Errorf("params: %w", err)
	}
	switch {
	case p.Partitions < 1 || p.Partitions > MaxPartitions:
		return p, fmt.Errorf("params: partitions %d, want 1..%d", p.Partitions, MaxPartitions)
	case p.WorkMs < 0 || p.WorkMs > MaxWorkMs:
		return p, fmt.Errorf("params: workMs %d, want 0..%d", p.WorkMs, MaxWorkMs)
	case p.PayloadBytes < 0 || p.PayloadBytes > baton.MaxPayloadBytes:
		return p, fmt.Errorf("params: payloadBytes %d, want 0..%d", p.PayloadBytes, baton.MaxPayloadBytes)
	case p.FailOncePercent < 0 || p.FailOncePercent > 100:
		return p, fmt.Errorf("params: failOncePercent %d, want 0..100", p.FailOncePercent)
	}
	for _, l := range []struct {
		field   string
		indexes []int
	}{{"failAlways", p.FailAlways}, {"permanent", p.Permanent}} {
		if len(l.indexes) > p.Partitions {
			return p, fmt.Errorf("params: %s lists %d indexes, more than the %d partitions", l.field, len(l.indexes), p.Partitions)
		}
		for _, i := range l.indexes {
			if i < 0 || i >= p.Partitions {
				return p, fmt.Errorf("params: %s index %d, want 0..%d", l.field, i, p.Partitions-1)
			}
		}
	}
	return p, nil
}

// FailsOnce reports whether index i fails its first delivery at the given percentage. The
// choice depends only on i, so every run and every test agrees on it.
func FailsOnce(i, percent int) bool {
	h := fnv.New32a()
	h.Write([]byte(strconv.Itoa(i)))
	return int(h.Sum32()%100) < percent
}

// Payload is one partition's payload: its index and padding up to payloadBytes.
type Payload struct {
	I   int    `json:"i"`
	Pad string `json:"pad,omitempty"`
}

// Output is one partition's output.
type Output struct {
	I int   `json:"i"`
	V int64 `json:"v"`
}

// Summary is the run's aggregate.
type Summary struct {
	Partitions int `json:"partitions"`
	OK         int `json:"ok"`
	Failed     int `json:"failed"`
	// SumV is the sum of v over successful partitions.
	SumV int64 `json:"sumV"`
	// Attempts is the sum of the results' delivery counts; Retried counts results that needed
	// more than one delivery.
	Attempts int `json:"attempts"`
	Retried  int `json:"retried"`
}

// Caps bound a deployment's synthetic runs below the package limits, so that whoever may start
// a run cannot have the app burn compute for days or fill its queue. Zero fields leave the
// package limit.
type Caps struct {
	// MaxPartitions caps params.partitions (at most MaxPartitions).
	MaxPartitions int
	// MaxWorkMs caps params.workMs, the work time of each partition (at most MaxWorkMs).
	MaxWorkMs int
	// MaxPayloadBytes caps a run's total payload, params.partitions × params.payloadBytes.
	MaxPayloadBytes int
	// MaxFailFor caps how far past the job's clock, when the params are checked, failUntil
	// may lie.
	MaxFailFor time.Duration
}

// Job is the synthetic job.
type Job struct {
	caps Caps
	now  func() time.Time
}

// New returns the synthetic job with the package limits only.
func New() *Job { return &Job{now: time.Now} }

// NewWithClock returns the synthetic job reading time (for failUntil) from now.
func NewWithClock(now func() time.Time) *Job { return &Job{now: now} }

// NewCapped returns the synthetic job whose runs must also fit caps.
func NewCapped(caps Caps) *Job { return &Job{caps: caps, now: time.Now} }

// Configure applies the caps of Baton's app settings, once at start-up before any invocation:
// the Caps fields in order (BATON_SYNTHETIC_MAX_PARTITIONS, BATON_SYNTHETIC_MAX_WORK_MS,
// BATON_SYNTHETIC_MAX_PAYLOAD_BYTES, and BATON_RUN_TIMEOUT for failUntil; 0: none). A cap the
// job was built with (NewCapped) stays when it is the tighter one.
func (j *Job) Configure(maxPartitions, maxWorkMs, maxPayloadBytes int, maxFailFor time.Duration) {
	j.caps.MaxPartitions = tighter(j.caps.MaxPartitions, maxPartitions)
	j.caps.MaxWorkMs = tighter(j.caps.MaxWorkMs, maxWorkMs)
	j.caps.MaxPayloadBytes = tighter(j.caps.MaxPayloadBytes, maxPayloadBytes)
	j.caps.MaxFailFor = tighter(j.caps.MaxFailFor, maxFailFor)
}

// tighter is the smaller of two caps, where zero means none.
func tighter[T int | time.Duration](a, b T) T {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return min(a, b)
}

var (
	_ baton.Job             = (*Job)(nil)
	_ baton.ParamsValidator = (*Job)(nil)
)

// ValidateParams implements baton.ParamsValidator: the package limits and the job's caps.
func (j *Job) ValidateParams(params json.RawMessage) error {
	_, err := j.params(params)
	return err
}

func (j *Job) params(raw json.RawMessage) (Params, error) {
	p, err := ParseParams(raw)
	switch {
	case err != nil:
		return p, err
	case j.caps.MaxPartitions > 0 && p.Partitions > j.caps.MaxPartitions:
		return p, fmt.Errorf("params: partitions %d is over this app's cap of %d", p.Partitions, j.caps.MaxPartitions)
	case j.caps.MaxWorkMs > 0 && p.WorkMs > j.caps.MaxWorkMs:
		return p, fmt.Errorf("params: workMs %d is over this app's cap of %d", p.WorkMs, j.caps.MaxWorkMs)
	case j.caps.MaxPayloadBytes > 0 && int64(p.Partitions)*int64(p.PayloadBytes) > int64(j.caps.MaxPayloadBytes):
		return p, fmt.Errorf("params: %d partitions of payloadBytes %d make %d bytes, over this app's cap of %d bytes per run",
			p.Partitions, p.PayloadBytes, int64(p.Partitions)*int64(p.PayloadBytes), j.caps.MaxPayloadBytes)
	case j.caps.MaxFailFor > 0 && p.FailUntil.After(j.now().Add(j.caps.MaxFailFor)):
		return p, fmt.Errorf("params: failUntil %s is more than this app's cap of %s ahead", p.FailUntil.UTC().Format(time.RFC3339), j.caps.MaxFailFor)
	}
	return p, nil
}

// Plan emits partitions cursor..N-1; the cursor is the next index in decimal.
func (j *Job) Plan(ctx context.Context, params json.RawMessage, cursor string, emit func(json.RawMessage, string) error) error {
	p, err := j.params(params)
	if err != nil {
		return err
	}
	start := 0
	if cursor != "" {
		if start, err = strconv.Atoi(cursor); err != nil || start < 0 || start > p.Partitions {
			return fmt.Errorf("synthetic: bad cursor %q", cursor)
		}
	}
	for i := start; i < p.Partitions; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := emit(payload(i, p.PayloadBytes), strconv.Itoa(i+1)); err != nil {
			return err
		}
	}
	return nil
}

// payload builds partition i's payload, padded to size bytes when size exceeds the minimum.
func payload(i, size int) json.RawMessage {
	b, _ := json.Marshal(Payload{I: i})
	if pad := size - len(b) - len(`,"pad":""`); pad > 0 {
		b, _ = json.Marshal(Payload{I: i, Pad: strings.Repeat("x", pad)})
	}
	return b
}

// Process applies the failure rules, waits workMs and returns {"i":i,"v":i*i}.
func (j *Job) Process(ctx context.Context, part baton.Partition) (json.RawMessage, error) {
	p, err := ParseParams(part.Params)
	if err != nil {
		return nil, baton.Permanent(err)
	}
	var pl Payload
	if err := json.Unmarshal(part.Payload, &pl); err != nil {
		return nil, baton.Permanent(fmt.Errorf("synthetic: payload: %w", err))
	}
	if pl.I != part.Index {
		return nil, baton.Permanent(fmt.Errorf("synthetic: payload names index %d, message %d", pl.I, part.Index))
	}
	i := pl.I
	switch {
	case slices.Contains(p.Permanent, i):
		return nil, baton.Permanent(fmt.Errorf("synthetic: index %d fails permanently", i))
	case slices.Contains(p.FailAlways, i):
		return nil, fmt.Errorf("synthetic: index %d always fails (delivery %d)", i, part.Attempt)
	case part.Attempt <= 1 && FailsOnce(i, p.FailOncePercent):
		return nil, fmt.Errorf("synthetic: index %d fails on its first delivery", i)
	case j.now().Before(p.FailUntil):
		return nil, fmt.Errorf("synthetic: index %d: dependency down until %s (attempt %d)", i, p.FailUntil.UTC().Format(time.RFC3339), part.Attempt)
	}
	if p.WorkMs > 0 {
		t := time.NewTimer(time.Duration(p.WorkMs) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return json.Marshal(Output{I: i, V: int64(i) * int64(i)})
}

// Aggregate sums the outputs.
func (*Job) Aggregate(ctx context.Context, run baton.RunInfo, results iter.Seq2[baton.Result, error]) (json.RawMessage, error) {
	s := Summary{Partitions: run.Partitions}
	for r, err := range results {
		if err != nil {
			return nil, err
		}
		s.Attempts += r.Attempts
		if r.Attempts > 1 {
			s.Retried++
		}
		if !r.OK {
			s.Failed++
			continue
		}
		var o Output
		if err := json.Unmarshal(r.Output, &o); err != nil {
			return nil, baton.Permanent(fmt.Errorf("synthetic: output of partition %d: %w", r.Index, err))
		}
		s.OK++
		s.SumV += o.V
	}
	return json.Marshal(s)
}

// Merge adds partial summaries: every field is a count or a sum, so any grouping gives the same
// total.
func (*Job) Merge(ctx context.Context, run baton.RunInfo, parts []json.RawMessage) (json.RawMessage, error) {
	total := Summary{Partitions: run.Partitions}
	for _, part := range parts {
		var s Summary
		if err := json.Unmarshal(part, &s); err != nil {
			return nil, baton.Permanent(fmt.Errorf("synthetic: partial aggregate: %w", err))
		}
		total.OK += s.OK
		total.Failed += s.Failed
		total.SumV += s.SumV
		total.Attempts += s.Attempts
		total.Retried += s.Retried
	}
	return json.Marshal(total)
}
