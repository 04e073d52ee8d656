package bench

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"log"
	mathbits "math/bits"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/tools/azurite"
)

// storageProxy sits between every process of a cluster (the handlers and the local host's
// queue listener) and Azurite: one reverse proxy for the blob port and one for the queue port.
// It counts each call by kind (see callKind), remembers when each kind was last answered, and
// times lease renewals. The benchmarks point the cluster's connection string at it; the
// benchmark's own reads go to Azurite directly and are not counted.
type storageProxy struct {
	blob, queue *http.Server
	blobPort    int
	queuePort   int

	mu       sync.Mutex
	parts    int64 // partitions whose results were written (a block counts its members)
	counts   map[string]int64
	lastAt   map[string]time.Time
	renewals []time.Duration
	hot      *hotTracker
	limitAt  []time.Time // when each call on a limit's blob was answered
}

// startStorageProxy starts the proxy in front of srv; it stops with the benchmark.
func startStorageProxy(tb testing.TB, srv *azurite.Server) *storageProxy {
	tb.Helper()
	p := &storageProxy{counts: map[string]int64{}, lastAt: map[string]time.Time{}, hot: newHotTracker()}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 512, 512
	serve := func(target int, queue bool) (*http.Server, int) {
		u, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", target))
		rp := httputil.NewSingleHostReverseProxy(u)
		rp.Transport = tr
		rp.ErrorLog = nil
		rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
			// A call its client gave up on (or Azurite dropped): which kind matters, since
			// Azurite on disk keeps a write its client abandoned while it was queued (see
			// docs/design.md, "Azure SDK and Azurite").
			log.Printf("proxy: %s %s: %v", callKind(r, queue), callEntity(r, queue), err)
			w.WriteHeader(http.StatusBadGateway)
		}
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			kind, entity := callKind(r, queue), callEntity(r, queue)
			parts := 0
			if kind == kindResult {
				kind, parts = resultParts(r)
			}
			t0 := time.Now()
			if kind == "queue dequeue" {
				sw := &messageSniffer{ResponseWriter: w}
				rp.ServeHTTP(sw, r)
				if !sw.found {
					kind = kindEmptyPoll
				}
			} else if kind == kindLimitWrite {
				// A limit's state is one blob every acquire and release rewrites under its
				// ETag: a write that lost the race is told apart (the update reads and writes
				// again).
				sw := &statusSniffer{ResponseWriter: w}
				rp.ServeHTTP(sw, r)
				if sw.status == http.StatusPreconditionFailed || sw.status == http.StatusConflict {
					kind = kindLimitConflict
				}
			} else {
				rp.ServeHTTP(w, r)
			}
			p.record(kind, entity, parts, t0, time.Now())
		})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		s := &http.Server{Handler: h, ReadHeaderTimeout: time.Minute}
		go func() { _ = s.Serve(ln) }()
		return s, ln.Addr().(*net.TCPAddr).Port
	}
	p.blob, p.blobPort = serve(srv.BlobPort, false)
	p.queue, p.queuePort = serve(srv.QueuePort, true)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = p.blob.Shutdown(ctx)
		_ = p.queue.Shutdown(ctx)
	})
	return p
}

// connectionString is srv's connection string with the blob and queue endpoints on the proxy.
func (p *storageProxy) connectionString(srv *azurite.Server) string {
	return strings.NewReplacer(
		fmt.Sprintf(":%d/", srv.BlobPort), fmt.Sprintf(":%d/", p.blobPort),
		fmt.Sprintf(":%d/", srv.QueuePort), fmt.Sprintf(":%d/", p.queuePort),
	).Replace(srv.ConnectionString())
}

func (p *storageProxy) record(kind, entity string, parts int, start, end time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counts[kind]++
	p.parts += int64(parts)
	p.hot.add(entity, kind, parts, end)
	if strings.Contains(entity, "/_limits/") {
		p.limitAt = append(p.limitAt, end)
	}
	p.lastAt[kind] = end
	if kind == "blob lease renew" {
		p.renewals = append(p.renewals, end.Sub(start))
	}
}

// limitCalls returns when each call on a limit's blob so far was answered, and forgets them.
func (p *storageProxy) limitCalls() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	at := p.limitAt
	p.limitAt = nil
	return at
}

// snapshot returns the counts so far and resets them, with the renewal latencies.
func (p *storageProxy) snapshot() (counts map[string]int64, lastAt map[string]time.Time, renewals []time.Duration) {
	counts, lastAt, renewals, _, _ = p.snapshotHot()
	return counts, lastAt, renewals
}

// snapshotHot is snapshot with the hottest entity of the calls so far, the hottest blob and
// the hottest entity without empty polls, and every entity at its own worst, hottest first
// (see hotTracker; a last window shorter than hotWindowParts counts only when it is the only
// one).
func (p *storageProxy) snapshotHot() (counts map[string]int64, lastAt map[string]time.Time, renewals []time.Duration, hot [3]hotSpot, top []hotSpot) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hot.window == 0 {
		p.hot.close()
	}
	counts, lastAt, renewals = p.counts, p.lastAt, p.renewals
	hot, top = [3]hotSpot{p.hot.worst, p.hot.blob, p.hot.busy}, p.hot.top(len(p.hot.each))
	p.counts, p.lastAt, p.renewals, p.hot, p.parts = map[string]int64{}, map[string]time.Time{}, nil, newHotTracker(), 0
	return counts, lastAt, renewals, hot, top
}

// hotTop is how many entities the benchmarks list, each at its worst window.
const hotTop = 5

// callKind names a storage call by service, operation and, for blobs, the part of the run
// it touches: "queue enqueue", "queue dequeue", "queue delete", "blob PUT result",
// "blob GET partial", "blob append done", "blob lease renew", ...
func callKind(r *http.Request, queue bool) string {
	q := r.URL.Query()
	if queue {
		if strings.HasSuffix(r.URL.Path, "/messages") {
			switch r.Method {
			case http.MethodPost:
				return "queue enqueue"
			case http.MethodGet:
				return "queue dequeue"
			}
		} else if strings.Contains(r.URL.Path, "/messages/") {
			switch r.Method {
			case http.MethodDelete:
				return "queue delete"
			case http.MethodPut:
				return "queue update"
			}
		}
		return "queue " + r.Method + " other"
	}
	switch comp := q.Get("comp"); comp {
	case "lease":
		return "blob lease " + strings.ToLower(r.Header.Get("x-ms-lease-action"))
	case "appendblock":
		return "blob append " + blobPart(r.URL.Path)
	case "list":
		return "blob list"
	case "":
		return "blob " + r.Method + " " + blobPart(r.URL.Path)
	default:
		return "blob " + r.Method + " " + comp + " " + blobPart(r.URL.Path)
	}
}

// resultParts tells a result's PUT (kindResult, one partition) from a block's (kindBlock, the
// partitions its members metadata names).
func resultParts(r *http.Request) (string, int) {
	name := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
	if !strings.Contains(name, "+") {
		return kindResult, 1
	}
	bits, err := hex.DecodeString(r.Header.Get("x-ms-meta-members"))
	if err != nil {
		return kindBlock, 0
	}
	n := 0
	for _, b := range bits {
		n += mathbits.OnesCount8(b)
	}
	return kindBlock, n
}

// blobPart is the kind of a run blob from its path (/account/container/<run>/...).
func blobPart(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	if len(parts) < 3 {
		return "container"
	}
	rest := parts[2:]
	switch {
	case len(rest) == 1:
		return rest[0] // the scheduler's lease blob
	case rest[0] == "_schedules":
		return "schedule" // a schedule's state
	case rest[0] == "_limits":
		return "limit" // a named limit's state
	case rest[0] == "runs" && len(rest) == 2:
		return "run lease" // leases/runs/<run>
	case len(rest) >= 3:
		return strings.TrimSuffix(rest[1], "s") // results → result, partials → partial
	default:
		return strings.TrimSuffix(rest[1], ".json") // manifest, report
	}
}

// callsTable formats counts per partition, largest first, on one line (a benchmark's log is
// cut after ten lines unless -v).
func callsTable(counts map[string]int64, partitions int) (total int64, lines string) {
	kinds := make([]string, 0, len(counts))
	for k, v := range counts {
		kinds = append(kinds, k)
		total += v
	}
	slices.SortFunc(kinds, func(a, b string) int { return int(counts[b] - counts[a]) })
	var sb strings.Builder
	for _, k := range kinds {
		fmt.Fprintf(&sb, " %s %d (%.4f);", k, counts[k], float64(counts[k])/float64(partitions))
	}
	return total, sb.String()
}

// messageSniffer passes a dequeue's answer through and notes whether it held a message.
type messageSniffer struct {
	http.ResponseWriter
	found bool
	tail  []byte // the last bytes written, in case the tag is split across writes
}

const messageTag = "<QueueMessage>"

func (s *messageSniffer) Write(b []byte) (int, error) {
	if !s.found {
		buf := append(s.tail, b...)
		s.found = bytes.Contains(buf, []byte(messageTag))
		s.tail = append(s.tail[:0], buf[max(0, len(buf)-len(messageTag)+1):]...)
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets the reverse proxy reach the writer's Flush.
func (s *messageSniffer) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// The calls a limit's updates make: a read, and a write under its ETag, which may lose the
// race to another update (kindLimitConflict: the update reads and writes again).
const (
	kindLimitWrite    = "blob PUT limit"
	kindLimitConflict = "blob PUT limit conflict"
)

// statusSniffer passes an answer through and notes its status.
type statusSniffer struct {
	http.ResponseWriter
	status int
}

func (s *statusSniffer) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap lets the reverse proxy reach the writer's Flush.
func (s *statusSniffer) Unwrap() http.ResponseWriter { return s.ResponseWriter }
