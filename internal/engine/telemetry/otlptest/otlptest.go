// Package otlptest serves tests of telemetry: it sums an in-memory reader's counters, and for
// tests that receive OTLP/HTTP exports it decodes an export request's protobuf body (gzip or
// not) and writes a protobuf reply, as an OTLP receiver does.
package otlptest

import (
	"compress/gzip"
	"io"
	"net/http"

	"google.golang.org/protobuf/proto"
)

// Decode reads req's body into m. On a wrong content type or a body that does not decode it
// answers the request with 415 or 400 itself and returns false.
func Decode(w http.ResponseWriter, req *http.Request, m proto.Message) bool {
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "want application/x-protobuf, got "+ct, http.StatusUnsupportedMediaType)
		return false
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return false
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err == nil {
		err = proto.Unmarshal(b, m)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

// Reply writes m as the protobuf answer to an export request.
func Reply(w http.ResponseWriter, m proto.Message) {
	b, _ := proto.Marshal(m)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(b)
}
