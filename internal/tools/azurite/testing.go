package azurite

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/batonfn/baton/internal/engine/azclient"
)

// shared is one Azurite per test binary, started on first use and stopped by Main.
var shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// Main runs a package's tests and stops the shared Azurite afterwards. Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(azurite.Main(m)) }
func Main(m *testing.M) int {
	code := m.Run()
	if shared.srv != nil {
		shared.srv.Stop()
	}
	return code
}

// MainWaiting is Main for packages whose Azurite tests mostly wait (for 15 s leases to
// lapse) rather than use CPU: unless -parallel is given, up to 4 such tests overlap, more than
// GOMAXPROCS (2 on the CI machine) would allow, which keeps the package's time near its
// longest test.
func MainWaiting(m *testing.M) int {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", "4")
	}
	return Main(m)
}

// Shared returns the package's Azurite, starting it on first use. It fails the test (never
// skips) when Azurite cannot start. The package's TestMain must call Main.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		shared.srv, shared.err = Start(ctx, Options{})
	})
	if shared.err != nil {
		tb.Fatalf("azurite: %v", shared.err)
	}
	return shared.srv
}

// Private starts an Azurite only for this test and stops it in tb.Cleanup.
func Private(tb testing.TB, opts Options) *Server {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	srv, err := Start(ctx, opts)
	if err != nil {
		tb.Fatalf("azurite: %v", err)
	}
	tb.Cleanup(srv.Stop)
	return srv
}

// UniqueName returns a container or queue name unique to this test: prefix, the test name
// folded to [a-z0-9-], and random hex; 3–63 characters.
func UniqueName(tb testing.TB, prefix string) string {
	tb.Helper()
	var sb strings.Builder
	for _, r := range strings.ToLower(tb.Name()) {
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			sb.WriteRune(r)
		case sb.Len() > 0 && !strings.HasSuffix(sb.String(), "-"):
			sb.WriteByte('-')
		}
	}
	name := strings.Trim(sb.String(), "-")
	var b [4]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	room := 63 - len(prefix) - len(suffix) - 2
	if len(name) > room {
		name = strings.Trim(name[:room], "-")
	}
	out := fmt.Sprintf("%s-%s-%s", prefix, name, suffix)
	return strings.ReplaceAll(out, "--", "-")
}

// NewContainer returns a client for a fresh, uniquely named container on the shared Azurite
// (not created: the code under test creates it), deleted when the test ends. opts may replace
// the transport or the retry options (fault injection); nil takes the defaults.
func NewContainer(tb testing.TB, prefix string, opts *azblob.ClientOptions) *container.Client {
	tb.Helper()
	cl, err := azclient.Blob(Shared(tb).Storage(), opts)
	if err != nil {
		tb.Fatalf("blob client: %v", err)
	}
	c := cl.ServiceClient().NewContainerClient(UniqueName(tb, prefix))
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = c.Delete(ctx, nil)
	})
	return c
}

// NewQueue returns a client for the queue called name on the shared Azurite (not created),
// deleted when the test ends.
func NewQueue(tb testing.TB, name string) *azqueue.QueueClient {
	tb.Helper()
	svc, err := azclient.Queue(Shared(tb).Storage(), nil)
	if err != nil {
		tb.Fatalf("queue client: %v", err)
	}
	q := svc.NewQueueClient(name)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = q.Delete(ctx, nil)
	})
	return q
}
