package devhost

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue/queueerror"

	"github.com/batonfn/baton/internal/engine/protocol"
)

// TestHost_QueueSemantics runs the queue listener against Azurite and the fake handler
// (maxDequeueCount 3, visibilityTimeout 1s): a good message is delivered once with the §1.5
// metadata and deleted; a failing one is retried with rising DequeueCount and then copied,
// unchanged, to <queue>-poison; a message that is not base64 goes there without an invocation.
func TestHost_QueueSemantics(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	srv, svc, q, queue := testQueue(t, ctx)
	var mu sync.Mutex
	records := map[string][]InvokeRecord{} // by message body
	h := startFake(t, fakeApp(t, true), 2, map[string]string{"FAKE_QUEUE": queue, "FakeStorage": srv.ConnectionString()}, func(o *Options) {
		o.OnInvoke = func(r InvokeRecord) {
			if r.Function != "Queue" {
				return
			}
			req, err := protocol.DecodeRequest(r.Request)
			if err != nil {
				t.Errorf("decode: %v", err)
				return
			}
			body, _ := protocol.DecodeMessage(req.Data["msg"])
			mu.Lock()
			records[string(body)] = append(records[string(body)], r)
			mu.Unlock()
		}
	})
	enc := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	good, bad, notB64 := `{"kind":"good","n":7,"Id":"forged"}`, "please fail", "%%% not base64 %%%"
	for _, text := range []string{enc(good), enc(bad), notB64} {
		if _, err := q.EnqueueMessage(ctx, text, nil); err != nil {
			t.Fatal(err)
		}
	}

	// Wait for both poison moves, then for the good message to be gone.
	for len(h.Poisoned()) < 2 {
		if ctx.Err() != nil {
			t.Fatalf("poisoned %v, want 2 messages", h.Poisoned())
		}
		time.Sleep(50 * time.Millisecond)
	}
	poison := svc.NewQueueClient(queue + PoisonSuffix)
	peek, err := poison.PeekMessages(ctx, &azqueue.PeekMessagesOptions{NumberOfMessages: to.Ptr(int32(32))})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, m := range peek.Messages {
		got[*m.MessageText] = true
	}
	if len(got) != 2 || !got[enc(bad)] || !got[notB64] {
		t.Errorf("poison queue holds %v, want the failing message and the non-base64 one, text unchanged", got)
	}
	props, err := q.GetProperties(ctx, nil)
	if err != nil || props.ApproximateMessagesCount == nil || *props.ApproximateMessagesCount != 0 {
		t.Errorf("queue still holds %v messages (%v), want 0", props.ApproximateMessagesCount, err)
	}

	mu.Lock()
	defer mu.Unlock()
	if n := len(records[notB64]); n != 0 {
		t.Errorf("non-base64 message invoked %d times, want 0", n)
	}
	if rs := records[bad]; len(rs) != 3 {
		t.Errorf("failing message invoked %d times, want maxDequeueCount=3", len(rs))
	} else {
		for i, r := range rs {
			req, _ := protocol.DecodeRequest(r.Request)
			md, err := protocol.DecodeQueueMetadata(req.Metadata)
			if err != nil || md.DequeueCount != int64(i+1) {
				t.Errorf("delivery %d: DequeueCount %d (%v), want %d", i+1, md.DequeueCount, err, i+1)
			}
			if i > 0 {
				if gap := r.Started.Sub(rs[i-1].End); gap < 900*time.Millisecond {
					t.Errorf("delivery %d came %s after the failure, want at least visibilityTimeout (1s)", i+1, gap)
				}
			}
		}
	}
	rs := records[good]
	if len(rs) != 1 || rs[0].Err != nil {
		t.Fatalf("good message: %d invocations (%v), want 1 success", len(rs), rs)
	}
	var raw struct {
		Data     map[string]json.RawMessage `json:"Data"`
		Metadata map[string]json.RawMessage `json:"Metadata"`
	}
	if err := json.Unmarshal(rs[0].Request, &raw); err != nil {
		t.Fatal(err)
	}
	if want := string(protocol.EncodeStringData(good)); string(raw.Data["msg"]) != want {
		t.Errorf("Data.msg = %s, want the double-encoded body %s", raw.Data["msg"], want)
	}
	for key, want := range map[string]string{"DequeueCount": `"1"`, "kind": `"\"good\""`, "n": `"7"`, "Id": `"\"forged\""`} {
		if got := string(raw.Metadata[key]); got != want {
			t.Errorf("Metadata.%s = %s, want %s", key, got, want)
		}
	}
	for _, key := range []string{"PopReceipt", "InsertionTime", "ExpirationTime", "NextVisibleTime", "sys"} {
		if _, ok := raw.Metadata[key]; !ok {
			t.Errorf("Metadata.%s missing", key)
		}
	}
	if _, err := poison.Delete(context.Background(), nil); err != nil && !queueerror.HasCode(err, queueerror.QueueNotFound) {
		t.Log(err)
	}
}
