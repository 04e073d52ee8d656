package inventory

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/batonfn/baton"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
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
	case !containerName.MatchString(p.Container) || strings.Contains(p.Container, "--"):
		return p, fmt.Errorf("params: container %q is not a container name: 3-63 characters of lower-case letters, digits and single hyphens, "+
			"starting and ending with a letter or digit", p.Container)
	case len(p.Prefix) > 1024:
		return p, errors.New("params: prefix is longer than a blob name can be")
	case p.PartitionSize < 1 || p.PartitionSize > MaxPartitionSize:
		return p, fmt.Errorf("params: partitionSize %d, want 1..%d", p.PartitionSize, MaxPartitionSize)
	}
	return p, nil
}

// containerName is Azure's grammar for a container name (besides "--", checked apart): the name
// is passed to the service as a path segment, so nothing else may reach it.
var containerName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$`)

// Range is a partition's payload: the names in (After, Last].
type Range struct {
	After string `json:"after"`
	Last  string `json:"last"`
}

// ReservedPrefixes are the container name prefixes the job refuses whatever its Options: the
// Functions host's own containers (azure-webjobs-secrets holds the function keys,
// azure-webjobs-hosts the timer and listener locks) and the Flex Consumption deployment package
// (app-package-…, as the portal and Baton's template name it).
var ReservedPrefixes = []string{"azure-webjobs-", "app-package-"}

// ErrReserved marks params naming a container the job refuses to read.
var ErrReserved = errors.New("reserved container")

// Options configure the job. The zero value refuses only ReservedPrefixes.
type Options struct {
	// Reserved are more container names the job refuses, typically the app's own: the leases
	// and runs containers. A run over them would copy blob names into its report.
	Reserved []string
	// Unavailable, when set, is why the job cannot read anything (no storage connection is
	// configured for it): every run is refused with it after its params are checked.
	Unavailable error
}

// Job is the inventory job over one storage account.
type Job struct {
	client *azblob.Client
	opts   Options
}

// New returns the inventory job reading through client with opts. With a nil client the job
// reads the account Baton's app configures at start-up (Configure: the connection named by
// BATON_INVENTORY_STORAGE), and refuses every run while none is configured.
func New(client *azblob.Client, opts Options) *Job { return &Job{client: client, opts: opts} }

// ConfigureStorage applies Baton's app settings, once at start-up before any invocation: client
// is the account to read (a job built with a client keeps its own), reserved are more
// containers to refuse (the app's own), and unavailable, when set, refuses every run of a job
// that has no client.
func (j *Job) ConfigureStorage(client *azblob.Client, reserved []string, unavailable error) {
	if j.client == nil {
		j.client = client
	}
	j.opts.Reserved = append(slices.Clone(j.opts.Reserved), reserved...)
	if j.client == nil && j.opts.Unavailable == nil {
		j.opts.Unavailable = unavailable
	}
}

var (
	_ baton.Job             = (*Job)(nil)
	_ baton.ParamsValidator = (*Job)(nil)
)

// ValidateParams implements baton.ParamsValidator: the params must parse, name no reserved
// container, and the job must have storage to read.
func (j *Job) ValidateParams(params json.RawMessage) error {
	_, err := j.params(params)
	return err
}

func (j *Job) params(raw json.RawMessage) (Params, error) {
	p, err := ParseParams(raw)
	if err != nil {
		return p, err
	}
	for _, prefix := range ReservedPrefixes {
		if strings.HasPrefix(p.Container, prefix) {
			return p, fmt.Errorf("params: container %q: %w (the Functions host's %s… containers are never inventoried)", p.Container, ErrReserved, prefix)
		}
	}
	if slices.Contains(j.opts.Reserved, p.Container) {
		return p, fmt.Errorf("params: container %q: %w (it is this app's own)", p.Container, ErrReserved)
	}
	if j.opts.Unavailable != nil {
		return p, j.opts.Unavailable
	}
	return p, nil
}

// Plan lists the names after cursor and emits ranges of PartitionSize names.
func (j *Job) Plan(ctx context.Context, params json.RawMessage, cursor string, emit func(json.RawMessage, string) error) error {
	p, err := j.params(params)
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
