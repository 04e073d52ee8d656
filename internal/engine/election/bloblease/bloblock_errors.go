package bloblease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/batonfn/baton/internal/engine/election"
)

// AccessError means storage refused Baton's credentials or the account does not exist: a
// configuration problem that retrying will not fix. The message names the setting to check.
type AccessError struct {
	// Setting is the connection setting that points at the account.
	Setting string
	// Status and Code are the storage response (0 and "" when the account host did not resolve).
	Status int
	Code   string
	// Err is the underlying error.
	Err error
}

func (e *AccessError) Error() string {
	switch e.Status {
	case 0:
		return fmt.Sprintf("storage account not reachable (%v): check the %s setting (account name or endpoint)", e.Err, e.Setting)
	case http.StatusNotFound:
		return fmt.Sprintf("storage account not found (%d %s): check the %s setting (account name or endpoint)", e.Status, e.Code, e.Setting)
	}
	return fmt.Sprintf("storage refused access (%d %s): check the %s setting (account, key or role assignment)", e.Status, e.Code, e.Setting)
}

func (e *AccessError) Unwrap() error { return e.Err }

// Outcomes of one storage call, as produced by translate. Only election.ErrLeaseLost, *election.HeldError and
// *AccessError leave this file's callers; the others steer BlobLock's own logic.
var (
	errLeasePresent      = errors.New("lease already present")
	errConditionNotMet   = errors.New("condition not met")
	errBlobNotFound      = errors.New("lease blob not found")
	errContainerNotFound = errors.New("lease container not found")
	errAlreadyExists     = errors.New("already exists")
	errTransient         = errors.New("transient storage failure")
)

// translate is the one place that maps Azure SDK errors to this package's outcomes. It keeps
// the status and code in the message but drops the SDK's multi-line response dump.
func (b *BlobLock) translate(err error) error {
	if err == nil {
		return nil
	}
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		var dns *net.DNSError
		switch {
		case errors.Is(err, context.Canceled):
			return err
		case errors.As(err, &dns) && dns.IsNotFound:
			return &AccessError{Setting: b.opts.Setting, Err: err}
		default:
			// Timeouts, connection resets and refusals, truncated responses: the request may
			// or may not have reached storage. Every BlobLock call is safe to repeat.
			return fmt.Errorf("%w: %w", errTransient, err)
		}
	}
	short := fmt.Errorf("%d %s", re.StatusCode, re.ErrorCode)
	switch {
	case bloberror.HasCode(err, bloberror.LeaseAlreadyPresent, bloberror.LeaseIsBreakingAndCannotBeAcquired):
		return fmt.Errorf("%w (%w)", errLeasePresent, short)
	case bloberror.HasCode(err,
		bloberror.LeaseIDMismatchWithLeaseOperation, bloberror.LeaseIDMismatchWithBlobOperation,
		bloberror.LeaseIDMissing, bloberror.LeaseNotPresentWithLeaseOperation,
		bloberror.LeaseNotPresentWithBlobOperation, bloberror.LeaseLost,
		bloberror.LeaseIsBrokenAndCannotBeRenewed, bloberror.LeaseAlreadyBroken):
		return fmt.Errorf("%w (%w)", election.ErrLeaseLost, short)
	case bloberror.HasCode(err, bloberror.ConditionNotMet):
		return fmt.Errorf("%w (%w)", errConditionNotMet, short)
	case bloberror.HasCode(err, bloberror.BlobNotFound):
		return fmt.Errorf("%w (%w)", errBlobNotFound, short)
	case bloberror.HasCode(err, bloberror.ContainerNotFound):
		return fmt.Errorf("%w (%w)", errContainerNotFound, short)
	case bloberror.HasCode(err, bloberror.BlobAlreadyExists, bloberror.ContainerAlreadyExists):
		return fmt.Errorf("%w (%w)", errAlreadyExists, short)
	case re.StatusCode == http.StatusUnauthorized || re.StatusCode == http.StatusForbidden,
		bloberror.HasCode(err, bloberror.ResourceNotFound, bloberror.AccountIsDisabled,
			bloberror.InvalidAuthenticationInfo, bloberror.NoAuthenticationInformation):
		return &AccessError{Setting: b.opts.Setting, Status: re.StatusCode, Code: re.ErrorCode, Err: short}
	case re.StatusCode >= 500, re.StatusCode == http.StatusRequestTimeout, re.StatusCode == http.StatusTooManyRequests:
		return fmt.Errorf("%w (%w)", errTransient, short)
	default:
		return fmt.Errorf("storage: %w", short)
	}
}

// Retry pacing for transient failures: jittered exponential backoff.
const (
	retryBackoffMin = 50 * time.Millisecond
	retryBackoffMax = 2 * time.Second
)

// do runs one storage call, translated, retrying transient failures with backoff until ctx
// ends. The first try gets AttemptTimeout and each retry twice the one before (always within
// ctx's budget). A try cut short does not stop the request: storage still serves it, so against
// a saturated account (an emulator with one thread, a busy partition) a fixed per-try timeout
// below the service's current latency would fail every try of a renewal that would have
// succeeded, and each retry would queue one more request behind the load. A growing timeout
// still retries a dead connection quickly, and lets a slow answer arrive.
func (b *BlobLock) do(ctx context.Context, op string, call func(context.Context) error) error {
	backoff := retryBackoffMin
	tryTimeout := b.opts.AttemptTimeout
	for attempt := 1; ; attempt, tryTimeout = attempt+1, tryTimeout*2 {
		actx, cancel := context.WithTimeout(ctx, tryTimeout)
		err := b.translate(call(actx))
		cancel()
		if err == nil || !errors.Is(err, errTransient) {
			return err
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		if ctx.Err() != nil || !b.fits(ctx, wait) {
			return fmt.Errorf("%s: gave up after %d attempts within the budget: %w", op, attempt, err)
		}
		level := slog.LevelDebug
		if attempt >= 3 {
			level = slog.LevelWarn
		}
		b.opts.Logger.LogAttrs(ctx, level, "lease storage call failed, retrying",
			slog.String("lease", b.name), slog.String("op", op), slog.Int("attempt", attempt), slog.Any("error", err))
		if sleep(ctx, wait) != nil {
			return fmt.Errorf("%s: gave up after %d attempts within the budget: %w", op, attempt, err)
		}
		backoff = min(backoff*2, retryBackoffMax)
	}
}

// fits reports whether waiting d still leaves time for a try before ctx's deadline.
func (b *BlobLock) fits(ctx context.Context, d time.Duration) bool {
	dl, ok := ctx.Deadline()
	return !ok || b.opts.Now().Add(d+retryBackoffMin).Before(dl)
}
