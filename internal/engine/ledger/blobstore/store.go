package blobstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/appendblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/lib/memo"
)

// Store is the ledger over one blob container: ledger.Store on Azure Blob Storage.
type Store struct {
	c         *container.Client
	now       func() time.Time
	retries   int
	manifests *memo.Map[rememberedManifest] // the last manifest read or written per run, for UpdateManifest
}

// Options tune New; the zero value is fine.
type Options struct {
	// Now is the clock for Updated timestamps (default time.Now).
	Now func() time.Time
	// UpdateRetries bounds conflict retries (default ledger.DefaultUpdateRetries).
	UpdateRetries int
}

// New returns a ledger over container c (see EnsureContainer).
func New(c *container.Client, opts Options) *Store {
	s := &Store{c: c, now: opts.Now, retries: opts.UpdateRetries, manifests: memo.New[rememberedManifest](maxRememberedManifests)}
	if s.now == nil {
		s.now = time.Now
	}
	if s.retries <= 0 {
		s.retries = ledger.DefaultUpdateRetries
	}
	return s
}

// EnsureContainer creates the runs container if it is missing; concurrent callers all succeed.
func (s *Store) EnsureContainer(ctx context.Context) error {
	_, err := s.c.Create(ctx, nil)
	if err == nil || bloberror.HasCode(err, bloberror.ContainerAlreadyExists) {
		return nil
	}
	return fmt.Errorf("create runs container: %w", translate("", err))
}

func manifestPath(run string) string      { return run + "/manifest.json" }
func planPath(run string, b int) string   { return fmt.Sprintf("%s/plan/%06d.json", run, b) }
func resultPath(run string, i int) string { return fmt.Sprintf("%s/results/%07d.json", run, i) }
func resultPrefix(run string) string      { return run + "/results/" }
func blockPath(run string, sp ledger.Span) string {
	return fmt.Sprintf("%s/results/%07d+%d.json", run, sp.First, sp.Size)
}
func donePath(run string, shard int) string { return fmt.Sprintf("%s/done/%04d", run, shard) }
func failedPath(run string) string          { return run + "/failed" }
func reportPath(run string) string          { return run + "/report.json" }
func partialPath(run string, shard int) string {
	return fmt.Sprintf("%s/partials/%03d.json", run, shard)
}

// translate turns a storage client error into a one-line *ledger.StorageError about the named
// blob, whose Kind is the ledger's sentinel: ErrNotFound, ErrExists, ErrUnavailable (the same
// call may succeed later: no connection, a timeout, throttling, a 5xx), errETagMismatch for a
// failed condition, or nil.
func translate(name string, err error) error {
	if err == nil {
		return nil
	}
	se := &ledger.StorageError{Name: name, Cause: err}
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		se.Status, se.Code = re.StatusCode, re.ErrorCode
	}
	switch {
	case bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound):
		se.Kind = ledger.ErrNotFound
	case bloberror.HasCode(err, bloberror.BlobAlreadyExists, bloberror.ContainerAlreadyExists):
		se.Kind = ledger.ErrExists
	case bloberror.HasCode(err, bloberror.ConditionNotMet):
		se.Kind = errETagMismatch
	case unavailable(err):
		se.Kind = ledger.ErrUnavailable
	case errors.Is(err, context.Canceled):
		return err
	}
	return se
}

// unavailable reports whether err is a storage failure worth waiting out: the connection
// failed or timed out, or the service answered 408, 429 or 5xx. The caller's own cancellation
// is not one.
func unavailable(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode == http.StatusRequestTimeout || re.StatusCode == http.StatusTooManyRequests || re.StatusCode >= 500
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe)
}

var errETagMismatch = errors.New("etag mismatch")

var ifAbsent = &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: to.Ptr(azcore.ETagAny)}}

func ifMatch(etag ledger.ETag) *blob.AccessConditions {
	e := azcore.ETag(etag)
	return &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &e}}
}

// putJSON uploads v as JSON under the given conditions and returns the new ledger.ETag.
func (s *Store) putJSON(ctx context.Context, path string, v any, cond *blob.AccessConditions) (ledger.ETag, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode %s: %w", path, err)
	}
	return s.putBytes(ctx, path, b, cond)
}

// putBytes uploads JSON b under the given conditions and returns the new ledger.ETag.
func (s *Store) putBytes(ctx context.Context, path string, b []byte, cond *blob.AccessConditions) (ledger.ETag, error) {
	resp, err := s.c.NewBlockBlobClient(path).UploadBuffer(ctx, b, &blockblob.UploadBufferOptions{
		AccessConditions: cond,
		HTTPHeaders:      &blob.HTTPHeaders{BlobContentType: to.Ptr("application/json")},
	})
	if err != nil {
		return "", translate(path, err)
	}
	if resp.ETag == nil {
		return "", nil
	}
	return ledger.ETag(*resp.ETag), nil
}

// getJSON downloads path into v and returns its ledger.ETag.
func (s *Store) getJSON(ctx context.Context, path string, v any) (ledger.ETag, error) {
	b, etag, err := s.getBytes(ctx, path)
	if err != nil {
		return "", err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return "", fmt.Errorf("decode %s: %w", path, err)
	}
	return etag, nil
}

// getBytes downloads path and returns its bytes and its ledger.ETag.
func (s *Store) getBytes(ctx context.Context, path string) ([]byte, ledger.ETag, error) {
	resp, err := s.c.NewBlobClient(path).DownloadStream(ctx, nil)
	if err != nil {
		return nil, "", translate(path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", fmt.Errorf("read %s: %w", path, err)
	}
	var etag ledger.ETag
	if resp.ETag != nil {
		etag = ledger.ETag(*resp.ETag)
	}
	return b, etag, nil
}

// CreateManifest writes a new manifest once; ledger.ErrExists when the run already has one.
func (s *Store) CreateManifest(ctx context.Context, m *ledger.Manifest) error {
	if err := ledger.ValidateRunID(m.RunID); err != nil {
		return err
	}
	m.Version = ledger.ManifestVersion
	if m.Created.IsZero() {
		m.Created = s.now().UTC()
	}
	m.Updated = m.Created
	if !m.State.Final() {
		if err := s.putActive(ctx, ledger.ActiveOf(m)); err != nil {
			return fmt.Errorf("create manifest %s: index it: %w", m.RunID, err)
		}
	}
	if err := s.putManifest(ctx, m.RunID, m, ifAbsent); err != nil {
		return fmt.Errorf("create manifest %s: %w", m.RunID, err)
	}
	return nil
}

// putManifest writes m under cond and remembers what it wrote; a write whose outcome is
// unknown forgets the run's copy.
func (s *Store) putManifest(ctx context.Context, run string, m *ledger.Manifest, cond *blob.AccessConditions) error {
	path := manifestPath(run)
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	etag, err := s.putBytes(ctx, path, b, cond)
	if err != nil {
		s.manifests.Delete(run)
		return err
	}
	s.remember(run, b, etag)
	return nil
}

// ReadManifest reads a run's manifest; ledger.ErrNotFound when there is none.
func (s *Store) ReadManifest(ctx context.Context, run string) (ledger.Manifest, error) {
	m, _, err := s.readManifest(ctx, run)
	return m, err
}

func (s *Store) readManifest(ctx context.Context, run string) (ledger.Manifest, ledger.ETag, error) {
	var m ledger.Manifest
	if err := ledger.ValidateRunID(run); err != nil {
		return m, "", err
	}
	b, etag, err := s.getBytes(ctx, manifestPath(run))
	if err != nil {
		return m, "", fmt.Errorf("read manifest %s: %w", run, err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, "", fmt.Errorf("read manifest %s: decode: %w", run, err)
	}
	s.remember(run, b, etag)
	return m, etag, nil
}

// remember keeps body and etag as run's manifest; without an ETag it forgets the run's copy.
func (s *Store) remember(run string, body []byte, etag ledger.ETag) {
	if etag == "" {
		s.manifests.Delete(run)
		return
	}
	s.manifests.Put(run, rememberedManifest{body: body, etag: etag})
}

// manifestToUpdate is the manifest an update starts from: the copy this store last read or
// wrote when remembered is true and it has one (fromMemo), else one read now.
func (s *Store) manifestToUpdate(ctx context.Context, run string, remembered bool) (m ledger.Manifest, etag ledger.ETag, fromMemo bool, err error) {
	if remembered {
		if r, ok := s.manifests.Get(run); ok && json.Unmarshal(r.body, &m) == nil {
			return m, r.etag, true, nil
		}
		m = ledger.Manifest{}
	}
	m, etag, err = s.readManifest(ctx, run)
	return m, etag, false, err
}

var _ ledger.Store = (*Store)(nil)

// UpdateManifest applies fn to the current manifest and writes it back conditioned on the
// ledger.ETag it had, retrying on conflicts. When epoch is not ledger.NoFence and the
// manifest's epoch is newer, it fails with ledger.ErrFenced without calling fn. fn may return
// ledger.ErrNoChange to skip the write; the current manifest is returned either way.
//
// The first try starts from the copy this store last read or wrote, without a read: a write
// that takes effect proves that copy was current. Whatever fn or the fence decides on that
// copy other than a write is decided again on a fresh read, and a write that fails its
// condition counts as a conflict, so fn may be called once more than without the copy.
func (s *Store) UpdateManifest(ctx context.Context, run string, epoch int64, fn func(*ledger.Manifest) error) (ledger.Manifest, error) {
	if err := ledger.ValidateRunID(run); err != nil {
		return ledger.Manifest{}, err
	}
	remembered := true
	for conflicts := 0; ; {
		m, etag, fromMemo, err := s.manifestToUpdate(ctx, run, remembered)
		remembered = false
		if err != nil {
			return m, err
		}
		fenced := epoch != ledger.NoFence && m.Epoch > epoch
		wasFinal := m.State.Final()
		var ferr error
		if !fenced {
			ferr = fn(&m)
		}
		switch {
		case fromMemo && (fenced || ferr != nil):
			continue // decided on a copy that may be old: decide again on a fresh read
		case fenced:
			return m, fmt.Errorf("update manifest %s at epoch %d (run is at %d): %w", run, epoch, m.Epoch, ledger.ErrFenced)
		case errors.Is(ferr, ledger.ErrNoChange):
			return m, nil
		case ferr != nil:
			return m, ferr
		}
		m.Updated = s.now().UTC()
		err = s.putManifest(ctx, run, &m, ifMatch(etag))
		if err == nil {
			if m.State.Final() && !wasFinal {
				_ = s.RemoveActive(ctx, run) // an entry left behind is repaired by its readers
			}
			return m, nil
		}
		if !errors.Is(err, errETagMismatch) {
			return m, fmt.Errorf("update manifest %s: %w", run, err)
		}
		if conflicts++; conflicts >= s.retries {
			return m, fmt.Errorf("update manifest %s: %d attempts: %w", run, conflicts, ledger.ErrConflict)
		}
		if fromMemo {
			continue // the copy was old: read the current one at once
		}
		// Conflicts resolve by re-reading; a short, growing pause spreads contenders out.
		select {
		case <-ctx.Done():
			return m, ctx.Err()
		case <-time.After(time.Duration(conflicts) * 5 * time.Millisecond):
		}
	}
}

// PutPlanBatch stores a plan batch once; ledger.ErrExists when it is already stored.
func (s *Store) PutPlanBatch(ctx context.Context, run string, b ledger.PlanBatch) error {
	if _, err := s.putJSON(ctx, planPath(run, b.Batch), b, ifAbsent); err != nil {
		return fmt.Errorf("store plan batch %s/%d: %w", run, b.Batch, err)
	}
	return nil
}

// ReadPlanBatch reads a stored plan batch.
func (s *Store) ReadPlanBatch(ctx context.Context, run string, batch int) (ledger.PlanBatch, error) {
	var b ledger.PlanBatch
	if _, err := s.getJSON(ctx, planPath(run, batch), &b); err != nil {
		return b, fmt.Errorf("read plan batch %s/%d: %w", run, batch, err)
	}
	return b, nil
}

// PutResult records a partition's result once; ledger.ErrExists when one is already recorded.
func (s *Store) PutResult(ctx context.Context, r ledger.Result) error {
	if _, err := s.putJSON(ctx, resultPath(r.Run, r.Index), r, ifAbsent); err != nil {
		return fmt.Errorf("record result %s/%d: %w", r.Run, r.Index, err)
	}
	return nil
}

// ReadResult reads a partition's result; ledger.ErrNotFound when none is recorded.
func (s *Store) ReadResult(ctx context.Context, run string, index int) (ledger.Result, error) {
	var r ledger.Result
	if _, err := s.getJSON(ctx, resultPath(run, index), &r); err != nil {
		return r, fmt.Errorf("read result %s/%d: %w", run, index, err)
	}
	return r, nil
}

// PutBlock writes a span's block once, with its members in the blob's metadata (what
// ListResults reads); ledger.ErrExists when the span has one.
func (s *Store) PutBlock(ctx context.Context, b ledger.Block) error {
	if err := b.Validate(); err != nil {
		return err
	}
	body, err := json.Marshal(b)
	if err != nil {
		return fmt.Errorf("encode block %s/%s: %w", b.Run, b.Span, err)
	}
	path := blockPath(b.Run, b.Span)
	_, err = s.c.NewBlockBlobClient(path).UploadBuffer(ctx, body, &blockblob.UploadBufferOptions{
		AccessConditions: ifAbsent,
		HTTPHeaders:      &blob.HTTPHeaders{BlobContentType: to.Ptr("application/json")},
		Metadata:         map[string]*string{membersKey: to.Ptr(b.Members())},
	})
	if err != nil {
		return fmt.Errorf("record results of %s/%s: %w", b.Run, b.Span, translate(path, err))
	}
	return nil
}

// ReadBlock reads a span's block; ledger.ErrNotFound when it has none.
func (s *Store) ReadBlock(ctx context.Context, run string, sp ledger.Span) (ledger.Block, error) {
	var b ledger.Block
	if _, err := s.getJSON(ctx, blockPath(run, sp), &b); err != nil {
		return b, fmt.Errorf("read results of %s/%s: %w", run, sp, err)
	}
	return b, nil
}

// membersKey is the metadata of a block that names its members (ledger.Block.Members).
const membersKey = "members"

// ListResults calls fn with where each recorded result is, in index order, from one listing
// of results/ with metadata: a block's members come from its metadata, unread.
func (s *Store) ListResults(ctx context.Context, run string, fn func(ledger.ResultRef) error) error {
	prefix := resultPrefix(run)
	pager := s.c.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix,
		Include: container.ListBlobsInclude{Metadata: true}})
	var refs []ledger.ResultRef
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("list results of %s: %w", run, translate(prefix, err))
		}
		for _, item := range page.Segment.BlobItems {
			name := strings.TrimSuffix(strings.TrimPrefix(*item.Name, prefix), ".json")
			var modified time.Time
			if item.Properties != nil && item.Properties.LastModified != nil {
				modified = item.Properties.LastModified.UTC()
			}
			first, size, isBlock := strings.Cut(name, "+")
			if !isBlock {
				if i, err := strconv.Atoi(name); err == nil {
					refs = append(refs, ledger.ResultRef{Index: i, Modified: modified})
				}
				continue // else not a result blob
			}
			f, ferr := strconv.Atoi(first)
			n, nerr := strconv.Atoi(size)
			if ferr != nil || nerr != nil {
				continue
			}
			sp := ledger.Span{First: f, Size: n}
			members, err := s.blockMembers(ctx, run, sp, item.Metadata)
			if err != nil {
				return fmt.Errorf("list results of %s: %w", run, err)
			}
			for _, i := range members {
				refs = append(refs, ledger.ResultRef{Index: i, Block: sp, Modified: modified})
			}
		}
	}
	// Names sort a block (first+size) among the results of its own by its first index only.
	slices.SortStableFunc(refs, func(a, b ledger.ResultRef) int { return a.Index - b.Index })
	for _, r := range refs {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// blockMembers reads a listed block's members from its metadata, or from the block itself
// when the metadata lacks them.
func (s *Store) blockMembers(ctx context.Context, run string, sp ledger.Span, md map[string]*string) ([]int, error) {
	for k, v := range md {
		if strings.EqualFold(k, membersKey) && v != nil {
			return ledger.ParseMembers(sp, *v)
		}
	}
	b, err := s.ReadBlock(ctx, run, sp)
	if err != nil {
		return nil, err
	}
	out := make([]int, len(b.Results))
	for k, r := range b.Results {
		out[k] = r.Index
	}
	return out, nil
}

// AppendDone records one completion of each partition index in their done shard of the
// run's layout with one append (one block: storage appends it whole or not at all), creating
// the shard once if needed, and returns the completion ordinal of the last record within the
// shard (1 for the shard's first). Redelivered partitions may be recorded more than once.
func (s *Store) AppendDone(ctx context.Context, run string, layout ledger.DoneLayout, epoch int64, indexes ...int) (int64, error) {
	shard, err := layout.ShardOf(indexes)
	if err != nil {
		return 0, fmt.Errorf("append done %s: %w", run, err)
	}
	var rec strings.Builder
	for _, i := range indexes {
		fmt.Fprintf(&rec, "%012d %018d\n", i, epoch)
	}
	n, err := s.appendLog(ctx, donePath(run, shard), rec.String())
	if err != nil {
		return 0, fmt.Errorf("append done %s/%d (shard %d): %w", run, indexes[0], shard, err)
	}
	return n, nil
}

// AppendFailed appends a record per index to the run's failure log (its failure budget's
// count) and returns how many records it holds after the append.
func (s *Store) AppendFailed(ctx context.Context, run string, indexes ...int) (int64, error) {
	var rec strings.Builder
	for _, i := range indexes {
		fmt.Fprintf(&rec, "%012d %018d\n", i, 0)
	}
	n, err := s.appendLog(ctx, failedPath(run), rec.String())
	if err != nil {
		return 0, fmt.Errorf("append failed %s: %w", run, err)
	}
	return n, nil
}

// appendLog appends rec, whole records of ledger.DoneRecordSize bytes, to the append blob at
// path (created on the first append) in one call, and returns the records it holds after it.
func (s *Store) appendLog(ctx context.Context, path, rec string) (int64, error) {
	ab := s.c.NewAppendBlobClient(path)
	for created := false; ; {
		resp, err := ab.AppendBlock(ctx, streaming.NopCloser(strings.NewReader(rec)), nil)
		if err == nil {
			if resp.BlobAppendOffset == nil {
				return 0, errors.New("no append offset in the response")
			}
			off, err := strconv.ParseInt(*resp.BlobAppendOffset, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("append offset %q: %w", *resp.BlobAppendOffset, err)
			}
			return (off + int64(len(rec))) / ledger.DoneRecordSize, nil
		}
		if !bloberror.HasCode(err, bloberror.BlobNotFound) || created {
			return 0, translate(path, err)
		}
		// The first record: create the append blob once. Losing the create race is fine; the
		// winner's blob is the one we append to.
		_, cerr := ab.Create(ctx, &appendblob.CreateOptions{AccessConditions: ifAbsent})
		if cerr != nil && !bloberror.HasCode(cerr, bloberror.BlobAlreadyExists) {
			return 0, fmt.Errorf("create: %w", translate(path, cerr))
		}
		created = true
	}
}

// CreateDone creates a done shard, an empty append blob, unless it exists.
func (s *Store) CreateDone(ctx context.Context, run string, shard int) error {
	path := donePath(run, shard)
	_, err := s.c.NewAppendBlobClient(path).Create(ctx, &appendblob.CreateOptions{AccessConditions: ifAbsent})
	if err != nil && !bloberror.HasCode(err, bloberror.BlobAlreadyExists) {
		return fmt.Errorf("create done %s/%d: %w", run, shard, translate(path, err))
	}
	return nil
}

// DoneCount returns the number of completion records in a shard (0 if it does not exist).
func (s *Store) DoneCount(ctx context.Context, run string, shard int) (int64, error) {
	props, err := s.c.NewBlobClient(donePath(run, shard)).GetProperties(ctx, nil)
	if bloberror.HasCode(err, bloberror.BlobNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("done count %s/%d: %w", run, shard, translate(donePath(run, shard), err))
	}
	if props.ContentLength == nil {
		return 0, nil
	}
	return *props.ContentLength / ledger.DoneRecordSize, nil
}

// ClaimReport creates report.json once with the given (in-progress) report; the caller that
// gets nil is the one aggregator. Others get ledger.ErrExists.
func (s *Store) ClaimReport(ctx context.Context, r ledger.Report) (ledger.ETag, error) {
	etag, err := s.putJSON(ctx, reportPath(r.Run), r, ifAbsent)
	if err != nil {
		return "", fmt.Errorf("claim report %s: %w", r.Run, err)
	}
	return etag, nil
}

// WriteReport replaces the claimed report, guarded by the ledger.ETag the claim (or the last
// write) returned, and returns the new one.
func (s *Store) WriteReport(ctx context.Context, r ledger.Report, etag ledger.ETag) (ledger.ETag, error) {
	next, err := s.putJSON(ctx, reportPath(r.Run), r, ifMatch(etag))
	if errors.Is(err, errETagMismatch) {
		return "", fmt.Errorf("write report %s: %w: %w", r.Run, ledger.ErrConflict, err)
	} else if err != nil {
		return "", fmt.Errorf("write report %s: %w", r.Run, err)
	}
	return next, nil
}

// ReadReport reads a run's report and its ledger.ETag; ledger.ErrNotFound when none exists.
func (s *Store) ReadReport(ctx context.Context, run string) (ledger.Report, ledger.ETag, error) {
	var r ledger.Report
	etag, err := s.getJSON(ctx, reportPath(run), &r)
	if err != nil {
		return r, "", fmt.Errorf("read report %s: %w", run, err)
	}
	return r, etag, nil
}

// ListRuns calls fn with each run ID in the container, in name order, until fn returns false
// or the IDs run out.
func (s *Store) ListRuns(ctx context.Context, fn func(run string) bool) error {
	pager := s.c.NewListBlobsHierarchyPager("/", nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("list runs: %w", translate("", err))
		}
		for _, p := range page.Segment.BlobPrefixes {
			id := strings.TrimSuffix(*p.Name, "/")
			if ledger.ValidateRunID(id) != nil {
				continue
			}
			if !fn(id) {
				return nil
			}
		}
	}
	return nil
}

// ReadPartial reads one partial aggregate and its ETag; ErrNotFound when none exists.
func (s *Store) ReadPartial(ctx context.Context, run string, shard int) (ledger.Partial, ledger.ETag, error) {
	var p ledger.Partial
	if err := ledger.ValidateRunID(run); err != nil {
		return p, "", err
	}
	etag, err := s.getJSON(ctx, partialPath(run, shard), &p)
	if err != nil {
		return p, "", fmt.Errorf("read partial %s/%d: %w", run, shard, err)
	}
	return p, etag, nil
}

// WritePartial creates a partial once (etag "") or replaces it if it is still at etag.
func (s *Store) WritePartial(ctx context.Context, p ledger.Partial, etag ledger.ETag) error {
	if err := ledger.ValidateRunID(p.Run); err != nil {
		return err
	}
	cond := ifAbsent
	if etag != "" {
		cond = ifMatch(etag)
	}
	_, err := s.putJSON(ctx, partialPath(p.Run, p.Shard), p, cond)
	if errors.Is(err, errETagMismatch) {
		return fmt.Errorf("write partial %s/%d: %w: %w", p.Run, p.Shard, ledger.ErrConflict, err)
	} else if err != nil {
		return fmt.Errorf("write partial %s/%d: %w", p.Run, p.Shard, err)
	}
	return nil
}
