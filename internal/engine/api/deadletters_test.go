package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

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
