package protocol

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// goldenSeeds adds every captured-shape payload in internal/app/testdata to the corpus.
func goldenSeeds(f *testing.F) [][]byte {
	f.Helper()
	files, _ := filepath.Glob(filepath.Join("..", "..", "app", "testdata", "*.json"))
	var out [][]byte
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err == nil {
			out = append(out, b)
		}
	}
	return out
}

// FuzzDecodeRequest: no input may panic, and every Data entry of an accepted request must be
// decodable by each trigger decoder without panicking.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range goldenSeeds(f) {
		f.Add(s)
	}
	f.Add([]byte(`{"Data":{"m":"\"x\""},"Metadata":{"DequeueCount":"1","Id":"\"a\""}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeRequest(body)
		if err != nil {
			return
		}
		_ = req.Sys()
		for _, raw := range req.Data {
			_, _ = DecodeMessage(raw)
			_, _ = DecodeTimer(raw)
			if r, err := DecodeHTTPRequest(raw); err == nil {
				_, _ = r.BodyBytes()
				_ = r.Header("Content-Type")
			}
		}
		_, _ = DecodeQueueMetadata(req.Metadata)
		_, _ = DecodeServiceBusMetadata(req.Metadata)
	})
}

// FuzzMessageRoundTrip: whatever string a producer sends, the host's double encoding decodes
// back to the same bytes.
func FuzzMessageRoundTrip(f *testing.F) {
	f.Add(`{"baton":1,"kind":"partition"}`)
	f.Add("plain text")
	f.Add(`"quoted"`)
	f.Fuzz(func(t *testing.T, s string) {
		enc := EncodeStringData(s)
		got, err := DecodeMessage(enc)
		if err != nil {
			t.Fatalf("DecodeMessage(EncodeStringData(%q)): %v", s, err)
		}
		// json.Marshal replaces invalid UTF-8, so compare against what the encoder kept.
		var once string
		_ = json.Unmarshal(enc, &once)
		var want string
		_ = json.Unmarshal([]byte(once), &want)
		if string(got) != want {
			t.Fatalf("round trip %q: got %q, want %q", s, got, want)
		}
	})
}
