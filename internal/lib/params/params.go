// Package params turns the params an app or a test passes to Baton — raw JSON or a Go value —
// into the JSON object a run records.
package params

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Object encodes v as a JSON object: raw JSON (json.RawMessage, []byte, string) is taken as it
// is, any other value is marshalled. Anything but a JSON object is an error.
func Object(v any) (json.RawMessage, error) {
	var raw []byte
	switch v := v.(type) {
	case json.RawMessage:
		raw = v
	case []byte:
		raw = v
	case string:
		raw = []byte(v)
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		raw = b
	}
	raw = bytes.TrimSpace(raw)
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("want a JSON object, got %.80q", raw)
	}
	return json.RawMessage(raw), nil
}
