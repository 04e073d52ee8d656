package strictjson

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

type inner struct {
	Paused *bool  `json:"paused"`
	Cron   string `json:"cron,omitempty"`
	Skip   string `json:"-"`
	Plain  int
}

type Embedded struct {
	Deep string `json:"deep"`
}

type outer struct {
	Embedded
	Job     string             `json:"job"`
	Kind    string             `json:"kind"`
	Params  json.RawMessage    `json:"params"`
	Sched   map[string]inner   `json:"sched"`
	List    []inner            `json:"list"`
	Ptr     *inner             `json:"ptr"`
	Any     any                `json:"any"`
	At      time.Time          `json:"at"`
	ByIndex map[string][]inner `json:"byIndex"`
}

// Decode refuses a repeated key and a field's name in another case, at any depth, naming the
// key and where it is; what encoding/json refuses it refuses too, and a clean value decodes
// as encoding/json decodes it.
func TestDecode(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     string // "" for success
		key      *KeyError
	}{
		{"clean", `{"job":"a","params":{"x":[1,{"y":2}]},"sched":{"tick":{"paused":true,"Plain":3}},"deep":"d","at":"2026-01-01T00:00:00Z"}`, "", nil},
		{"repeated top key", `{"job":"synthetic","job":"inventory"}`, `duplicate key "job"`, &KeyError{Key: "job"}},
		{"wrong case", `{"job":"synthetic","JOB":"inventory"}`, `key "JOB" must be written "job"`, &KeyError{Key: "JOB", Field: "job"}},
		{"wrong case alone", `{"JOB":"inventory"}`, `key "JOB" must be written "job"`, &KeyError{Key: "JOB", Field: "job"}},
		{"Unicode folding as encoding/json folds", `{"\u212aind":"x"}`, `key "\u212aind" must be written "kind"`, &KeyError{Key: "\u212aind", Field: "kind"}},
		{"wrong case of a field named by Go", `{"sched":{"t":{"Plain":1,"PLAIN":2}}}`, `key "PLAIN" in "sched.t" must be written "Plain"`, &KeyError{Path: []string{"sched", "t"}, Key: "PLAIN", Field: "Plain"}},
		{"repeated map key", `{"sched":{"tick":{"paused":true},"tick":{"paused":false}}}`, `duplicate key "tick" in "sched"`, &KeyError{Path: []string{"sched"}, Key: "tick"}},
		{"map keys differing in case are distinct", `{"sched":{"tick":{},"Tick":{}}}`, "", nil},
		{"wrong case under a map", `{"sched":{"tick":{"PAUSED":true}}}`, `key "PAUSED" in "sched.tick" must be written "paused"`, &KeyError{Path: []string{"sched", "tick"}, Key: "PAUSED", Field: "paused"}},
		{"wrong case in a slice", `{"list":[{},{"Paused":true}]}`, `key "Paused" in "list[1]" must be written "paused"`, &KeyError{Path: []string{"list", "[1]"}, Key: "Paused", Field: "paused"}},
		{"wrong case under a slice in a map", `{"byIndex":{"a":[{"CRON":"x"}]}}`, `in "byIndex.a[0]"`, &KeyError{Path: []string{"byIndex", "a", "[0]"}, Key: "CRON", Field: "cron"}},
		{"wrong case behind a pointer", `{"ptr":{"Cron":"x"}}`, `must be written "cron"`, &KeyError{Path: []string{"ptr"}, Key: "Cron", Field: "cron"}},
		{"wrong case of an embedded field", `{"Deep":"x"}`, `must be written "deep"`, &KeyError{Key: "Deep", Field: "deep"}},
		{"repeated inside raw params", `{"params":{"partitions":2,"partitions":7}}`, `duplicate key "partitions" in "params"`, &KeyError{Path: []string{"params"}, Key: "partitions"}},
		{"raw params keep their own case", `{"params":{"Partitions":2,"partitions":7}}`, "", nil},
		{"repeated inside any", `{"any":[{"a":1,"a":1}]}`, `duplicate key "a" in "any[0]"`, &KeyError{Path: []string{"any", "[0]"}, Key: "a"}},
		{"a dash field is unknown", `{"sched":{"t":{"Skip":"x"}}}`, `unknown field "Skip"`, nil},
		{"unknown field", `{"jobb":"x"}`, `unknown field "jobb"`, nil},
		{"trailing value", `{} {}`, "unexpected data after the JSON value", nil},
		{"trailing junk", `{"job":"a"} x`, "unexpected data after the JSON value", nil},
		{"syntax", `{"job":}`, "invalid character", nil},
		{"empty", ``, "unexpected EOF", nil},
		{"wrong type", `{"job":7}`, "cannot unmarshal number", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var v outer
			err := Decode([]byte(c.in), &v)
			if c.want == "" {
				if err != nil {
					t.Fatalf("Decode(%s) = %v", c.in, err)
				}
				var std outer
				if err := json.Unmarshal([]byte(c.in), &std); err != nil {
					t.Fatal(err)
				}
				a, _ := json.Marshal(v)
				b, _ := json.Marshal(std)
				if string(a) != string(b) {
					t.Errorf("decoded %s, encoding/json %s", a, b)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Decode(%s) = %v, want %q", c.in, err, c.want)
			}
			var ke *KeyError
			if errors.As(err, &ke) != (c.key != nil) {
				t.Fatalf("Decode(%s) = %T, KeyError wanted: %v", c.in, err, c.key != nil)
			}
			if c.key != nil && (ke.Key != c.key.Key || ke.Field != c.key.Field || PathString(ke.Path) != PathString(c.key.Path)) {
				t.Errorf("KeyError %+v, want %+v", *ke, *c.key)
			}
		})
	}
}

// encoding/json itself takes the last of a repeated key and a field in any case: what Decode
// exists to refuse.
func TestDecode_EncodingJSONIsLenient(t *testing.T) {
	var v outer
	if err := json.Unmarshal([]byte(`{"job":"synthetic","JOB":"inventory"}`), &v); err != nil || v.Job != "inventory" {
		t.Fatalf("encoding/json: %v %q; the premise of this package changed", err, v.Job)
	}
	if err := json.Unmarshal([]byte(`{"\u212aind":"x"}`), &v); err != nil || v.Kind != "x" { // U+212A KELVIN SIGN folds to k
		t.Fatalf("encoding/json: %v %q; the premise of this package changed", err, v.Kind)
	}
}

// Nesting deeper than MaxDepth is refused, not walked.
func TestDecode_Depth(t *testing.T) {
	in := strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)
	var v any
	if err := Decode([]byte(in), &v); err == nil || !strings.Contains(err.Error(), "deeper") {
		t.Errorf("Decode of %d nested arrays = %v", MaxDepth+1, err)
	}
}

// FuzzDecode: whatever the input, Decode never panics, and what it accepts encoding/json
// accepts too, with the same result.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"job":"a","params":{"x":[1,{"y":2}]}}`, `{"sched":{"t":{"paused":true}}}`, `{"job":"a","JOB":"b"}`,
		`{"list":[{"cron":"x"}],"any":{"a":[{}]}}`, `[]`, `{"a":`, `{} {}`, `"s"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v outer
		if Decode(data, &v) != nil {
			return
		}
		var std outer
		if err := json.Unmarshal(data, &std); err != nil {
			t.Fatalf("Decode accepted %q, encoding/json refuses it: %v", data, err)
		}
		a, _ := json.Marshal(v)
		b, _ := json.Marshal(std)
		if string(a) != string(b) {
			t.Fatalf("%q: Decode %s, encoding/json %s", data, a, b)
		}
	})
}
