package work_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/batonfn/baton/internal/enginejob"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/work"
	"github.com/batonfn/baton/work/synthetic"
)

// missingBlobJob is synthetic, except that each partition reads a blob that does not exist.
type missingBlobJob struct {
	work.Job
	cc        *container.Client
	permanent bool
}

func (j missingBlobJob) Process(ctx context.Context, p work.Partition) (json.RawMessage, error) {
	_, err := j.cc.NewBlobClient(fmt.Sprintf("missing/%d", p.Index)).DownloadStream(ctx, nil)
	if err == nil {
		return nil, fmt.Errorf("blob missing/%d exists", p.Index)
	}
	err = fmt.Errorf("read input %d: %w", p.Index, err)
	if j.permanent {
		err = work.Permanent(err)
	}
	return nil, err
}

// TestWorker_StorageErrorStoredShort: a partition that fails on Azurite's real error, at once
// (permanent) or on its last delivery, records the error code and status, never the URL, the
// response body or its request ID.
func TestWorker_StorageErrorStoredShort(t *testing.T) {
	for _, permanent := range []bool{true, false} {
		t.Run(fmt.Sprintf("permanent=%v", permanent), func(t *testing.T) {
			f := newFixture(t)
			jobs := work.NewRegistry()
			jobs.Register(synthetic.Name, missingBlobJob{Job: enginejob.Of(synthetic.New()), cc: f.cc, permanent: permanent})
			cfg := f.cfg
			cfg.Jobs = jobs
			f.w = f.newWorker(cfg)
			f.createRun("short", synthetic.Params{Partitions: 1})
			delivery := 1
			if !permanent {
				delivery = f.w.MaxDeliveries()
			}
			_ = f.deliver("short", 0, delivery) // the last delivery reports giving up; the result is recorded either way
			r, err := f.store.ReadResult(f.ctx, "short", 0)
			if err != nil {
				t.Fatalf("no result recorded: %v", err)
			}
			if r.OK || !strings.Contains(r.Error, "read input 0: BlobNotFound (404)") {
				t.Errorf("result error %q, want the cause with the error code and status", r.Error)
			}
			for _, leak := range []string{"http://", "127.0.0.1", "devstoreaccount1", "<?xml", "RequestId", "RESPONSE", "\n"} {
				if strings.Contains(r.Error, leak) {
					t.Errorf("stored error contains %q: %q", leak, r.Error)
				}
			}
			if m := f.manifest("short"); m.State != ledger.StateFailed {
				t.Errorf("run is %s, want failed", m.State)
			}
		})
	}
}
