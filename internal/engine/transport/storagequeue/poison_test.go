package storagequeue

import (
	"context"
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/internal/tools/azurite"
)

// newPoisonQueue returns the PoisonQueue of a queue name unique to this test on the shared
// Azurite, and a client of the poison queue itself (not created; deleted in t.Cleanup).
func newPoisonQueue(t *testing.T) (*PoisonQueue, *azqueue.QueueClient) {
	t.Helper()
	svc, err := azclient.Queue(azurite.Shared(t).Storage(), nil)
	if err != nil {
		t.Fatalf("queue client: %v", err)
	}
	name := azurite.UniqueName(t, "q")
	return NewPoisonQueue(svc, name), azurite.NewQueue(t, name+PoisonSuffix)
}

// A queue that never poisoned anything has no poison queue: it counts as empty, and peeking
// or purging it is not an error.
func TestPoisonQueue_MissingQueueIsEmpty(t *testing.T) {
	p, _ := newPoisonQueue(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := p.Count(ctx)
	if err != nil || c != (transport.DeadLetterCount{Queue: p.Queue()}) {
		t.Fatalf("Count: got %+v, %v want 0 for queue %s", c, err, p.Queue())
	}
	if got, err := p.Peek(ctx, 5); err != nil || len(got) != 0 {
		t.Errorf("Peek: got %v, %v want none", got, err)
	}
	if n, err := p.Purge(ctx); err != nil || n != 0 {
		t.Errorf("Purge: got %d, %v want 0", n, err)
	}
}

// Poison messages as the trigger leaves them (the base64 text it was sent with) are counted,
// peeked oldest first with their bodies decoded, and purged.
func TestPoisonQueue_CountPeekPurge(t *testing.T) {
	p, raw := newPoisonQueue(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := raw.Create(ctx, nil); err != nil {
		t.Fatal(err)
	}
	const n = 3
	for i := range n {
		body := fmt.Sprintf(`{"v":1,"kind":"partition","run":"r1","part":%d}`, i)
		if _, err := raw.EnqueueMessage(ctx, base64.StdEncoding.EncodeToString([]byte(body)), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := raw.EnqueueMessage(ctx, "not base64 {", nil); err != nil {
		t.Fatal(err)
	}

	c, err := p.Count(ctx)
	if err != nil || c.Count != n+1 || c.AtLeast || c.Queue != p.Queue() {
		t.Fatalf("Count: got %+v, %v want %d", c, err, n+1)
	}
	got, err := p.Peek(ctx, 100)
	if err != nil || len(got) != n+1 {
		t.Fatalf("Peek: got %d messages, %v want %d", len(got), err, n+1)
	}
	for i := range n {
		if want := fmt.Sprintf(`{"v":1,"kind":"partition","run":"r1","part":%d}`, i); string(got[i].Body) != want {
			t.Errorf("message %d body: got %q want %q", i, got[i].Body, want)
		}
		if got[i].ID == "" || got[i].Enqueued.IsZero() {
			t.Errorf("message %d: got %+v want an ID and an insertion time", i, got[i])
		}
	}
	if string(got[n].Body) != "not base64 {" {
		t.Errorf("a text that is not base64: got %q want it unchanged", got[n].Body)
	}
	if again, err := p.Count(ctx); err != nil || again.Count != n+1 {
		t.Errorf("Count after Peek: got %+v, %v want %d (peeking removes nothing)", again, err, n+1)
	}

	purged, err := p.Purge(ctx)
	if err != nil || purged != n+1 {
		t.Fatalf("Purge: got %d, %v want %d", purged, err, n+1)
	}
	if c, err := p.Count(ctx); err != nil || c.Count != 0 {
		t.Errorf("Count after Purge: got %+v, %v want 0", c, err)
	}
}
