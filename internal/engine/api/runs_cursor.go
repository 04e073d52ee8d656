package api

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// The continuation token of GET /api/runs: the last entry of a page, as unpadded URL-safe
// base64 of a small versioned JSON object.

// cursor is the decoded continuation token: the last entry of the previous page.
type cursor struct {
	V  int    `json:"v"`
	T  int64  `json:"t"` // Unix nanoseconds
	ID string `json:"id"`
}

const maxTokenLength = 512

func encodeCursor(e entry) string {
	b, _ := json.Marshal(cursor{V: 1, T: e.t.UnixNano(), ID: e.id})
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeCursor validates a continuation token; "" is the first page.
func decodeCursor(tok string) (*entry, error) {
	if tok == "" {
		return nil, nil
	}
	bad := errors.New("continuation is not a token from a previous page")
	if len(tok) > maxTokenLength {
		return nil, bad
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return nil, bad
	}
	var c cursor
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil || c.V != 1 || c.T < 0 || ledger.ValidateRunID(c.ID) != nil {
		return nil, bad
	}
	return &entry{t: time.Unix(0, c.T).UTC(), id: c.ID}, nil
}
