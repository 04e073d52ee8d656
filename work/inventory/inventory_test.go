package inventory_test

import (
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonfn/baton"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"

	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/engine/ledger/blobstore"
	"github.com/batonfn/baton/internal/enginejob"
	"github.com/batonfn/baton/internal/tools/azurite"
	"github.com/batonfn/baton/work"
	"github.com/batonfn/baton/work/inventory"
)

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// seedBlob describes one seeded blob; the expected summary is computed from these, never
// from a listing.
type seedBlob struct {
	name, contentType, tier string
	body                    []byte
	noMD5, wrongMD5         bool
}

const seeded = 300

// seedSpec is 300 blobs under data/: three content types, Hot (the default, reported as
// inferred Hot), Cool for every 5th, Archive for 6 (unreadable), 3 with a wrong Content-MD5
// and 10 with none.
func seedSpec() []seedBlob {
	types := []string{"text/plain", "application/json", "image/png"}
	var out []seedBlob
	for i := range seeded {
		b := seedBlob{name: fmt.Sprintf("data/%04d", i), contentType: types[i%3], tier: "Hot",
			body: fmt.Appendf(nil, "%0*d", i*7+1, i)}
		switch {
		case i%50 == 7:
			b.tier = "Archive"
		case i%100 == 13:
			b.wrongMD5 = true
		case i%30 == 11:
			b.noMD5 = true
		case i%5 == 0:
			b.tier = "Cool"
		}
		out = append(out, b)
	}
	return out
}

// seed uploads the spec (plus blobs outside the prefix) with 16 uploads at a time.
func seed(t *testing.T, ctx context.Context, client *azblob.Client, cont string, spec []seedBlob) {
	t.Helper()
	if _, err := client.CreateContainer(ctx, cont, nil); err != nil {
		t.Fatal(err)
	}
	all := append(slices.Clone(spec), seedBlob{name: "other/x", contentType: "text/plain", tier: "Hot", body: []byte("outside")},
		seedBlob{name: "data", contentType: "text/plain", tier: "Hot", body: []byte("sorts before the prefix")})
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for _, b := range all {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := put(ctx, client, cont, b); err != nil {
				mu.Lock()
				firstErr = errors.Join(firstErr, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
}

func put(ctx context.Context, client *azblob.Client, cont string, b seedBlob) error {
	bc := client.ServiceClient().NewContainerClient(cont).NewBlockBlobClient(b.name)
	if _, err := bc.UploadBuffer(ctx, b.body, &blockblob.UploadBufferOptions{
		HTTPHeaders: &blob.HTTPHeaders{BlobContentType: to.Ptr(b.contentType)}}); err != nil {
		return err
	}
	switch {
	case b.noMD5: // setting the headers without an MD5 clears it
		_, err := bc.SetHTTPHeaders(ctx, blob.HTTPHeaders{BlobContentType: to.Ptr(b.contentType)}, nil)
		return err
	case b.wrongMD5:
		_, err := bc.SetHTTPHeaders(ctx, blob.HTTPHeaders{BlobContentType: to.Ptr(b.contentType), BlobContentMD5: wrongMD5(b)}, nil)
		return err
	case b.tier != "Hot":
		_, err := bc.SetTier(ctx, blob.AccessTier(b.tier), nil)
		return err
	}
	return nil
}

func wrongMD5(b seedBlob) []byte {
	s := md5.Sum(append([]byte("not "), b.body...))
	return s[:]
}

// expected computes the summary the inventory must report for spec.
func expected(spec []seedBlob, partitions int) inventory.Summary {
	s := inventory.Summary{ByContentType: map[string]inventory.Tally{}, ByTier: map[string]inventory.Tally{},
		Corrupt: []inventory.Corrupt{}, Unreadable: []inventory.Unreadable{}, Partitions: partitions}
	add := func(m map[string]inventory.Tally, k string, n int64) {
		t := m[k]
		t.Objects++
		t.Bytes += n
		m[k] = t
	}
	for _, b := range spec {
		n := int64(len(b.body))
		s.Objects++
		s.Bytes += n
		add(s.ByContentType, b.contentType, n)
		add(s.ByTier, b.tier, n)
		real := md5.Sum(b.body)
		switch {
		case b.noMD5:
			s.NoMD5++
		case b.tier == "Archive":
			s.UnreadableCount++
			s.Unreadable = append(s.Unreadable, inventory.Unreadable{Name: b.name, Error: "409 BlobArchived"})
		case b.wrongMD5:
			s.CorruptCount++
			s.Corrupt = append(s.Corrupt, inventory.Corrupt{Name: b.name,
				Expected: base64.StdEncoding.EncodeToString(wrongMD5(b)), Actual: base64.StdEncoding.EncodeToString(real[:])})
		default:
			s.Verified++
		}
	}
	return s
}

// planAll runs the job's planner from cursor and returns the payloads and the cursors.
func planAll(t *testing.T, ctx context.Context, job baton.Job, params json.RawMessage, cursor string) ([]inventory.Range, []string) {
	t.Helper()
	var ranges []inventory.Range
	var cursors []string
	err := job.Plan(ctx, params, cursor, func(p json.RawMessage, next string) error {
		var r inventory.Range
		if err := json.Unmarshal(p, &r); err != nil {
			return err
		}
		ranges = append(ranges, r)
		cursors = append(cursors, next)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ranges, cursors
}

func TestInventory_SeededContainerThroughTheWorker(t *testing.T) {
	ctx, client, cont, spec := seededContainer(t)
	job := inventory.New(client, inventory.Options{})
	params := json.RawMessage(fmt.Sprintf(`{"container":%q,"prefix":"data/","partitionSize":64}`, cont))

	// Plan: ceil(300/64) = 5 contiguous ranges; resuming from a cursor gives the rest.
	ranges, cursors := planAll(t, ctx, job, params, "")
	want := []inventory.Range{{"", "data/0063"}, {"data/0063", "data/0127"}, {"data/0127", "data/0191"},
		{"data/0191", "data/0255"}, {"data/0255", "data/0299"}}
	if !reflect.DeepEqual(ranges, want) {
		t.Fatalf("planned %v, want %v", ranges, want)
	}
	if rest, _ := planAll(t, ctx, job, params, cursors[1]); !reflect.DeepEqual(rest, want[2:]) {
		t.Errorf("resumed from %q: planned %v, want %v", cursors[1], rest, want[2:])
	}

	// Run it through the Worker, as the leader would have set it up.
	runs := blobstore.New(client.ServiceClient().NewContainerClient(azurite.UniqueName(t, "runs")), blobstore.Options{})
	if err := runs.EnsureContainer(ctx); err != nil {
		t.Fatal(err)
	}
	jobs := work.NewRegistry()
	jobs.Register(inventory.Name, enginejob.Of(job))
	if err := jobs.ValidateParams(inventory.Name, params); err != nil {
		t.Fatal(err)
	}
	if err := runs.CreateManifest(ctx, &ledger.Manifest{RunID: "inv", Trigger: ledger.TriggerManual, Epoch: 1,
		Segments: []ledger.Segment{{Epoch: 1}}, Job: inventory.Name, Params: params, State: ledger.StateRunning,
		Partitions: len(ranges), PlanDone: true, BatchSize: 100}); err != nil {
		t.Fatal(err)
	}
	w, err := work.NewWorker(work.WorkerConfig{Store: runs, Jobs: jobs, MaxDeliveries: 3})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range ranges {
		payload, _ := json.Marshal(r)
		env := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindPartition, Run: "inv", Epoch: 1, Part: i, Payload: payload}
		if err := w.HandlePartition(ctx, env, work.Delivery{MessageID: env.MessageID(), Count: 1}); err != nil {
			t.Fatalf("partition %d: %v", i, err)
		}
	}
	rep, _, err := runs.ReadReport(ctx, "inv")
	if err != nil {
		t.Fatal(err)
	}
	if rep.State != ledger.StateSucceeded || rep.Succeeded != len(ranges) {
		t.Fatalf("report %s with %d/%d partitions succeeded, want succeeded", rep.State, rep.Succeeded, len(ranges))
	}
	var got inventory.Summary
	if err := json.Unmarshal(rep.Aggregate, &got); err != nil {
		t.Fatal(err)
	}
	wantSum := expected(spec, len(ranges))
	if !reflect.DeepEqual(got, wantSum) {
		g, _ := json.MarshalIndent(got, "", " ")
		w, _ := json.MarshalIndent(wantSum, "", " ")
		t.Errorf("aggregate:\n%s\nwant:\n%s", g, w)
	}
	if got.CorruptCount != 3 || got.UnreadableCount != 6 || got.NoMD5 != 10 {
		t.Errorf("corrupt %d, unreadable %d, no MD5 %d; want 3, 6, 10 (the seeding)", got.CorruptCount, got.UnreadableCount, got.NoMD5)
	}
}

func TestInventory_PlanEdges(t *testing.T) {
	ctx := testContext(t)
	client, err := azclient.Blob(azurite.Shared(t).Storage(), nil)
	if err != nil {
		t.Fatal(err)
	}
	cont := azurite.UniqueName(t, "inv")
	seed(t, ctx, client, cont, nil) // only "data" and "other/x"
	job := inventory.New(client, inventory.Options{})
	for _, tc := range []struct {
		name   string
		params string
		want   []inventory.Range
	}{
		{"empty prefix range", `{"container":%q,"prefix":"data/"}`, nil},
		{"whole container, one per partition", `{"container":%q,"partitionSize":1}`, []inventory.Range{{"", "data"}, {"data", "other/x"}}},
		{"more room than names", `{"container":%q,"partitionSize":5000}`, []inventory.Range{{"", "other/x"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := planAll(t, ctx, job, json.RawMessage(fmt.Sprintf(tc.params, cont)), "")
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("planned %v, want %v", got, tc.want)
			}
		})
	}
	err = job.Plan(ctx, json.RawMessage(`{"container":"no-such-container"}`), "", func(json.RawMessage, string) error { return nil })
	if err == nil {
		t.Error("planning a missing container succeeded")
	}
}

func TestInventory_ProcessRejectsBadPayloads(t *testing.T) {
	client, err := azclient.Blob(azurite.Shared(t).Storage(), nil)
	if err != nil {
		t.Fatal(err)
	}
	job := inventory.New(client, inventory.Options{})
	for _, p := range []string{`{}`, `{"after":"b","last":"a"}`, `{"after":"a","last":"a"}`, `{"last":"a","extra":1}`, `[]`, `null`} {
		_, err := job.Process(context.Background(), baton.Partition{Params: json.RawMessage(`{"container":"abc"}`), Payload: json.RawMessage(p)})
		if !errors.Is(err, baton.ErrPermanent) {
			t.Errorf("payload %s: got %v, want a permanent error", p, err)
		}
	}
}

// A container name is checked against Azure's grammar before anything else: a spelling that the
// service would read as another container (escaped, a path, a query) never reaches it, so the
// reserved names cannot be bypassed.
func TestParseParams_RefusesWhatIsNotAContainerName(t *testing.T) {
	job := inventory.New(nil, inventory.Options{Reserved: []string{"runs", "leases"}})
	for _, name := range []string{"%61zure-webjobs-secrets", "x/../azure-webjobs-secrets", "run%73", "runs?x=1", "runs/", "./runs",
		"Runs", "a--b", "-abc", "abc-", "ab", strings.Repeat("a", 64), "runs ", "r\\uns", "azure_webjobs"} {
		raw := json.RawMessage(`{"container":` + strconv.Quote(name) + `}`)
		err := job.ValidateParams(raw)
		if err == nil || !strings.Contains(err.Error(), "lower-case letters, digits and single hyphens") {
			t.Errorf("container %q: %v, want refused as not a container name", name, err)
		}
	}
	for _, name := range []string{"runs", "azure-webjobs-secrets", "app-package-x"} {
		if err := job.ValidateParams(json.RawMessage(`{"container":"` + name + `"}`)); !errors.Is(err, inventory.ErrReserved) {
			t.Errorf("container %q: %v, want ErrReserved", name, err)
		}
	}
}

func TestParseParams(t *testing.T) {
	for _, tc := range []struct {
		raw      string
		ok       bool
		wantSize int
	}{
		{`{"container":"abc"}`, true, inventory.DefaultPartitionSize},
		{`{"container":"abc","prefix":"x/","partitionSize":5000}`, true, 5000},
		{`{"container":"abc","partitionSize":1}`, true, 1},
		{`{}`, false, 0},
		{`{"container":"ab"}`, false, 0},
		{`{"container":"abc","partitionSize":5001}`, false, 0},
		{`{"container":"abc","partitionSize":-1}`, false, 0},
		{`{"container":"abc","bogus":1}`, false, 0},
		{``, false, 0},
		{`{"container":"a-1-b"}`, true, inventory.DefaultPartitionSize},
		{`{"container":"` + strings.Repeat("a", 63) + `"}`, true, inventory.DefaultPartitionSize},
	} {
		p, err := inventory.ParseParams(json.RawMessage(tc.raw))
		if (err == nil) != tc.ok || (tc.ok && p.PartitionSize != tc.wantSize) {
			t.Errorf("ParseParams(%s) = %+v, %v; want ok=%v, partitionSize %d", tc.raw, p, err, tc.ok, tc.wantSize)
		}
	}
}

func TestAggregate_CapsAndSortsTheLists(t *testing.T) {
	const parts, each = 3, 600
	var rs []baton.Result
	for p := range parts {
		s := inventory.Summary{Tally: inventory.Tally{Objects: each, Bytes: each * 10},
			ByContentType: map[string]inventory.Tally{"a": {Objects: each, Bytes: each * 10}},
			ByTier:        map[string]inventory.Tally{"Hot": {Objects: each, Bytes: each * 10}}, CorruptCount: each}
		for k := range each {
			// Interleave names across partitions so sorting matters.
			s.Corrupt = append(s.Corrupt, inventory.Corrupt{Name: fmt.Sprintf("n%05d", k*parts+(parts-1-p))})
		}
		out, _ := json.Marshal(s)
		rs = append(rs, baton.Result{Index: p, OK: true, Output: out})
	}
	rs = append(rs, baton.Result{Index: parts, OK: false, Error: "gave up"})
	out, err := inventory.New(nil, inventory.Options{}).Aggregate(context.Background(), baton.RunInfo{Partitions: parts + 1},
		func(yield func(baton.Result, error) bool) {
			for _, r := range rs {
				if !yield(r, nil) {
					return
				}
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	var got inventory.Summary
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if got.CorruptCount != parts*each || len(got.Corrupt) != inventory.MaxListed || !got.Truncated {
		t.Errorf("corrupt count %d, listed %d, truncated %v; want %d, %d, true", got.CorruptCount, len(got.Corrupt), got.Truncated, parts*each, inventory.MaxListed)
	}
	for k, c := range got.Corrupt {
		if want := fmt.Sprintf("n%05d", k); c.Name != want {
			t.Fatalf("corrupt[%d] = %s, want %s (the first %d names in order)", k, c.Name, want, inventory.MaxListed)
		}
	}
	if got.Objects != parts*each || got.ByTier["Hot"].Bytes != parts*each*10 || got.FailedPartitions != 1 || got.Partitions != parts+1 {
		t.Errorf("totals %+v, failed partitions %d of %d: want %d objects, %d Hot bytes, 1 of %d", got.Tally, got.FailedPartitions, got.Partitions, parts*each, parts*each*10, parts+1)
	}
}
