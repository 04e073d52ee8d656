package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/tools/azurite"
)

// TestStartManual_StorageErrorStoredShort: an inventory of a container that does not exist
// fails in planning (when the ad-hoc run's start check is delivered) with Azurite's real
// error; the run's stored reason names the error code and status only, while the log keeps the
// whole error.
func TestStartManual_StorageErrorStoredShort(t *testing.T) {
	e := newRunEnv(t)
	blobs, err := azclient.Blob(e.srv.Storage(), nil)
	if err != nil {
		t.Fatal(err)
	}
	e.jobs.Register("inventory", &listJob{blobs: blobs})
	var logs bytes.Buffer
	in := e.instanceWith("a", nil, func(c *Config) { c.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
	ctx := testCtx(t)
	missing := azurite.UniqueName(t, "missing")
	out, err := in.c.StartManual(ctx, ManualRequest{Job: "inventory", Params: json.RawMessage(`{"container":"` + missing + `"}`)})
	if err != nil || out.Status != StatusStarted {
		t.Fatalf("StartManual: %+v, %v", out, err)
	}
	if err := in.c.Check(ctx, startCheck(t, e.drain(), out.Run), firstDelivery); err != nil {
		t.Fatalf("the start check of a run that cannot be planned: %v, want nil (nothing to retry)", err)
	}
	m := e.manifest(out.Run)
	if m.State != ledger.StateFailed {
		t.Fatalf("run %s is %s, want failed (reason %q)", out.Run, m.State, m.Reason)
	}
	if !strings.Contains(m.Reason, "ContainerNotFound (404)") {
		t.Errorf("reason %q, want the error code and status", m.Reason)
	}
	for _, leak := range []string{"http://", "127.0.0.1", "devstoreaccount1", "<?xml", "RequestId", "RESPONSE", "\n"} {
		if strings.Contains(m.Reason, leak) {
			t.Errorf("stored reason contains %q: %q", leak, m.Reason)
		}
	}
	if !strings.Contains(logs.String(), "RequestId") || !strings.Contains(logs.String(), missing) {
		t.Errorf("the log does not keep the full error:\n%s", logs.String())
	}
}

// listJob plans one partition per blob of the container its params name, reading it as the
// built-in inventory job does: a container that does not exist fails planning with the
// service's error.
type listJob struct {
	countJob
	blobs *azblob.Client
}

func (j *listJob) Plan(ctx context.Context, params json.RawMessage, cursor string, emit func(json.RawMessage, string) error) error {
	var p struct{ Container string }
	if err := json.Unmarshal(params, &p); err != nil {
		return err
	}
	pager := j.blobs.NewListBlobsFlatPager(p.Container, nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return err
		}
		for _, b := range page.Segment.BlobItems {
			if err := emit(json.RawMessage(`{}`), *b.Name); err != nil {
				return err
			}
		}
	}
	return nil
}
