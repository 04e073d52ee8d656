package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/tools/azurite"
)

// TestMain doubles as a fake custom handler (fakeHandler) when started with
// DEVHOST_FAKE_HANDLER=1, so commands can run real host instances without building Baton.
func TestMain(m *testing.M) {
	if os.Getenv("DEVHOST_FAKE_HANDLER") == "1" {
		fakeHandler()
		return
	}
	os.Exit(azurite.Main(m))
}

// fakeHandler answers GET / and POST /Echo (an empty http output) on
// FUNCTIONS_CUSTOMHANDLER_PORT until SIGTERM.
func fakeHandler() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ready") })
	mux.HandleFunc("POST /Echo", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"Outputs":{"res":{"statusCode":"200","body":"echo"}}}`)
	})
	srv := &http.Server{Addr: "127.0.0.1:" + os.Getenv("FUNCTIONS_CUSTOMHANDLER_PORT"), Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		c, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(c)
	}()
	_ = srv.ListenAndServe()
}

// TestRunCmd_TimerFlag: -timer accepts only all and one, and says so.
func TestRunCmd_TimerFlag(t *testing.T) {
	err := runCmd(context.Background(), []string{"-timer", "each", "-app", t.TempDir()}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "-timer") || !strings.Contains(err.Error(), `"one"`) {
		t.Errorf("runCmd -timer each: %v, want an error naming -timer and its values", err)
	}
}

// TestRunCmd_BuildsTheApp: without -exe, run builds the app's main package in the folder first
// and stops at a compile error, showing the compiler's message.
func TestRunCmd_BuildsTheApp(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"go.mod":    "module example.com/broken\n\ngo 1.24\n",
		"host.json": `{"version":"2.0","customHandler":{"description":{"defaultExecutablePath":"broken"}}}`,
		"main.go":   "package main\n\nfunc main() { notDefinedAnywhere() }\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	err := runCmd(context.Background(), []string{"-app", dir}, &out)
	if err == nil || !strings.Contains(err.Error(), "build") || !strings.Contains(out.String(), "notDefinedAnywhere") {
		t.Errorf("runCmd on a broken app: %v (output %q), want the build's error and the compiler's message", err, out.String())
	}
}
