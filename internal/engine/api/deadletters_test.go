package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"

	"github.com/batonfn/baton/internal/engine/transport"
)

// fakeDeadLetters counts a fixed number, or fails; calls are counted.
type fakeDeadLetters struct {
	queue   string
	n       atomic.Int64
	atLeast bool
	err     error
	calls   atomic.Int32
}

func (f *fakeDeadLetters) Queue() string { return f.queue }

func (f *fakeDeadLetters) Count(ctx context.Context) (transport.DeadLetterCount, error) {
	f.calls.Add(1)
	if f.err != nil {
		return transport.DeadLetterCount{}, f.err
	}
	return transport.DeadLetterCount{Queue: f.queue, Count: f.n.Load(), AtLeast: f.atLeast}, nil
}

// GET /api/leader counts each queue's dead letters, says which queue it could not count and
// why, and counts again only once the cached counts are DeadLetterCacheTTL old.
func TestLeader_DeadLetters(t *testing.T) {
	work := &fakeDeadLetters{queue: "baton-work", atLeast: true}
	work.n.Store(1000)
	control := &fakeDeadLetters{queue: "baton-control", err: errors.New("peek: (unauthorized): Listen claim required")}
	now := time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)
	clock := &now
	a, err := New(Config{Ledger: newFakeLedger(), Leader: &fakeLeader{}, DeadLetters: []DeadLetterCounter{work, control},
		Now: func() time.Time { return *clock }})
	if err != nil {
		t.Fatal(err)
	}
	get := func() string {
		t.Helper()
		r := a.Leader(context.Background(), Request{Method: http.MethodGet})
		if r.Status != http.StatusOK {
			t.Fatalf("status %d", r.Status)
		}
		b, err := json.Marshal(r.JSON.(LeaderReply).DeadLetters)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	want := `[{"queue":"baton-work","count":1000,"atLeast":true,"counted":"2026-11-21T09:00:00Z","error":""},` +
		`{"queue":"baton-control","count":0,"atLeast":false,"counted":"2026-11-21T09:00:00Z","error":"peek: (unauthorized): Listen claim required"}]`
	if got := get(); got != want {
		t.Errorf("deadLetters:\ngot  %s\nwant %s", got, want)
	}

	work.n.Store(3)
	now = now.Add(DeadLetterCacheTTL - time.Second)
	if got := get(); got != want || work.calls.Load() != 1 {
		t.Errorf("within the cache time: got %s after %d counts, want the cached reply after 1", got, work.calls.Load())
	}
	now = now.Add(time.Second)
	want = `[{"queue":"baton-work","count":3,"atLeast":true,"counted":"2026-11-21T09:00:30Z","error":""},` +
		`{"queue":"baton-control","count":0,"atLeast":false,"counted":"2026-11-21T09:00:30Z","error":"peek: (unauthorized): Listen claim required"}]`
	if got := get(); got != want || work.calls.Load() != 2 || control.calls.Load() != 2 {
		t.Errorf("after the cache time:\ngot  %s (%d, %d counts)\nwant %s (2 each)", got, work.calls.Load(), control.calls.Load(), want)
	}
}

// A queue that could not be counted because of an Azure response shows that error as a run's
// reason is shown (ledger.Cause: its code and status, no URL, response body or request ID);
// the log has it in full.
func TestLeader_DeadLetterErrorShort(t *testing.T) {
	u, err := url.Parse("https://acct.queue.core.windows.net/baton-work-poison?comp=metadata")
	if err != nil {
		t.Fatal(err)
	}
	const requestID = "5f0c1ab2-301e-0042-7d1b-4a8c2b000000"
	body := `<?xml version="1.0" encoding="utf-8"?><Error><Code>AuthorizationPermissionMismatch</Code>` +
		`<Message>This request is not authorized to perform this operation using this permission.` + "\nRequestId:" + requestID +
		"\nTime:2026-11-21T09:00:00.0000000Z</Message></Error>"
	sdkErr := runtime.NewResponseError(&http.Response{
		StatusCode: http.StatusForbidden, Status: "403 Forbidden",
		Header:  http.Header{"X-Ms-Error-Code": {"AuthorizationPermissionMismatch"}, "X-Ms-Request-Id": {requestID}},
		Body:    io.NopCloser(strings.NewReader(body)),
		Request: &http.Request{Method: http.MethodGet, URL: u},
	})
	work := &fakeDeadLetters{queue: "baton-work", err: fmt.Errorf("count poison queue baton-work-poison: %w", sdkErr)}
	var logged bytes.Buffer
	a, err := New(Config{Ledger: newFakeLedger(), Leader: &fakeLeader{}, DeadLetters: []DeadLetterCounter{work},
		Logger: slog.New(slog.NewJSONHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	r := a.Leader(context.Background(), Request{Method: http.MethodGet})
	if r.Status != http.StatusOK {
		t.Fatalf("status %d", r.Status)
	}
	got := r.JSON.(LeaderReply).DeadLetters[0].Error
	if want := "count poison queue baton-work-poison: AuthorizationPermissionMismatch (403)"; got != want {
		t.Errorf("deadLetters[0].error = %q\nwant %q", got, want)
	}
	for _, leak := range []string{"acct.queue.core.windows.net", requestID, "<Error>"} {
		if strings.Contains(got, leak) {
			t.Errorf("deadLetters[0].error %q shows %q", got, leak)
		}
		if !strings.Contains(logged.String(), leak) {
			t.Errorf("the log lacks %q of the full error:\n%s", leak, logged.String())
		}
	}
	if !strings.Contains(logged.String(), `"queue":"baton-work"`) {
		t.Errorf("the log line does not name the queue:\n%s", logged.String())
	}
}
