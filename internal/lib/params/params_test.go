package params

import (
	"encoding/json"
	"testing"
)

func TestObject(t *testing.T) {
	for _, c := range []struct {
		in   any
		want string // "" means an error
	}{
		{json.RawMessage(` {"a":1} `), `{"a":1}`},
		{[]byte(`{}`), `{}`},
		{`{"b":[1]}`, `{"b":[1]}`},
		{map[string]int{"c": 2}, `{"c":2}`},
		{struct {
			D string `json:"d"`
		}{"x"}, `{"d":"x"}`},
		{`[1]`, ""},
		{`null`, ""},
		{nil, ""},
		{``, ""},
		{42, ""},
		{func() {}, ""},
	} {
		got, err := Object(c.in)
		if c.want == "" {
			if err == nil {
				t.Errorf("Object(%#v) = %s, want an error", c.in, got)
			}
			continue
		}
		if err != nil || string(got) != c.want {
			t.Errorf("Object(%#v) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
}
