package azurite

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A port that something else listens on is not Azurite: Start must not take a process that
// took one of its ports first (found free, then taken before Azurite bound it) for Azurite,
// which then exits on the port in use.
func TestStart_PortTakenByAnotherProcess(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
	}))
	defer other.Close()
	port := other.Listener.Addr().(*net.TCPAddr).Port
	if ready(port) {
		t.Fatalf("ready(%d) with another HTTP server on it: want false", port)
	}
	if _, err := Binary(); err != nil {
		t.Skipf("the rest needs Azurite: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	srv, err := Start(ctx, Options{BlobPort: port})
	if err == nil {
		srv.Stop()
		t.Fatalf("Start on a blob port held by another server succeeded; want an error")
	}
}
