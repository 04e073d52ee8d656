package azurite_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"os"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/batonfn/baton/internal/tools/azurite"
)

func TestMain(m *testing.M) { os.Exit(azurite.Main(m)) }

// TestSmoke proves the harness hands back a working Azurite: a blob round trip and a base64
// queue message round trip with the repo's pinned SDK versions.
func TestSmoke(t *testing.T) {
	srv := azurite.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	blobs, err := azblob.NewClientFromConnectionString(srv.ConnectionString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	container := azurite.UniqueName(t, "smoke")
	if _, err := blobs.CreateContainer(ctx, container, nil); err != nil {
		t.Fatalf("create container %s: %v", container, err)
	}
	t.Cleanup(func() { _, _ = blobs.DeleteContainer(context.Background(), container, nil) })
	want := []byte(`{"hello":"azurite"}`)
	if _, err := blobs.UploadBuffer(ctx, container, "a/b.json", want, nil); err != nil {
		t.Fatalf("upload: %v", err)
	}
	resp, err := blobs.DownloadStream(ctx, container, "a/b.json", nil)
	if err != nil {
		t.Fatalf("download: %v", err)
	}
	got, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("blob round trip: got %q (%v), want %q", got, err, want)
	}

	queues, err := azqueue.NewServiceClientFromConnectionString(srv.ConnectionString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	qname := azurite.UniqueName(t, "smoke")
	q := queues.NewQueueClient(qname)
	if _, err := q.Create(ctx, nil); err != nil {
		t.Fatalf("create queue: %v", err)
	}
	t.Cleanup(func() { _, _ = q.Delete(context.Background(), nil) })
	if _, err := q.EnqueueMessage(ctx, base64.StdEncoding.EncodeToString(want), nil); err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	deq, err := q.DequeueMessage(ctx, nil)
	if err != nil || len(deq.Messages) != 1 {
		t.Fatalf("dequeue: %v, %d messages", err, len(deq.Messages))
	}
	m := deq.Messages[0]
	body, err := base64.StdEncoding.DecodeString(*m.MessageText)
	if err != nil || !bytes.Equal(body, want) {
		t.Fatalf("queue round trip: got %q (%v), want %q", body, err, want)
	}
	if *m.DequeueCount != 1 {
		t.Errorf("DequeueCount = %d, want 1", *m.DequeueCount)
	}
}

func TestUniqueName(t *testing.T) {
	a, b := azurite.UniqueName(t, "c"), azurite.UniqueName(t, "c")
	if a == b {
		t.Fatalf("UniqueName returned %q twice", a)
	}
	for _, n := range []string{a, b} {
		if len(n) < 3 || len(n) > 63 {
			t.Errorf("%q: length %d out of 3..63", n, len(n))
		}
	}
}

// TestRestart_KeepsAcknowledgedWrites: a restart waits for Azurite to exit by itself, which
// saves its data, so a message enqueued just before is there afterwards (Azurite saves its
// metadata only every 5 s otherwise); a shutdown that cannot wait kills Azurite and says so.
func TestRestart_KeepsAcknowledgedWrites(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := azurite.Start(ctx, azurite.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	queue := func(s *azurite.Server) *azqueue.QueueClient {
		svc, err := azqueue.NewServiceClientFromConnectionString(s.ConnectionString(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return svc.NewQueueClient("kept")
	}
	q := queue(srv)
	if _, err := q.Create(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := q.EnqueueMessage(ctx, "acknowledged", nil); err != nil {
		t.Fatal(err)
	}
	srv2, err := srv.Restart(ctx)
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	defer srv2.Stop()
	peek, err := queue(srv2).PeekMessages(ctx, nil)
	if err != nil || len(peek.Messages) != 1 || *peek.Messages[0].MessageText != "acknowledged" {
		t.Fatalf("after the restart: %v, %d messages; want the one enqueued just before it", err, len(peek.Messages))
	}
	if srv2.Shutdown(0) {
		t.Error("a shutdown with no grace reported that Azurite exited by itself")
	}
	if !srv2.Shutdown(0) {
		t.Error("a second shutdown reported a kill")
	}
}
