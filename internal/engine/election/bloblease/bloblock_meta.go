package bloblease

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/batonfn/baton/internal/engine/ledger"
)

// Metadata keys on the lease blob. Azure metadata names must be C# identifiers (no dashes),
// and the Go SDK canonicalises them on read ("epoch" comes back as "Epoch"), so they are
// written in lower case and looked up case-insensitively.
const (
	metaEpoch      = "epoch"
	metaApp        = "holderapp"
	metaInstance   = "holderinstance"
	metaPID        = "holderpid"
	metaAcquiredAt = "acquiredat"
	metaReleasedAt = "releasedat"
)

// leaseRecord is what the lease blob says about its most recent holder.
type leaseRecord struct {
	Holder     ledger.Holder
	Epoch      int64
	AcquiredAt time.Time
	ReleasedAt time.Time
	LeaseState string      // storage's lease state
	ETag       azcore.ETag // of the blob when read; changes with every metadata write
}

// encodeLeaseMetadata is the blob metadata for a holder. App and instance names are
// URL-escaped because metadata travels in HTTP headers.
func encodeLeaseMetadata(holder ledger.Holder, epoch int64, acquiredAt, releasedAt time.Time) map[string]*string {
	md := map[string]*string{
		metaEpoch:      to.Ptr(strconv.FormatInt(epoch, 10)),
		metaApp:        to.Ptr(url.QueryEscape(holder.App)),
		metaInstance:   to.Ptr(url.QueryEscape(holder.Instance)),
		metaPID:        to.Ptr(strconv.Itoa(holder.PID)),
		metaAcquiredAt: to.Ptr(acquiredAt.UTC().Format(time.RFC3339Nano)),
	}
	if !releasedAt.IsZero() {
		md[metaReleasedAt] = to.Ptr(releasedAt.UTC().Format(time.RFC3339Nano))
	}
	return md
}

// decodeLeaseMetadata reads a record written by encodeLeaseMetadata. A blob with no metadata
// (never held) decodes to a zero record. A malformed epoch is an error rather than zero,
// because restarting epochs at 1 would break fencing.
func decodeLeaseMetadata(md map[string]*string) (leaseRecord, error) {
	get := func(key string) string {
		for k, v := range md {
			if strings.EqualFold(k, key) && v != nil {
				return *v
			}
		}
		return ""
	}
	var r leaseRecord
	if v := get(metaEpoch); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return r, fmt.Errorf("lease blob metadata %s=%q is not an epoch: fix or delete the blob's metadata", metaEpoch, v)
		}
		r.Epoch = n
	}
	r.Holder.App, _ = url.QueryUnescape(get(metaApp))
	r.Holder.Instance, _ = url.QueryUnescape(get(metaInstance))
	r.Holder.PID, _ = strconv.Atoi(get(metaPID))
	r.AcquiredAt, _ = time.Parse(time.RFC3339Nano, get(metaAcquiredAt))
	r.ReleasedAt, _ = time.Parse(time.RFC3339Nano, get(metaReleasedAt))
	return r, nil
}
