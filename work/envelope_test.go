package work

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/batonfn/baton/internal/engine/protocol"
)

func TestEnvelope_NoMetadataCollision(t *testing.T) {
	typ := reflect.TypeOf(Envelope{})
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		for _, key := range protocol.HostMetadataKeys {
			if strings.EqualFold(name, key) {
				t.Errorf("envelope field %s has JSON name %q, which collides with host metadata key %q", typ.Field(i).Name, name, key)
			}
		}
	}
}

func validPartition() Envelope {
	return Envelope{Version: 1, Kind: KindPartition, Run: "tick-20261121t020000z", Epoch: 3, Part: 7, Parts: 20, Payload: json.RawMessage(`{"from":"a","to":"b"}`)}
}

func TestEnvelope_RoundTrip(t *testing.T) {
	for _, e := range []Envelope{validPartition(), {Version: 1, Kind: KindCheck, Run: "manual-x", Epoch: 1, Round: 2},
		{Version: 1, Kind: KindCheck, Run: "manual-x", Epoch: 4, Handover: true},
		{Version: 1, Kind: KindCheck, Run: "manual-x", Epoch: 1, Round: 1, Trace: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}} {
		b, err := e.Encode()
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeEnvelope(b)
		if err != nil {
			t.Fatalf("decode %s: %v", b, err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Errorf("round trip: got %+v, want %+v", got, e)
		}
	}
}

func TestDecodeEnvelope_Rejects(t *testing.T) {
	cases := map[string]string{
		"not json":           `nope`,
		"array":              `[]`,
		"unknown field":      `{"baton":1,"kind":"check","run":"r1","epoch":1,"Id":"x"}`,
		"wrong version":      `{"baton":2,"kind":"check","run":"r1","epoch":1}`,
		"no version":         `{"kind":"check","run":"r1","epoch":1}`,
		"bad kind":           `{"baton":1,"kind":"delete","run":"r1","epoch":1}`,
		"traversal run":      `{"baton":1,"kind":"check","run":"../r1","epoch":1}`,
		"upper run":          `{"baton":1,"kind":"check","run":"R1","epoch":1}`,
		"zero epoch":         `{"baton":1,"kind":"partition","run":"r1","epoch":0}`,
		"negative epoch":     `{"baton":1,"kind":"check","run":"r1","epoch":-1}`,
		"negative part":      `{"baton":1,"kind":"partition","run":"r1","epoch":1,"part":-1}`,
		"part >= parts":      `{"baton":1,"kind":"partition","run":"r1","epoch":1,"part":5,"parts":5}`,
		"check with part":    `{"baton":1,"kind":"check","run":"r1","epoch":1,"part":3}`,
		"handover round":     `{"baton":1,"kind":"check","run":"r1","epoch":1,"round":2,"handover":true}`,
		"handover partition": `{"baton":1,"kind":"partition","run":"r1","epoch":1,"handover":true}`,
		"trailing":           `{"baton":1,"kind":"check","run":"r1","epoch":1}{}`,
		"trailing brace":     `{"baton":1,"kind":"check","run":"r1","epoch":1}}`,
		"trailing bracket":   `{"baton":1,"kind":"check","run":"r1","epoch":1}]`,
		"trailing word":      `{"baton":1,"kind":"check","run":"r1","epoch":1} x`,
		"name in upper case": `{"baton":1,"kind":"check","Run":"r1","epoch":1}`,
		"name in mixed case": `{"baton":1,"KIND":"check","run":"r1","epoch":1}`,
		"duplicate key":      `{"baton":1,"kind":"check","run":"r1","epoch":1,"epoch":2}`,
		"duplicate run":      `{"baton":1,"kind":"check","run":"r1","run":"r2","epoch":1}`,
		"unterminated":       `{"baton":1,"kind":"check","run":"r1","epoch":1`,
		"epoch as string":    `{"baton":1,"kind":"check","run":"r1","epoch":"1"}`,
		"oversize":           `{"baton":1,"kind":"partition","run":"r1","epoch":1,"payload":"` + strings.Repeat("x", MaxEnvelopeBytes) + `"}`,
		"bundle of one":      `{"baton":1,"kind":"partition","run":"r1","epoch":1,"count":1}`,
		"bundle too large":   `{"baton":1,"kind":"partition","run":"r1","epoch":1,"count":1025}`,
		"bundle past parts":  `{"baton":1,"kind":"partition","run":"r1","epoch":1,"part":3,"count":3,"parts":5}`,
		"payloads short":     `{"baton":1,"kind":"partition","run":"r1","epoch":1,"count":3,"payloads":[1,2]}`,
		"payloads no count":  `{"baton":1,"kind":"partition","run":"r1","epoch":1,"payloads":[1]}`,
		"bundle payload":     `{"baton":1,"kind":"partition","run":"r1","epoch":1,"count":2,"payload":1}`,
		"bundle retry":       `{"baton":1,"kind":"partition","run":"r1","epoch":1,"count":2,"attempt":2,"errors":["x"]}`,
		"check with count":   `{"baton":1,"kind":"check","run":"r1","epoch":1,"count":2}`,
		"trace too long":     `{"baton":1,"kind":"check","run":"r1","epoch":1,"trace":"` + strings.Repeat("0", MaxTraceBytes+1) + `"}`,
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeEnvelope([]byte(body))
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("got %v, want ErrMalformed", err)
			}
		})
	}
}

func TestEnvelope_MessageID(t *testing.T) {
	e := validPartition()
	if got := e.MessageID(); got != "tick-20261121t020000z/7/e3" {
		t.Errorf("MessageID = %q", got)
	}
	e.Round = 2
	if got := e.MessageID(); got != "tick-20261121t020000z/7/e3/r2" {
		t.Errorf("re-enqueue MessageID = %q", got)
	}
	c := Envelope{Version: 1, Kind: KindCheck, Run: "r1", Epoch: 4, Round: 1}
	if got := c.MessageID(); got != "r1/check/e4/r1" {
		t.Errorf("check MessageID = %q", got)
	}
	b := Envelope{Version: 1, Kind: KindPartition, Run: "r1", Epoch: 2, Part: 32, Count: 16}
	if got := b.MessageID(); got != "r1/32+16/e2" {
		t.Errorf("bundle MessageID = %q", got)
	}
}

func TestEnvelope_Singles(t *testing.T) {
	body := `{"baton":1,"kind":"partition","run":"r1","epoch":2,"part":10,"count":3,"parts":20,"round":1,"payloads":[{"a":1},null,"x"]}`
	b, err := DecodeEnvelope([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	got := b.Singles()
	want := []Envelope{
		{Version: 1, Kind: KindPartition, Run: "r1", Epoch: 2, Part: 10, Parts: 20, Round: 1, Payload: json.RawMessage(`{"a":1}`)},
		{Version: 1, Kind: KindPartition, Run: "r1", Epoch: 2, Part: 11, Parts: 20, Round: 1},
		{Version: 1, Kind: KindPartition, Run: "r1", Epoch: 2, Part: 12, Parts: 20, Round: 1, Payload: json.RawMessage(`"x"`)},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Singles:\n got %+v\nwant %+v", got, want)
	}
	for _, one := range got {
		if err := one.Validate(); err != nil {
			t.Errorf("single %d: %v", one.Part, err)
		}
	}
	// Without payloads every single has none; a message of one partition is its own single.
	b.Payloads = nil
	for _, one := range b.Singles() {
		if one.Payload != nil {
			t.Errorf("single %d has payload %s", one.Part, one.Payload)
		}
	}
	if s := validPartition().Singles(); len(s) != 1 || !reflect.DeepEqual(s[0], validPartition()) {
		t.Errorf("a single's Singles = %+v", s)
	}
}

// FuzzDecodeEnvelope: no input panics, and anything accepted re-encodes to an envelope that
// decodes to the same value.
func FuzzDecodeEnvelope(f *testing.F) {
	f.Add([]byte(`{"baton":1,"kind":"partition","run":"tick-20261121t020000z","epoch":3,"part":7,"parts":20}`))
	f.Add([]byte(`{"baton":1,"kind":"check","run":"r1","epoch":1,"round":1}`))
	f.Add([]byte(`{"baton":1,"kind":"partition","run":"r","epoch":1,"payload":{"a":[1,2]}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		e, err := DecodeEnvelope(body)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		b, err := e.Encode()
		if err != nil {
			t.Fatalf("accepted envelope does not re-encode: %v", err)
		}
		again, err := DecodeEnvelope(b)
		if err != nil || again.Run != e.Run || again.Part != e.Part || again.Epoch != e.Epoch || again.Kind != e.Kind {
			t.Fatalf("re-decode: %+v, %v; want %+v", again, err, e)
		}
	})
}

func TestDecodeEnvelope_AcceptsWhiteSpaceAndAnyPayload(t *testing.T) {
	// The strict key check covers the envelope only: the job's payload is its own business.
	body := " \n{\"baton\":1,\"kind\":\"partition\",\"run\":\"r1\",\"epoch\":1,\"payload\":{\"A\":1,\"a\":2,\"a\":3}}\r\n"
	e, err := DecodeEnvelope([]byte(body))
	if err != nil {
		t.Fatalf("DecodeEnvelope: %v", err)
	}
	if got, want := string(e.Payload), `{"A":1,"a":2,"a":3}`; got != want {
		t.Errorf("payload = %s, want %s", got, want)
	}
}
