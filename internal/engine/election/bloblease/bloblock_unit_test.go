package bloblease

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/google/go-cmp/cmp"
)

// offlineTestContainer is a container client for Azurite's default address; building it does
// no network I/O, which is all these tests need.
func offlineTestContainer(t *testing.T) *container.Client {
	t.Helper()
	cl, err := azblob.NewClientFromConnectionString(config.AzuriteConnectionString, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cl.ServiceClient().NewContainerClient("leases")
}

func TestNewBlobLock_Validation(t *testing.T) {
	c := offlineTestContainer(t)
	tests := []struct {
		name    string
		c       *container.Client
		blob    string
		opts    BlobLockOptions
		wantErr string // substring; "" means valid
	}{
		{"defaults", c, "baton-leader", BlobLockOptions{}, ""},
		{"15s", c, "baton-leader", BlobLockOptions{Duration: 15 * time.Second}, ""},
		{"60s", c, "baton-leader", BlobLockOptions{Duration: 60 * time.Second}, ""},
		{"14s is too short for storage", c, "x", BlobLockOptions{Duration: 14 * time.Second}, "Duration 14s is out of range"},
		{"61s is too long for storage", c, "x", BlobLockOptions{Duration: 61 * time.Second}, "Duration 1m1s is out of range"},
		{"negative", c, "x", BlobLockOptions{Duration: -time.Second}, "out of range"},
		{"fractional seconds", c, "x", BlobLockOptions{Duration: 20500 * time.Millisecond}, "whole number of seconds"},
		{"attempt timeout not below duration", c, "x", BlobLockOptions{Duration: 15 * time.Second, AttemptTimeout: 15 * time.Second}, "AttemptTimeout 15s"},
		{"negative attempt timeout", c, "x", BlobLockOptions{AttemptTimeout: -time.Second}, "AttemptTimeout -1s"},
		{"no container", nil, "x", BlobLockOptions{}, "container client is nil"},
		{"empty blob name", c, "", BlobLockOptions{}, "lease name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lk, err := NewBlobLock(tt.c, tt.blob, tt.opts)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("NewBlobLock: got %v, want no error", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("NewBlobLock: got %v, want an error containing %q", err, tt.wantErr)
			case err == nil && tt.opts.Duration == 0 && lk.Duration() != config.DefaultLeaseDuration:
				t.Errorf("default Duration = %s, want %s", lk.Duration(), config.DefaultLeaseDuration)
			}
		})
	}
}

func TestBlobLock_Translate(t *testing.T) {
	lk, err := NewBlobLock(offlineTestContainer(t), "leader", BlobLockOptions{Setting: "BATON_STORAGE"})
	if err != nil {
		t.Fatal(err)
	}
	resp := func(status int, code string) error {
		return fmt.Errorf("sdk: %w", &azcore.ResponseError{StatusCode: status, ErrorCode: code})
	}
	tests := []struct {
		name string
		in   error
		want error // a sentinel to match with errors.Is; nil for *AccessError / unchanged
		// access is true when the result must be an *AccessError
		access bool
	}{
		{"lease already present", resp(409, "LeaseAlreadyPresent"), errLeasePresent, false},
		{"lease breaking", resp(409, "LeaseIsBreakingAndCannotBeAcquired"), errLeasePresent, false},
		{"renew with another's id", resp(409, "LeaseIdMismatchWithLeaseOperation"), election.ErrLeaseLost, false},
		{"write with another's id", resp(412, "LeaseIdMismatchWithBlobOperation"), election.ErrLeaseLost, false},
		{"write without id", resp(412, "LeaseIdMissing"), election.ErrLeaseLost, false},
		{"broken lease", resp(409, "LeaseIsBrokenAndCannotBeRenewed"), election.ErrLeaseLost, false},
		{"released lease", resp(409, "LeaseNotPresentWithLeaseOperation"), election.ErrLeaseLost, false},
		{"etag moved", resp(412, "ConditionNotMet"), errConditionNotMet, false},
		{"blob missing", resp(404, "BlobNotFound"), errBlobNotFound, false},
		{"container missing", resp(404, "ContainerNotFound"), errContainerNotFound, false},
		{"blob exists", resp(409, "BlobAlreadyExists"), errAlreadyExists, false},
		{"container exists", resp(409, "ContainerAlreadyExists"), errAlreadyExists, false},
		{"server busy", resp(503, "ServerBusy"), errTransient, false},
		{"internal error", resp(500, "InternalError"), errTransient, false},
		{"throttled", resp(429, ""), errTransient, false},
		{"request timeout", resp(408, ""), errTransient, false},
		{"connection reset", &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, errTransient, false},
		{"try timed out", fmt.Errorf("send: %w", context.DeadlineExceeded), errTransient, false},
		{"forbidden", resp(403, "AuthorizationPermissionMismatch"), nil, true},
		{"bad key", resp(403, "AuthenticationFailed"), nil, true},
		{"account disabled", resp(403, "AccountIsDisabled"), nil, true},
		{"account not found", resp(404, "ResourceNotFound"), nil, true},
		{"account host unknown", &net.DNSError{Err: "no such host", Name: "nope.blob.core.windows.net", IsNotFound: true}, nil, true},
		{"cancelled", context.Canceled, context.Canceled, false},
		{"other 400", resp(400, "InvalidHeaderValue"), nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := lk.translate(tt.in)
			var ae *AccessError
			switch {
			case tt.access:
				if !errors.As(got, &ae) || !strings.Contains(got.Error(), "check the BATON_STORAGE setting") {
					t.Errorf("translate = %v, want *AccessError naming BATON_STORAGE", got)
				}
			case tt.want != nil:
				if !errors.Is(got, tt.want) {
					t.Errorf("translate = %v, want it to match %v", got, tt.want)
				}
			default:
				for _, s := range []error{errLeasePresent, election.ErrLeaseLost, errConditionNotMet, errBlobNotFound,
					errContainerNotFound, errAlreadyExists, errTransient} {
					if errors.Is(got, s) {
						t.Errorf("translate = %v, want no outcome sentinel, got %v", got, s)
					}
				}
				if errors.As(got, &ae) {
					t.Errorf("translate = %v, want no AccessError", got)
				}
			}
			if got != nil && strings.Contains(got.Error(), "\n") {
				t.Errorf("translated message spans lines: %q", got)
			}
		})
	}
	if lk.translate(nil) != nil {
		t.Errorf("translate(nil) != nil")
	}
}

func TestLeaseMetadata_RoundTrip(t *testing.T) {
	holder := ledger.Holder{App: "my app/é", Instance: "host 7&x=y", PID: 4242}
	at := time.Date(2026, 11, 21, 10, 0, 0, 123456789, time.UTC)
	rel := at.Add(time.Minute)
	md := encodeLeaseMetadata(holder, 17, at, rel)
	for k, v := range md {
		if strings.ContainsAny(k, "-_ ") || k != strings.ToLower(k) {
			t.Errorf("metadata key %q is not a lower-case identifier", k)
		}
		for _, r := range *v {
			if r < 0x20 || r > 0x7e {
				t.Errorf("metadata %s=%q is not printable ASCII", k, *v)
				break
			}
		}
	}
	// The SDK canonicalises keys on read ("epoch" comes back as "Epoch").
	canon := map[string]*string{}
	for k, v := range md {
		canon[strings.ToUpper(k[:1])+k[1:]] = v
	}
	got, err := decodeLeaseMetadata(canon)
	if err != nil {
		t.Fatal(err)
	}
	want := leaseRecord{Holder: holder, Epoch: 17, AcquiredAt: at, ReleasedAt: rel}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}

	if got, err := decodeLeaseMetadata(nil); err != nil || got != (leaseRecord{}) {
		t.Errorf("decode(no metadata) = %+v, %v; want a zero record", got, err)
	}
	if _, err := decodeLeaseMetadata(map[string]*string{"Epoch": to.Ptr("seven")}); err == nil || !strings.Contains(err.Error(), "epoch") {
		t.Errorf("decode(bad epoch) = %v, want an error naming the epoch", err)
	}
	if md := encodeLeaseMetadata(holder, 1, at, time.Time{}); md[metaReleasedAt] != nil {
		t.Errorf("releasedat written for a live holder: %q", *md[metaReleasedAt])
	}
}
