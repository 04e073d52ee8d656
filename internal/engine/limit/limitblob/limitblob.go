// Package limitblob keeps limits' states in blobs: limit.Store on Azure Blob Storage, one
// blob per limit (_limits/<name>.json beside the runs), each update a conditional write under
// the ETag of the state this store last read or wrote.
package limitblob

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
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

// FreshFor is how long a state this store read or wrote is written on without a read first:
// on a busy limit, other instances have most likely written since, and a write that loses
// costs a call more than the read.
const FreshFor = 500 * time.Millisecond

// ErrConflict: an update kept losing the race for the blob. It wraps limit.ErrContended.
var ErrConflict = fmt.Errorf("too many conflicting updates: %w", limit.ErrContended)

// Store is limit.Store over one blob container.
type Store struct {
	c       *container.Client
	retries int
	now     func() time.Time

	mu    sync.Mutex
	known map[string]known
}

// known is the state this store last read or wrote, its ETag, and when.
type known struct {
	st   limit.State
	etag azcore.ETag
	at   time.Time
}

// New returns a store over container c, which must exist, on the clock now (nil: time.Now).
func New(c *container.Client, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{c: c, retries: DefaultRetries, now: now, known: map[string]known{}}
}

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
// read and one write; but fn is first applied to the state this store last read or wrote, if
// less than FreshFor ago, and written under its ETag: one call when no one else wrote since
// (fn's refusal to write on it is not trusted: the state is read).
func (s *Store) Update(ctx context.Context, name string, fn func(*limit.State) error) (limit.State, error) {
	if w, ok := s.last(name); ok {
		st := w.st.Clone()
		if fn(&st) == nil {
			done, err := s.put(ctx, name, &st, &w.etag)
			if done || err != nil {
				return st, err
			}
			if err := backoff(ctx, 0); err != nil {
				return st, err
			}
		}
	}
	for attempt := 0; ; attempt++ {
		st, etag, err := s.get(ctx, name)
		if err != nil {
			return st, err
		}
		s.remember(name, st, etag)
		if err := fn(&st); errors.Is(err, limit.ErrNoChange) {
			return st, nil
		} else if err != nil {
			return st, err
		}
		if done, err := s.put(ctx, name, &st, etag); done || err != nil {
			return st, err
		}
		if attempt+1 >= s.retries {
			return st, fmt.Errorf("%s: %d attempts: %w", Path(name), attempt+1, ErrConflict)
		}
		if err := backoff(ctx, attempt+1); err != nil {
			return st, err
		}
	}
}

// backoff waits after a write lost the race, before the read that tries again: a random
// 1 ms to 10·2^losses ms (at most 160 ms), so writers that came together spread out rather
// than lose again to each other.
func backoff(ctx context.Context, losses int) error {
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(time.Duration(1+rand.IntN(10<<min(losses, 4))) * time.Millisecond):
		return nil
	}
}

// put writes st under etag (nil: only if there is no state yet): done, or false when another
// write came first.
func (s *Store) put(ctx context.Context, name string, st *limit.State, etag *azcore.ETag) (bool, error) {
	b, err := json.Marshal(st)
	if err != nil {
		return false, fmt.Errorf("encode %s: %w", Path(name), err)
	}
	cond := &blob.ModifiedAccessConditions{IfNoneMatch: to.Ptr(azcore.ETagAny)}
	if etag != nil {
		cond = &blob.ModifiedAccessConditions{IfMatch: etag}
	}
	resp, err := s.c.NewBlockBlobClient(Path(name)).UploadBuffer(ctx, b, &blockblob.UploadBufferOptions{
		AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: cond},
		HTTPHeaders:      &blob.HTTPHeaders{BlobContentType: to.Ptr("application/json")},
	})
	if err == nil {
		s.remember(name, *st, resp.ETag)
		return true, nil
	}
	s.remember(name, limit.State{}, nil) // whatever it knew is stale
	if bloberror.HasCode(err, bloberror.ConditionNotMet, bloberror.BlobAlreadyExists) {
		return false, nil
	}
	return false, fmt.Errorf("write %s: %w", Path(name), err)
}

// last is the state this store last read or wrote for the limit, unless a write of it lost
// the race since or it is older than FreshFor.
func (s *Store) last(name string) (known, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.known[name]
	return w, ok && s.now().Sub(w.at) < FreshFor
}

// remember notes st, read or written with etag, as the limit's latest state (etag nil: none
// is known).
func (s *Store) remember(name string, st limit.State, etag *azcore.ETag) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if etag == nil {
		delete(s.known, name)
		return
	}
	s.known[name] = known{st: st.Clone(), etag: *etag, at: s.now()}
}
