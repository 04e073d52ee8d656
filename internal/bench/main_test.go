package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/tools/azurite"
)

// TestMain stops the shared Azurite and removes the handler binaries built for the run.
func TestMain(m *testing.M) {
	code := azurite.Main(m)
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// built holds the handler binaries, built once per test binary on first use.
var built struct {
	once sync.Once
	dir  string // the temporary directory holding them
	root string // the module root they are built from
	// stripped is the size-optimised build (-trimpath -ldflags='-s -w'); every
	// benchmark that runs the handler runs this one. plain is `make build`'s (-trimpath).
	stripped, plain string
	err             error

	// cmds are the apps under ./internal/bench/cmd/ (bulkhandler, limithandler), stripped
	// likewise, each built on first use of its own.
	cmdMu sync.Mutex
	cmds  map[string]string
}

// handlerBinaries builds the handler twice (stripped and as `make build` does) into a temporary
// directory and returns both paths.
func handlerBinaries(tb testing.TB) (stripped, plain string) {
	tb.Helper()
	built.once.Do(func() {
		wd, err := os.Getwd()
		if err != nil {
			built.err = err
			return
		}
		if built.root, built.err = azurite.RepoRoot(wd); built.err != nil {
			return
		}
		if built.dir, built.err = os.MkdirTemp("", "baton-bench-bin-"); built.err != nil {
			return
		}
		built.stripped = filepath.Join(built.dir, "baton")
		built.plain = filepath.Join(built.dir, "baton-plain")
		if built.err = goBuild(built.root, "-ldflags=-s -w", "-o", built.stripped, "./handler"); built.err != nil {
			return
		}
		built.err = goBuild(built.root, "-o", built.plain, "./handler")
	})
	if built.err != nil {
		tb.Fatalf("build the handler: %v", built.err)
	}
	return built.stripped, built.plain
}

// bulkBinary builds ./internal/bench/cmd/bulkhandler beside the handler binaries, once, and returns its
// path: the reference app with the synthetic job's bundles capped at baton.MaxBundle.
func bulkBinary(tb testing.TB) string { return cmdBinary(tb, "bulkhandler") }

// limitBinary builds ./internal/bench/cmd/limithandler likewise: the reference app with the
// synthetic job under the limit "bench", whose numbers BATON_LIMITS sets.
func limitBinary(tb testing.TB) string { return cmdBinary(tb, "limithandler") }

// cmdBinary builds ./internal/bench/cmd/<name> beside the handler binaries, once per test
// binary, and returns its path.
func cmdBinary(tb testing.TB, name string) string {
	tb.Helper()
	handlerBinaries(tb)
	built.cmdMu.Lock()
	defer built.cmdMu.Unlock()
	if exe, ok := built.cmds[name]; ok {
		return exe
	}
	exe := filepath.Join(built.dir, "baton-"+name)
	if err := goBuild(built.root, "-ldflags=-s -w", "-o", exe, "./internal/bench/cmd/"+name); err != nil {
		tb.Fatalf("build %s: %v", name, err)
	}
	if built.cmds == nil {
		built.cmds = map[string]string{}
	}
	built.cmds[name] = exe
	return exe
}

// goBuild runs `go build -trimpath args...` in root without cgo.
func goBuild(root string, args ...string) error {
	args = append([]string{"build", "-trimpath"}, args...)
	cmd := exec.Command(goTool(), args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %v: %v\n%s", args, err, out)
	}
	return nil
}

// repoRoot is the module root: the function app folder.
func repoRoot(tb testing.TB) string {
	tb.Helper()
	wd, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	root, err := azurite.RepoRoot(wd)
	if err != nil {
		tb.Fatal(err)
	}
	return root
}

// goTool is the go command of the toolchain running the benchmarks: `go test` puts that
// toolchain's bin directory first on PATH.
func goTool() string { return "go" }

// counter counts the requests a storage client sends.
type counter struct{ n atomic.Int64 }

func (c *counter) Do(req *policy.Request) (*http.Response, error) {
	c.n.Add(1)
	return req.Next()
}

// clientOptions counts calls into c (when not nil) and, when own is set, gives the client an
// HTTP transport of its own, as a separate process would have (azcore's default transport is
// shared by every client in a process and keeps at most 10 idle connections per host).
func clientOptions(c *counter, own bool) azcore.ClientOptions {
	var o azcore.ClientOptions
	if c != nil {
		o.PerCallPolicies = []policy.Policy{c}
	}
	if own {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 16
		o.Transport = &http.Client{Transport: tr}
	}
	return o
}

// blobClient is a blob client for srv.
func blobClient(tb testing.TB, srv *azurite.Server, c *counter, own bool) *azblob.Client {
	tb.Helper()
	cl, err := azclient.Blob(srv.Storage(), &azblob.ClientOptions{ClientOptions: clientOptions(c, own)})
	if err != nil {
		tb.Fatal(err)
	}
	return cl
}

// queueClient is a queue service client for srv.
func queueClient(tb testing.TB, srv *azurite.Server, c *counter, own bool) *azqueue.ServiceClient {
	tb.Helper()
	cl, err := azclient.Queue(srv.Storage(), &azqueue.ClientOptions{ClientOptions: clientOptions(c, own)})
	if err != nil {
		tb.Fatal(err)
	}
	return cl
}

// privateAzurite starts an Azurite for one heavy benchmark step. Heavy steps never share one:
// Azurite 3.37 in memory stays busy for minutes after a queue of 20,000 messages or a container
// of thousands of blobs is deleted, which would stall whatever runs next.
func privateAzurite(tb testing.TB) *azurite.Server {
	tb.Helper()
	return azurite.Private(tb, azurite.Options{})
}

// azuriteProc returns a reader of srv's node process in /proc, to show how busy the emulator
// was (Azurite runs JavaScript on one thread: 100% of one core is its ceiling).
func azuriteProc(tb testing.TB, srv *azurite.Server) func() ProcStats {
	tb.Helper()
	pid, err := ListeningPID(srv.BlobPort)
	if err != nil {
		tb.Logf("azurite process not found (its CPU is not reported): %v", err)
		return func() ProcStats { return ProcStats{} }
	}
	return func() ProcStats {
		st, _ := ReadProc(pid)
		return st
	}
}

// selfCPU is this process's CPU time so far.
func selfCPU() time.Duration {
	st, _ := ReadProc(os.Getpid())
	return st.CPU
}

// cpuShare is CPU time as a percentage of one core over wall.
func cpuShare(cpu, wall time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	return 100 * cpu.Seconds() / wall.Seconds()
}

// ctxFor is a context bounded by d for one benchmark step.
func ctxFor(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

// sized is n, or small under -short: `go test -short -run '^$' -bench . ./bench` runs every
// benchmark once on a small amount of work, to prove it works, not for a figure.
func sized(n, small int) int {
	if testing.Short() {
		return small
	}
	return n
}

// sizes is all, or only its first (smallest) under -short.
func sizes(all ...int) []int {
	if testing.Short() {
		return all[:1]
	}
	return all
}
