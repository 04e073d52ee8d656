package inventory

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/batonfn/baton/work"
)

// Name is the job's registry name.
const Name = "inventory"

// Partition sizes, and the cap on listed problem blobs in the aggregate.
const (
	DefaultPartitionSize = 500
	MaxPartitionSize     = 5000
	MaxListed            = 1000
)

// Params configure an inventory run.
type Params struct {
	Container     string `json:"container"`
	Prefix        string `json:"prefix,omitempty"`
	PartitionSize int    `json:"partitionSize,omitempty"`
}

// ParseParams strictly decodes and validates params, filling in the default partition size.
func ParseParams(raw json.RawMessage) (Params, error) {
	var p Params
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, fmt.Errorf("params: %w", err)
	}
	if p.PartitionSize == 0 {
		p.PartitionSize = DefaultPartitionSize
	}
	switch {
	case p.Container == "":
		return p, errors.New("params: container is required")
	case len(p.Container) < 3 || len(p.Container) > 63:
		return p, fmt.Errorf("params: container %q: want 3-63 characters", p.Container)
	case len(p.Prefix) > 1024:
		return p, errors.New("params: prefix is longer than a blob name can be")
	case p.PartitionSize < 1 || p.PartitionSize > MaxPartitionSize:
		return p, fmt.Errorf("params: partitionSize %d, want 1..%d", p.PartitionSize, MaxPartitionSize)
	}
	return p, nil
}

// Range is a partition's payload: the names in (After, Last].
type Range struct {
	After string `json:"after"`
	Last  string `json:"last"`
}

// Job is the inventory job over one storage account.
type Job struct {
	client *azblob.Client
}

// New returns the inventory job reading through client. With a nil client the job reads the
// app's storage account, which the app hands it at start-up (UseStorage).
func New(client *azblob.Client) work.Job { return &Job{client: client} }

// UseStorage gives a job built without a client the app's storage account; a job built with
// a client keeps it. Baton calls it once at start-up, before any invocation.
func (j *Job) UseStorage(client *azblob.Client) {
	if j.client == nil {
		j.client = client
	}
}

var (
	_ work.Job             = (*Job)(nil)
	_ work.ParamsValidator = (*Job)(nil)
)

// ValidateParams implements work.ParamsValidator.
func (*Job) ValidateParams(params json.RawMessage) error {
	_, err := ParseParams(params)
	return err
}

// Plan lists the names after cursor and emits ranges of PartitionSize names.
func (j *Job) Plan(ctx context.Context, params json.RawMessage, cursor string, emit func(json.RawMessage, string) error) error {
	p, err := ParseParams(params)
	if err != nil {
		return err
	}
	after, n := cursor, 0
	var last string
	flush := func() error {
		b, err := json.Marshal(Range{After: after, Last: last})
		if err != nil {
			return err
		}
		if err := emit(b, last); err != nil {
			return err
		}
		after, n = last, 0
		return nil
	}
	err = j.list(ctx, p, cursor, func(item *container.BlobItem) (bool, error) {
		last = *item.Name
		if n++; n == p.PartitionSize {
			return true, flush()
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	if n > 0 {
		return flush()
	}
	return nil
}

// list calls fn with each blob under the prefix whose name sorts after `after`, in name
// order, until fn returns false.
func (j *Job) list(ctx context.Context, p Params, after string, fn func(*container.BlobItem) (bool, error)) error {
	cc := j.client.ServiceClient().NewContainerClient(p.Container)
	startFrom := after != ""
	for {
		opts := &container.ListBlobsFlatOptions{Prefix: &p.Prefix}
		if startFrom {
			opts.StartFrom = &after // inclusive: the name itself is skipped below
		}
		retry, err := listPages(ctx, cc.NewListBlobsFlatPager(opts), after, startFrom, fn)
		if !retry {
			if err != nil {
				return fmt.Errorf("inventory: list %s/%s: %w", p.Container, p.Prefix, err)
			}
			return nil
		}
		startFrom = false // the service does not take StartFrom: list from the start
	}
}

// listPages runs one listing; retry is true when its first page was refused with 400 while
// StartFrom was set.
func listPages(ctx context.Context, pager *runtime.Pager[container.ListBlobsFlatResponse], after string, startFrom bool,
	fn func(*container.BlobItem) (bool, error)) (retry bool, err error) {
	for first := true; pager.More(); first = false {
		page, err := pager.NextPage(ctx)
		if err != nil {
			var re *azcore.ResponseError
			if first && startFrom && errors.As(err, &re) && re.StatusCode == http.StatusBadRequest {
				return true, err
			}
			return false, err
		}
		for _, item := range page.Segment.BlobItems {
			if item.Name == nil || *item.Name <= after {
				continue
			}
			if more, err := fn(item); err != nil || !more {
				return false, err
			}
		}
	}
	return false, nil
}
