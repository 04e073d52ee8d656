// Package limitblob keeps limits' states in blobs: limit.Store on Azure Blob Storage, one
// blob per limit (_limits/<name>.json beside the runs), each update a conditional write under
// the ETag read.
package limitblob

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/batonfn/baton/internal/engine/limit"
)

// Prefix is where limits' states live in the runs container: no run ID starts with '_'.
const Prefix = "_limits/"

// DefaultRetries bounds an update's conflict retries.
const DefaultRetries = 50

// ErrConflict: an update kept losing the race for the blob. It wraps limit.ErrContended.
var ErrConflict = fmt.Errorf("too many conflicting updates: %w", limit.ErrContended)

// Store is limit.Store over one blob container.
type Store struct {
	c       *container.Client
	retries int
}

// New returns a store over container c, which must exist.
func New(c *container.Client) *Store { return &Store{c: c, retries: DefaultRetries} }

// Path is the blob of the named limit.
func Path(name string) string { return Prefix + name + ".json" }

// Read returns the limit's state (the zero State when it has none yet, nor the container).
func (s *Store) Read(ctx context.Context, name string) (limit.State, error) {
	st, _, err := s.get(ctx, name)
	if bloberror.HasCode(err, bloberror.ContainerNotFound) {
		return limit.State{}, nil
	}
	return st, err
}

func (s *Store) get(ctx context.Context, name string) (limit.State, *azcore.ETag, error) {
	var st limit.State
	resp, err := s.c.NewBlobClient(Path(name)).DownloadStream(ctx, nil)
	if bloberror.HasCode(err, bloberror.BlobNotFound) {
		return st, nil, nil
	}
	if err != nil {
		return st, nil, fmt.Errorf("read %s: %w", Path(name), err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return st, nil, fmt.Errorf("read %s: %w", Path(name), err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, nil, fmt.Errorf("decode %s: %w", Path(name), err)
	}
	return st, resp.ETag, nil
}

// Update applies fn to the limit's state and writes it under the ETag read (If-None-Match *
// when there was none), retrying on a conflict with a short random backoff. Each try is one
// read and one write.
func (s *Store) Update(ctx context.Context, name string, fn func(*limit.State) error) (limit.State, error) {
	for attempt := 0; ; attempt++ {
		st, etag, err := s.get(ctx, name)
		if err != nil {
			return st, err
		}
		if err := fn(&st); errors.Is(err, limit.ErrNoChange) {
			return st, nil
		} else if err != nil {
			return st, err
		}
		b, err := json.Marshal(&st)
		if err != nil {
			return st, fmt.Errorf("encode %s: %w", Path(name), err)
		}
		cond := &blob.ModifiedAccessConditions{IfNoneMatch: to.Ptr(azcore.ETagAny)}
		if etag != nil {
			cond = &blob.ModifiedAccessConditions{IfMatch: etag}
		}
		_, err = s.c.NewBlockBlobClient(Path(name)).UploadBuffer(ctx, b, &blockblob.UploadBufferOptions{
			AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: cond},
			HTTPHeaders:      &blob.HTTPHeaders{BlobContentType: to.Ptr("application/json")},
		})
		if err == nil {
			return st, nil
		}
		if !bloberror.HasCode(err, bloberror.ConditionNotMet, bloberror.BlobAlreadyExists) {
			return st, fmt.Errorf("write %s: %w", Path(name), err)
		}
		if attempt+1 >= s.retries {
			return st, fmt.Errorf("%s: %d attempts: %w", Path(name), attempt+1, ErrConflict)
		}
		d := time.Duration(1+rand.IntN(5*min(attempt+1, 10))) * time.Millisecond
		select {
		case <-ctx.Done():
			return st, context.Cause(ctx)
		case <-time.After(d):
		}
	}
}
