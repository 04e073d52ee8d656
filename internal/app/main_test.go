package app

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
)

// TestRun_ShutdownRunsCleanupsThenStops proves SIGTERM handling: cancelling run's context
// runs the registered cleanups (where the lease release lives) and returns.
func TestRun_ShutdownRunsCleanupsThenStops(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()

	logger := slog.New(slog.DiscardHandler)
	app := &wiring{server: newServer(logger, time.Second, newInvocationID)}
	var cleaned atomic.Int32
	app.onClose(func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("cleanup context has no deadline")
		}
		cleaned.Add(1)
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, config.Config{Port: port}, logger, app) }()

	url := "http://127.0.0.1:" + strconv.Itoa(port) + "/"
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("handler never became ready: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // readiness poll, as the host does (every 25 ms)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v", err)
		}
	case <-time.After(2 * shutdownBudget):
		t.Fatal("run did not return after cancellation")
	}
	if cleaned.Load() != 1 {
		t.Errorf("cleanups ran %d times, want 1", cleaned.Load())
	}
}

func TestRun_PortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	app := &wiring{server: newServer(slog.New(slog.DiscardHandler), time.Second, newInvocationID)}
	err = run(context.Background(), config.Config{Port: port}, slog.New(slog.DiscardHandler), app)
	if err == nil {
		t.Fatal("run on a busy port returned nil")
	}
	var opErr *net.OpError
	if !errors.As(err, &opErr) {
		t.Errorf("error %v does not wrap the listen error", err)
	}
}
