package work

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// EnvelopeVersion is the envelope schema this code writes and reads.
const EnvelopeVersion = 1

// MaxEnvelopeBytes bounds an encoded envelope: 48 KiB is the largest raw body a base64
// Storage-queue message can carry (64 KiB of text); Service Bus allows more, but one limit for
// both transports keeps a run portable.
const MaxEnvelopeBytes = 48 << 10

// MaxTraceBytes bounds an envelope's trace context (a W3C traceparent is 55 bytes).
const MaxTraceBytes = 64

// MaxPayloadBytes bounds a partition's job payload inside the envelope.
const MaxPayloadBytes = MaxEnvelopeBytes - 1024

// Kind is what a message asks for.
type Kind string

const (
	// KindPartition asks a worker to process one partition, or a bundle of consecutive ones
	// (Count above 1).
	KindPartition Kind = "partition"
	// KindCheck is the dead-man's switch: look at a run and resume, retry or finish it.
	KindCheck Kind = "check"
)

// Envelope is the body of every Baton message. Its JSON names avoid every key the Functions
// host sets in trigger metadata (see TestEnvelope_NoMetadataCollision).
type Envelope struct {
	Version int    `json:"baton"`
	Kind    Kind   `json:"kind"`
	Run     string `json:"run"`
	// Epoch is the run lease's epoch the message was sent under: at least 1 for a partition;
	// 0 for the check that starts a run no planner has taken up yet.
	Epoch int64 `json:"epoch"`
	// Part is the partition index (partition messages only); a bundle's first.
	Part int `json:"part"`
	// Count is a bundle's number of consecutive partitions, Part to Part+Count-1: 2 to
	// MaxBundle; 0 for a message of one partition (the only kind a retry or a check is).
	Count int `json:"count,omitempty"`
	// Block is the span size of the message's plan batch (ledger.PlanBatch.Bundle): its
	// partitions' results are recorded in the blocks of ledger.SpanOf(i, Block). 0 for a
	// partition that records its own (a retry or split, whose span's block exists already,
	// and every partition of a batch planned without blocks).
	Block int `json:"block,omitempty"`
	// Parts is the run's partition count when known at send time (a planned run's messages
	// and the last plan batch's), else 0; the manifest is authoritative.
	Parts int `json:"parts"`
	// Round numbers re-enqueue rounds (partition) or check rounds (check).
	Round int `json:"round,omitempty"`
	// Handover marks the check a stopping leader sends for a run it was enqueueing (a check
	// of round 0 only): the instance it reaches waits for the lease to be released instead of
	// giving up on a lease that is still held.
	Handover bool `json:"handover,omitempty"`
	// Attempt numbers the tries of a partition under its job's RetryPolicy: 0 or 1 for the
	// first, n for the retry the worker scheduled after try n−1 failed (partition messages
	// only).
	Attempt int `json:"attempt,omitempty"`
	// Redrive is the redrive round of a partition sent again by a redrive (0: the run's first
	// round); its outcome is recorded in that round (ledger.RoundRun).
	Redrive int `json:"redrive,omitempty"`
	// Wait numbers the times a job's limit sent the message back to wait (0: never): it is
	// the same partitions again, on the same try, under a new message ID.
	Wait int `json:"wait,omitempty"`
	// Errors are the earlier tries' errors, shortened, oldest first (a retry's only).
	Errors  []string        `json:"errors,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
	// Payloads are a bundle's payloads, one per partition in order (JSON null for a partition
	// without one), or none when no partition has one. A bundle leaves Payload empty.
	Payloads []json.RawMessage `json:"payloads,omitempty"`
	// Trace is the W3C traceparent of the span that sent the message (telemetry on), so that
	// the instance handling it continues the run's trace; empty otherwise.
	Trace string `json:"trace,omitempty"`
}

// MaxBundle is the most partitions one message carries, and the highest cap a job may set
// (Registry.SetMaxBundle); a job's cap is DefaultMaxBundle unless it sets one. A bundle of
// more than DefaultFoldBlock partitions starts on a multiple of its size, so it spans whole
// fold blocks and done units and updates one partial and appends one done record for each.
const MaxBundle = 4 * DefaultMaxBundle

// Singles returns the partitions the message carries, each as a message of one partition:
// itself when it is not a bundle.
func (e Envelope) Singles() []Envelope {
	if e.Count < 2 {
		return []Envelope{e}
	}
	out := make([]Envelope, e.Count)
	for k := range out {
		one := e
		one.Part, one.Count, one.Payloads, one.Payload = e.Part+k, 0, nil, nil
		if k < len(e.Payloads) && string(e.Payloads[k]) != "null" {
			one.Payload = e.Payloads[k]
		}
		out[k] = one
	}
	return out
}

// ErrMalformed marks a message that can never be processed: it should be dead-lettered.
var ErrMalformed = errors.New("malformed message")

// DecodeEnvelope strictly decodes and validates a message body. Every error wraps
// ErrMalformed.
func DecodeEnvelope(body []byte) (Envelope, error) {
	var e Envelope
	if len(body) > MaxEnvelopeBytes {
		return e, fmt.Errorf("%w: %d bytes exceeds the %d-byte limit", ErrMalformed, len(body), MaxEnvelopeBytes)
	}
	// encoding/json alone would match names in any case, let a repeated key's last value win and
	// ignore what follows the object: a body that two readers could read differently is refused.
	if err := checkObjectKeys(body, envelopeFields); err != nil {
		return e, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if err := json.Unmarshal(body, &e); err != nil {
		return e, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if err := e.Validate(); err != nil {
		return e, err
	}
	return e, nil
}

// envelopeFields are Envelope's JSON names, read from its tags.
var envelopeFields = func() map[string]bool {
	names := map[string]bool{}
	t := reflect.TypeFor[Envelope]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		names[name] = true
	}
	return names
}()

// checkObjectKeys reports an error unless body is exactly one JSON object (surrounding white
// space aside) whose keys are all in fields, spelled exactly, each at most once.
func checkObjectKeys(body []byte, fields map[string]bool) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil {
		return err
	} else if tok != json.Delim('{') {
		return fmt.Errorf("want a JSON object, got %v", tok)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key := tok.(string) // inside an object, More is followed by a key
		switch {
		case !fields[key]:
			return fmt.Errorf("unknown field %q (names are case-sensitive)", key)
		case seen[key]:
			return fmt.Errorf("field %q appears twice", key)
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return fmt.Errorf("field %q: %w", key, err)
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// Validate checks every field; errors wrap ErrMalformed.
func (e Envelope) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
	if e.Version != EnvelopeVersion {
		return bad("envelope version %d, want %d", e.Version, EnvelopeVersion)
	}
	if err := ledger.ValidateRunID(e.Run); err != nil {
		return bad("%v", err)
	}
	// A check may carry epoch 0: the first check of a run that no planner has taken up yet.
	if e.Epoch < 0 || e.Kind != KindCheck && e.Epoch < 1 {
		return bad("epoch %d, want >= 1 (>= 0 for a check)", e.Epoch)
	}
	if e.Round < 0 {
		return bad("round %d, want >= 0", e.Round)
	}
	if e.Parts < 0 {
		return bad("parts %d, want >= 0", e.Parts)
	}
	if len(e.Trace) > MaxTraceBytes {
		return bad("trace of %d bytes exceeds %d", len(e.Trace), MaxTraceBytes)
	}
	switch e.Kind {
	case KindPartition:
		if e.Handover {
			return bad("a partition message is no handover check")
		}
		if e.Part < 0 || (e.Parts > 0 && e.Part+max(e.Count, 1) > e.Parts) {
			return bad("part %d (count %d) out of range [0, %d)", e.Part, max(e.Count, 1), e.Parts)
		}
		if err := e.validateBundle(); err != nil {
			return bad("%v", err)
		}
		if e.Block != 0 && (e.Block < 2 || e.Block > ledger.MaxSpan || e.Block&(e.Block-1) != 0 ||
			e.Part/e.Block != (e.Part+max(e.Count, 1)-1)/e.Block) {
			return bad("block %d: want a power of two from 2 to %d whose span holds parts %d to %d", e.Block, ledger.MaxSpan, e.Part, e.Part+max(e.Count, 1)-1)
		}
		if len(e.Payload) > MaxPayloadBytes {
			return bad("payload of %d bytes exceeds %d", len(e.Payload), MaxPayloadBytes)
		}
		if len(e.Payload) > 0 && !json.Valid(e.Payload) {
			return bad("payload is not JSON")
		}
		if e.Redrive < 0 || e.Redrive > 0 && (e.Count != 0 || e.Block != 0) {
			return bad("redrive %d (count %d, block %d): a redriven partition travels alone, in a round >= 1", e.Redrive, e.Count, e.Block)
		}
		if e.Wait < 0 {
			return bad("wait %d, want >= 0", e.Wait)
		}
		if e.Attempt < 0 || e.Attempt > MaxRetryAttempts || len(e.Errors) >= max(e.Attempt, 1) {
			return bad("attempt %d with %d errors, want 0..%d with fewer errors", e.Attempt, len(e.Errors), MaxRetryAttempts)
		}
		for i, s := range e.Errors {
			if len(s) > MaxAttemptError {
				return bad("error %d is %d bytes, limit %d", i, len(s), MaxAttemptError)
			}
		}
	case KindCheck:
		if e.Part != 0 || e.Count != 0 || e.Block != 0 || len(e.Payload) != 0 || len(e.Payloads) != 0 || e.Attempt != 0 || len(e.Errors) != 0 || e.Redrive != 0 || e.Wait != 0 {
			return bad("a check message carries no part, count, block, payload, attempt, errors or redrive")
		}
		if e.Handover && e.Round != 0 {
			return bad("a handover check has round 0, not %d", e.Round)
		}
	default:
		return bad("kind %q, want %q or %q", e.Kind, KindPartition, KindCheck)
	}
	return nil
}

// validateBundle checks a bundle's own fields (Count, Payloads) and that a message of one
// partition has none of them.
func (e Envelope) validateBundle() error {
	if e.Count == 0 {
		if len(e.Payloads) != 0 {
			return errors.New("payloads without a count: a message of one partition has a payload")
		}
		return nil
	}
	switch {
	case e.Count < 2 || e.Count > MaxBundle:
		return fmt.Errorf("count %d, want 2 to %d (0 for one partition)", e.Count, MaxBundle)
	case len(e.Payloads) != 0 && len(e.Payloads) != e.Count:
		return fmt.Errorf("%d payloads for %d partitions", len(e.Payloads), e.Count)
	case len(e.Payload) != 0:
		return errors.New("a bundle carries payloads, not a payload")
	case e.Attempt > 1 || len(e.Errors) != 0:
		return errors.New("a bundle is a first try: its retries are messages of one partition")
	}
	for k, p := range e.Payloads {
		if !json.Valid(p) {
			return fmt.Errorf("payload %d (partition %d) is not JSON", k, e.Part+k)
		}
	}
	return nil
}

// ErrTooLarge marks an envelope whose encoding exceeds MaxEnvelopeBytes: it can never be sent.
var ErrTooLarge = errors.New("message too large")

// Encode returns the envelope's JSON: exactly the bytes that are sent, and the bytes every size
// limit is measured on. HTML escaping is off (json.Marshal would turn each '<', '>' and '&' of
// a payload into six bytes, so a payload that fits could no longer fit once sent).
func (e Envelope) Encode() ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return nil, err
	}
	b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if len(b) > MaxEnvelopeBytes {
		return nil, fmt.Errorf("%w: encoded envelope is %d bytes, limit %d", ErrTooLarge, len(b), MaxEnvelopeBytes)
	}
	return b, nil
}

// MessageID is the deterministic message ID (a bundle's names its first partition and its
// count: "run/32+16/e1"): a replay by the same leader gets the same ID
// (Service Bus duplicate detection drops it), while a takeover (new epoch) or a re-enqueue
// round gets a new one, so the resend is not mistaken for a duplicate of a message that the
// workers will drop as stale. A retry (Attempt above 1) gets one per attempt: the redelivered
// original of a retry schedules it again under the same ID.
func (e Envelope) MessageID() string {
	var b strings.Builder
	b.WriteString(e.Run)
	switch e.Kind {
	case KindCheck:
		fmt.Fprintf(&b, "/check/e%d/r%d", e.Epoch, e.Round)
	default:
		fmt.Fprintf(&b, "/%d", e.Part)
		if e.Count > 1 {
			fmt.Fprintf(&b, "+%d", e.Count)
		}
		fmt.Fprintf(&b, "/e%d", e.Epoch)
		if e.Redrive > 0 {
			fmt.Fprintf(&b, "/d%d", e.Redrive)
		}
		if e.Round > 0 {
			fmt.Fprintf(&b, "/r%d", e.Round)
		}
		if e.Attempt > 1 {
			fmt.Fprintf(&b, "/a%d", e.Attempt)
		}
		if e.Wait > 0 {
			fmt.Fprintf(&b, "/w%d", e.Wait)
		}
	}
	return b.String()
}

// Properties are the application properties sent with the message (Service Bus only).
func (e Envelope) Properties() map[string]string {
	return map[string]string{"run": e.Run, "epoch": fmt.Sprint(e.Epoch), "kind": string(e.Kind)}
}
