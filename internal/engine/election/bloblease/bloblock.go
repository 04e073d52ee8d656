package bloblease

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptrace"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/lib/latency"
	"github.com/google/uuid"
)

// DefaultAttemptTimeout bounds one storage call of a BlobLock.
const DefaultAttemptTimeout = 5 * time.Second

// BlobLockOptions tune a BlobLock. The zero value is usable.
type BlobLockOptions struct {
	// Duration is the lease duration: whole seconds from config.MinLeaseDuration to
	// config.MaxLeaseDuration, default config.DefaultLeaseDuration. Shorter leases hand over
	// faster after a crash; longer ones tolerate slower storage.
	Duration time.Duration
	// AttemptTimeout bounds the first try of each storage call (default a quarter of
	// Duration, at most 5s); each retry gets twice as long as the try before. Failed calls
	// are retried with backoff within the caller's budget, so a renewal gets several tries
	// before the lease could lapse, and a slow but live store still gets to answer.
	AttemptTimeout time.Duration
	// Setting names the connection setting that AccessError tells the operator to check.
	// Default: "BATON_STORAGE (or AzureWebJobsStorage when unset)".
	Setting string
	// Now is the clock (default time.Now). It must move with the runtime's timers.
	Now func() time.Time
	// Logger receives retries and blob creation (default: discarded).
	Logger *slog.Logger
}

// BlobLock is a election.Lock over one zero-length blob in a container: holding the blob's lease is
// holding the lock. The holder's identity, epoch and acquired-at live in the blob's metadata,
// which only the lease holder can write.
type BlobLock struct {
	container *container.Client
	blob      *blockblob.Client
	name      string // container/blob, for messages
	opts      BlobLockOptions

	mu sync.Mutex
	// confirmed maps a lease ID to the local time just before its last successful acquire
	// or renew was sent: the lease lasts at least Duration from then.
	confirmed map[string]time.Time
	// last is the lease blob's record as this lock last saw it (read, or wrote: its holder
	// record or release mark), with the ETag it had then; ok is false when it is not known.
	last struct {
		rec leaseRecord
		ok  bool
	}
	// reads are the latencies of this lock's last reads: the fastest of them is the round
	// trip a head start is counted in (see headStart).
	reads latency.Floor
	// tiedWith is the holder this lock's last attempt lost a tie to (see Acquire), if it did.
	tiedWith ledger.Holder
	// pause waits d or until ctx ends (sleep; tests replace it).
	pause func(ctx context.Context, d time.Duration) error
}

// tieWindow is how close two attempts' beginnings are for a tie, and the longest head start a
// contender gives the winner of its last tie (see docs/design.md, Leadership).
const tieWindow = 100 * time.Millisecond

var _ election.Lock = (*BlobLock)(nil)

// NewBlobLock returns a lock over the blob name in c (folders separated by '/' allowed). The container and the blob are created
// on first Acquire when missing; no network I/O happens here.
func NewBlobLock(c *container.Client, name string, opts BlobLockOptions) (*BlobLock, error) {
	var errs []error
	if c == nil {
		errs = append(errs, errors.New("container client is nil"))
	}
	// A name may have folders ("runs/<run>"), each a valid blob name.
	for seg := range strings.SplitSeq(name, "/") {
		if err := config.ValidateBlobName(seg); err != nil {
			errs = append(errs, fmt.Errorf("lease name %q: %w", name, err))
			break
		}
	}
	if opts.Duration == 0 {
		opts.Duration = config.DefaultLeaseDuration
	}
	switch {
	case opts.Duration < config.MinLeaseDuration || opts.Duration > config.MaxLeaseDuration:
		errs = append(errs, fmt.Errorf("Duration %s is out of range: Azure Blob leases last %s to %s", opts.Duration, config.MinLeaseDuration, config.MaxLeaseDuration))
	case opts.Duration%time.Second != 0:
		errs = append(errs, fmt.Errorf("Duration %s must be a whole number of seconds", opts.Duration))
	}
	if opts.AttemptTimeout == 0 {
		// Short enough that a renewal gets several tries before the lease could lapse.
		opts.AttemptTimeout = min(DefaultAttemptTimeout, opts.Duration/4)
	}
	if opts.AttemptTimeout < 0 || opts.AttemptTimeout >= opts.Duration {
		errs = append(errs, fmt.Errorf("AttemptTimeout %s must be positive and less than Duration %s", opts.AttemptTimeout, opts.Duration))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("blob lock: %w", err)
	}
	if opts.Setting == "" {
		opts.Setting = config.SettingStorage + " (or " + config.SettingHostStorage + " when unset)"
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &BlobLock{
		container: c,
		blob:      c.NewBlockBlobClient(name),
		name:      containerName(c) + "/" + name,
		opts:      opts,
		confirmed: map[string]time.Time{},
		pause:     sleep,
	}, nil
}

// sleep waits d, or until ctx ends (its cause is the error).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// Duration is the lease duration this lock acquires with.
func (b *BlobLock) Duration() time.Duration { return b.opts.Duration }

// Acquire makes one attempt to take the lease for holder, creating the container and blob if
// missing, and bounded by a third of the lease duration. On success the lease carries a fresh
// lease ID and an epoch one above every earlier acquisition's, recorded in the blob's metadata.
// It returns *election.HeldError when someone else holds a live lease, and a wrapped error when
// storage fails or ctx ends; an attempt that cannot tell whether its record took effect gives
// the lease back. The fast path and the head start after a lost tie are in docs/design.md.
func (b *BlobLock) Acquire(ctx context.Context, holder ledger.Holder) (election.Lease, error) {
	if err := holder.Validate(); err != nil {
		return election.Lease{}, fmt.Errorf("acquire lease %s: %w", b.name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, b.opts.Duration/3)
	defer cancel()
	began := b.opts.Now()
	if d := b.headStart(holder); d > 0 {
		if err := b.pause(ctx, d); err != nil {
			return election.Lease{}, fmt.Errorf("acquire lease %s: head start: %w", b.name, err)
		}
	}
	l, err := b.acquire(ctx, holder)
	b.noteTie(err, began)
	return l, err
}

// acquire is Acquire's attempt, after the head start.
func (b *BlobLock) acquire(ctx context.Context, holder ledger.Holder) (election.Lease, error) {
	id := uuid.NewString()
	lc, err := lease.NewBlobClient(b.blob, &lease.BlobClientOptions{LeaseID: &id})
	if err != nil {
		return election.Lease{}, fmt.Errorf("acquire lease %s: %w", b.name, err)
	}
	start := b.opts.Now()
	l := election.Lease{ID: id, Holder: holder, AcquiredAt: start, Duration: b.opts.Duration}
	var sent unconfirmed
	rec, took, recorded, err := b.acquireFirst(ctx, lc, &l, &sent)
	if err != nil {
		return election.Lease{}, err
	}
	if recorded {
		b.confirm(id, start)
		return l, nil
	}
	for created := false; !took; {
		// 1. Read the record: the holder for election.HeldError, the epoch and ETag for the winner.
		rec, err = b.read(ctx)
		switch {
		case err == nil:
			if rec.LeaseState == election.LeaseStateLeased || rec.LeaseState == election.LeaseStateBreaking {
				return election.Lease{}, b.heldError(ctx, rec, true)
			}
		case !created && (errors.Is(err, errBlobNotFound) || errors.Is(err, errContainerNotFound)):
			// First use: create what is missing, then start over once.
			if err := b.create(ctx, errors.Is(err, errContainerNotFound)); err != nil {
				return election.Lease{}, fmt.Errorf("acquire lease %s: %w", b.name, err)
			}
			created = true
			continue
		default:
			return election.Lease{}, fmt.Errorf("acquire lease %s: read record: %w", b.name, err)
		}

		// 2. The lease looked free: try to take it. Retries of a lost response reuse the
		// lease ID, which storage treats as the same acquisition.
		err = b.do(ctx, "acquire", func(ctx context.Context) error {
			_, err := lc.AcquireLease(ctx, int32(b.opts.Duration/time.Second), nil)
			return err
		})
		switch {
		case err == nil:
		case errors.Is(err, errLeasePresent):
			return election.Lease{}, b.heldError(ctx, rec, false) // someone won since the read
		case !created && (errors.Is(err, errBlobNotFound) || errors.Is(err, errContainerNotFound)):
			continue // deleted since the read: the read will see it missing and create it
		default:
			if errors.Is(err, errTransient) {
				// A lost response may hide a granted lease: give it back rather than block
				// everyone until it lapses.
				b.releaseQuietly(lc)
			}
			return election.Lease{}, fmt.Errorf("acquire lease %s: %w", b.name, err)
		}
		break
	}

	// 3. Record the new holder. Only our lease ID can write; If-Match guarantees the epoch we
	// bump is the latest one. A refusal means the record changed since the one we bump:
	// another holder came and went between our read and our acquire, or our own record took
	// effect with its answer lost. A lost answer leaves the same doubt. Either way the record
	// is read back (we hold the lease, so that read is authoritative): our own record is the
	// one we lead under; another is bumped once more.
	prev := rec
	for try := 0; ; try++ {
		sent.add(prev.Epoch + 1)
		err = b.do(ctx, "record holder", func(ctx context.Context) error { return b.writeRecord(ctx, &l, prev) })
		if err == nil || !errors.Is(err, errConditionNotMet) && !errors.Is(err, errTransient) {
			break
		}
		cur, rerr := b.read(ctx)
		if rerr != nil {
			err = fmt.Errorf("%w; reading it back: %w", err, rerr)
			break
		}
		if cur.records(l, prev) {
			adopt(&l, prev, cur)
			err = nil
			break
		}
		if try == 1 {
			break
		}
		prev = cur
	}
	if err != nil {
		b.abandon(ctx, lc, holder, sent, err)
		return election.Lease{}, fmt.Errorf("acquire lease %s: record holder: %w", b.name, err)
	}
	b.confirm(id, start)
	return l, nil
}

// acquireFirst is Acquire's path without the read, taken when the last record this lock saw
// says the lease was free: it sends the acquire and, without waiting, the record of the next
// epoch, conditioned on l's lease ID and the known record's ETag. recorded reports that the
// record took effect (l then carries the epoch and the previous holder); otherwise took reports
// that the lease is held and rec is the record to bump. took false with no error means it could
// not tell (record unknown or leased, blob missing): the read-first path starts over.
func (b *BlobLock) acquireFirst(ctx context.Context, lc *lease.BlobClient, l *election.Lease, sent *unconfirmed) (rec leaseRecord, took, recorded bool, err error) {
	last, ok := b.lastSeen()
	if !ok || (last.LeaseState == election.LeaseStateLeased && last.ReleasedAt.IsZero()) || last.LeaseState == election.LeaseStateBreaking {
		return leaseRecord{}, false, false, nil
	}
	onWire := make(chan struct{})
	var once sync.Once
	trace := &httptrace.ClientTrace{WroteRequest: func(info httptrace.WroteRequestInfo) {
		if info.Err == nil { // a request that could not be written is not on the wire
			once.Do(func() { close(onWire) })
		}
	}}
	type answer struct {
		etag *azcore.ETag
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		var a answer
		a.err = b.do(httptrace.WithClientTrace(ctx, trace), "acquire", func(ctx context.Context) error {
			resp, err := lc.AcquireLease(ctx, int32(b.opts.Duration/time.Second), nil)
			a.etag = resp.ETag
			return err
		})
		answered <- a
	}()
	var a answer
	select {
	case <-onWire:
		rerr := b.recordNext(ctx, l, last)
		recorded = rerr == nil
		if unknownOutcome(rerr) {
			sent.add(last.Epoch + 1)
		}
		a = <-answered
	case a = <-answered: // it failed before it was sent: no record was written
	}
	switch {
	case recorded:
		// Only the holder of l's lease ID can write: the acquire took effect, whatever its
		// answer said (a lost response is retried with the same lease ID).
		return last, true, true, nil
	case a.err == nil:
	case errors.Is(a.err, errLeasePresent):
		return leaseRecord{}, false, false, b.heldError(ctx, last, false)
	case errors.Is(a.err, errTransient):
		// A lost response may hide a granted lease, and the record sent beside it: give it
		// back rather than block everyone until it lapses.
		b.abandon(ctx, lc, l.Holder, *sent, a.err)
		return leaseRecord{}, false, false, fmt.Errorf("acquire lease %s: %w", b.name, a.err)
	default:
		b.unsee() // missing, say: the read-first path finds out and creates it
		return leaseRecord{}, false, false, nil
	}
	if a.etag != nil && *a.etag == last.ETag {
		return last, true, false, nil
	}
	// Someone wrote since, or our own record took effect before the acquire answered (its
	// retry, say) with the write's own answer lost: the record is read under our lease, so it
	// is the latest.
	if rec, err = b.read(ctx); err != nil {
		b.abandon(ctx, lc, l.Holder, *sent, err)
		return leaseRecord{}, false, false, fmt.Errorf("acquire lease %s: read record: %w", b.name, err)
	}
	if rec.records(*l, last) {
		adopt(l, last, rec)
		return rec, true, true, nil
	}
	return rec, true, false, nil
}

// recordNext makes one try, without retries, at the holder record that bumps prev under l
// (see writeRecord): a failed try is settled by Acquire's own record step.
func (b *BlobLock) recordNext(ctx context.Context, l *election.Lease, prev leaseRecord) error {
	ctx, cancel := context.WithTimeout(ctx, b.opts.AttemptTimeout)
	defer cancel()
	return b.translate(b.writeRecord(ctx, l, prev))
}

// unconfirmed are the epochs of the holder records an attempt sent without learning whether
// they took effect (an answer lost, or cut short): storage may show any of them.
type unconfirmed []int64

func (u *unconfirmed) add(epoch int64) {
	if !slices.Contains(*u, epoch) {
		*u = append(*u, epoch)
	}
}

// unknownOutcome reports whether a write that failed with err may still have taken effect:
// storage did not answer it (a refusal it answered took no effect).
func unknownOutcome(err error) bool {
	return errors.Is(err, errTransient) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// records reports whether r, read under lease l, is the holder record l's acquisition wrote
// over prev: l's holder and acquired-at, the epoch after prev's. Only l's lease ID can write
// while l is held, and l's writes bump prev, so such a record is this acquisition's own, with
// the guarantees of one whose write was answered.
func (r leaseRecord) records(l election.Lease, prev leaseRecord) bool {
	return r.Holder == l.Holder && r.AcquiredAt.Equal(l.AcquiredAt) && r.ReleasedAt.IsZero() && r.Epoch == prev.Epoch+1
}

// adopt makes l the lease that rec, this acquisition's own record over prev, describes.
func adopt(l *election.Lease, prev, rec leaseRecord) {
	l.Epoch, l.PreviousHolder, l.PreviousReleasedAt = rec.Epoch, prev.Holder, prev.ReleasedAt
}

// abandon gives back a lease whose acquisition could not be completed. First it names each
// holder record the attempt sent without learning whether it took effect: storage can show
// that epoch and holder although nobody leads under it.
func (b *BlobLock) abandon(ctx context.Context, lc *lease.BlobClient, holder ledger.Holder, sent unconfirmed, err error) {
	if len(sent) > 0 {
		b.unsee()
	}
	for _, epoch := range sent {
		b.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "lease acquisition abandoned: the holder record was not confirmed; the lease is given back",
			slog.String("lease", b.name), slog.Int64("epoch", epoch), slog.String("holder", holder.String()), slog.Any("err", err))
	}
	b.releaseQuietly(lc)
}

// writeRecord writes the holder record of lease l with the epoch after prev's, conditioned on
// l's lease ID (only its holder can write) and on prev's ETag (prev is the latest record, so
// no two acquisitions record the same epoch). On success l carries the new epoch and prev's
// holder. Its error is the SDK's, untranslated.
func (b *BlobLock) writeRecord(ctx context.Context, l *election.Lease, prev leaseRecord) error {
	epoch := prev.Epoch + 1
	resp, err := b.blob.SetMetadata(ctx, encodeLeaseMetadata(l.Holder, epoch, l.AcquiredAt, time.Time{}), &blob.SetMetadataOptions{
		AccessConditions: &blob.AccessConditions{
			LeaseAccessConditions:    &blob.LeaseAccessConditions{LeaseID: &l.ID},
			ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &prev.ETag},
		}})
	if err != nil {
		return err
	}
	l.Epoch, l.PreviousHolder, l.PreviousReleasedAt = epoch, prev.Holder, prev.ReleasedAt
	b.saw(leaseRecord{Holder: l.Holder, Epoch: epoch, AcquiredAt: l.AcquiredAt, LeaseState: election.LeaseStateLeased}, resp.ETag)
	return nil
}

// heldError builds the election.HeldError for a lost attempt from rec, re-reading it first unless it
// is fresh. A record read just after a takeover may predate the winner's metadata write by a
// few milliseconds (it then shows no holder, a released one, or no live lease): re-read a few
// times, 2 ms to 256 ms apart, until it shows a live holder. This is a bounded confirmation
// inside one attempt, not a wait for the lock.
func (b *BlobLock) heldError(ctx context.Context, rec leaseRecord, fresh bool) error {
	var err error
	if !fresh {
		rec, err = b.read(ctx)
	}
	settled := func() bool {
		return err == nil && rec.Epoch > 0 && rec.ReleasedAt.IsZero() &&
			(rec.LeaseState == election.LeaseStateLeased || rec.LeaseState == election.LeaseStateBreaking)
	}
	for wait := 2 * time.Millisecond; !settled() && wait <= 256*time.Millisecond; wait *= 2 {
		if sleep(ctx, wait) != nil {
			break
		}
		rec, err = b.read(ctx)
	}
	return &election.HeldError{Holder: rec.Holder, Epoch: rec.Epoch, Since: rec.AcquiredAt}
}

// create makes the container (when missing) and the zero-length lease blob. Both are
// create-if-absent, so concurrent creators all succeed.
func (b *BlobLock) create(ctx context.Context, containerMissing bool) error {
	if containerMissing {
		err := b.do(ctx, "create container", func(ctx context.Context) error {
			_, err := b.container.Create(ctx, nil)
			return err
		})
		switch {
		case err == nil:
			b.opts.Logger.LogAttrs(ctx, slog.LevelInfo, "lease container created", slog.String("lease", b.name))
		case !errors.Is(err, errAlreadyExists):
			return fmt.Errorf("create container: %w", err)
		}
	}
	err := b.do(ctx, "create lease blob", func(ctx context.Context) error {
		_, err := b.blob.Upload(ctx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{
			AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{
				IfNoneMatch: to.Ptr(azcore.ETagAny)}},
		})
		return err
	})
	switch {
	case err == nil:
		b.opts.Logger.LogAttrs(ctx, slog.LevelInfo, "lease blob created", slog.String("lease", b.name))
		return nil
	case errors.Is(err, errContainerNotFound) && !containerMissing:
		return b.create(ctx, true) // deleted under us: start over once
	case errors.Is(err, errAlreadyExists), errors.Is(err, errConditionNotMet), errors.Is(err, election.ErrLeaseLost):
		return nil // someone else created it (and may already hold its lease)
	default:
		return fmt.Errorf("create lease blob: %w", err)
	}
}

// Renew extends the lease. It retries transient failures until the lease's remaining budget
// (or ctx) runs out: the budget ends when the lease may have expired, counted from the last
// successful acquire or renew this BlobLock saw (half a duration for a lease it never saw),
// and allows at least one try.
func (b *BlobLock) Renew(ctx context.Context, l election.Lease) error {
	lc, err := lease.NewBlobClient(b.blob, &lease.BlobClientOptions{LeaseID: &l.ID})
	if err != nil {
		return fmt.Errorf("renew lease %s (epoch %d): %w", b.name, l.Epoch, err)
	}
	// The budget ends when the lease may have expired, but a renewal always gets one try:
	// storage still renews an expired lease that no one took, which proves continuity.
	budget := b.expiry(l)
	if floor := b.opts.Now().Add(b.opts.AttemptTimeout); budget.Before(floor) {
		budget = floor
	}
	ctx, cancel := context.WithDeadline(ctx, budget)
	defer cancel()
	sent := b.opts.Now()
	err = b.do(ctx, "renew", func(ctx context.Context) error {
		_, err := lc.RenewLease(ctx, nil)
		return err
	})
	switch {
	case err == nil:
		b.confirm(l.ID, sent)
		return nil
	case errors.Is(err, errBlobNotFound), errors.Is(err, errContainerNotFound):
		b.forget(l.ID)
		return fmt.Errorf("renew lease %s (epoch %d): %w: %w", b.name, l.Epoch, election.ErrLeaseLost, err)
	case errors.Is(err, election.ErrLeaseLost):
		b.forget(l.ID)
		fallthrough
	default:
		return fmt.Errorf("renew lease %s (epoch %d): %w", b.name, l.Epoch, err)
	}
}

// Release records the release time in the blob's metadata and releases the lease, so the
// next contender wins at once. A lease that is already gone gives election.ErrLeaseLost.
func (b *BlobLock) Release(ctx context.Context, l election.Lease) error {
	defer b.forget(l.ID)
	lc, err := lease.NewBlobClient(b.blob, &lease.BlobClientOptions{LeaseID: &l.ID})
	if err != nil {
		return fmt.Errorf("release lease %s (epoch %d): %w", b.name, l.Epoch, err)
	}
	// The release mark is best effort: it tells readers the record is not a live holder's.
	md := encodeLeaseMetadata(l.Holder, l.Epoch, l.AcquiredAt, b.opts.Now())
	err = b.do(ctx, "mark released", func(ctx context.Context) error {
		resp, err := b.blob.SetMetadata(ctx, md, &blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{
			LeaseAccessConditions: &blob.LeaseAccessConditions{LeaseID: &l.ID}}})
		if err == nil {
			// Decoded from what was written, so it compares as a read would.
			rec, derr := decodeLeaseMetadata(md)
			if derr == nil {
				rec.LeaseState = election.LeaseStateAvailable
				b.saw(rec, resp.ETag)
			}
		}
		return err
	})
	if err != nil {
		b.unsee()
	}
	if err == nil || errors.Is(err, errTransient) {
		err = b.do(ctx, "release", func(ctx context.Context) error {
			_, err := lc.ReleaseLease(ctx, nil)
			return err
		})
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errBlobNotFound), errors.Is(err, errContainerNotFound):
		return fmt.Errorf("release lease %s (epoch %d): %w: %w", b.name, l.Epoch, election.ErrLeaseLost, err)
	default:
		return fmt.Errorf("release lease %s (epoch %d): %w", b.name, l.Epoch, err)
	}
}

// releaseQuietly gives up a lease whose acquisition could not be completed.
func (b *BlobLock) releaseQuietly(lc *lease.BlobClient) {
	ctx, cancel := context.WithTimeout(context.Background(), b.opts.AttemptTimeout)
	defer cancel()
	_ = b.do(ctx, "release", func(ctx context.Context) error {
		_, err := lc.ReleaseLease(ctx, nil)
		return err
	})
}

// State reads the lease blob's properties: lease state and the last holder's record. It
// never takes or changes the lease. A missing container or blob means no one has contended.
func (b *BlobLock) State(ctx context.Context) (election.LeaderState, error) {
	rec, err := b.read(ctx)
	switch {
	case errors.Is(err, errBlobNotFound), errors.Is(err, errContainerNotFound):
		return election.LeaderState{}, nil
	case err != nil:
		return election.LeaderState{}, fmt.Errorf("read lease %s: %w", b.name, err)
	}
	return election.LeaderState{
		Held:       rec.LeaseState == election.LeaseStateLeased || rec.LeaseState == election.LeaseStateBreaking,
		Holder:     rec.Holder,
		Epoch:      rec.Epoch,
		Since:      rec.AcquiredAt,
		ReleasedAt: rec.ReleasedAt,
		LeaseState: rec.LeaseState,
	}, nil
}

// read gets the blob's lease state, ETag and holder record.
func (b *BlobLock) read(ctx context.Context) (leaseRecord, error) {
	var props blob.GetPropertiesResponse
	err := b.do(ctx, "read", func(ctx context.Context) (err error) {
		sent := b.opts.Now()
		props, err = b.blob.GetProperties(ctx, nil)
		if err == nil {
			b.observeRead(b.opts.Now().Sub(sent))
		}
		return err
	})
	if err != nil {
		return leaseRecord{}, err
	}
	rec, err := decodeLeaseMetadata(props.Metadata)
	if err != nil {
		return leaseRecord{}, fmt.Errorf("%s: %w", b.name, err)
	}
	if props.LeaseState != nil {
		rec.LeaseState = string(*props.LeaseState)
	}
	if props.ETag != nil {
		rec.ETag = *props.ETag
	}
	b.saw(rec, props.ETag)
	return rec, nil
}

// saw notes the record this lock just read or wrote, with the blob's ETag after it.
func (b *BlobLock) saw(rec leaseRecord, etag *azcore.ETag) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if etag == nil {
		b.last.ok = false
		return
	}
	rec.ETag = *etag
	b.last.rec, b.last.ok = rec, true
}

// observeRead notes the latency of a read that was answered.
func (b *BlobLock) observeRead(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reads.Observe(max(d, 0))
}

// headStart is how long holder's Acquire waits before its first call: two round trips when
// this lock's last attempt lost a tie to another holder whose record is the last it saw (see
// Acquire), else nothing.
func (b *BlobLock) headStart(holder ledger.Holder) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tiedWith.IsZero() || b.tiedWith == holder || !b.last.ok || b.last.rec.Holder != b.tiedWith {
		return 0
	}
	return min(2*b.reads.Low(), tieWindow)
}

// noteTie remembers whether the attempt that began at began and ended with err lost a tie: a
// HeldError naming a holder whose lease began within tieWindow of began.
func (b *BlobLock) noteTie(err error, began time.Time) {
	var held *election.HeldError
	tied := errors.As(err, &held) && !held.Holder.IsZero() && !held.Since.IsZero() &&
		held.Since.Sub(began).Abs() <= tieWindow
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tiedWith = ledger.Holder{}
	if tied {
		b.tiedWith = held.Holder
	}
}

// unsee forgets the last record: a write whose outcome is unknown may have changed it.
func (b *BlobLock) unsee() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.last.ok = false
}

// lastSeen is the last record this lock saw, if it knows one.
func (b *BlobLock) lastSeen() (leaseRecord, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last.rec, b.last.ok
}

// confirm notes that lease id was confirmed by a call sent at t, and forgets leases that
// must have expired long ago (their holders dropped them without releasing).
func (b *BlobLock) confirm(id string, t time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.confirmed[id] = t
	for k, v := range b.confirmed {
		if t.Sub(v) > 2*b.opts.Duration {
			delete(b.confirmed, k)
		}
	}
}

func (b *BlobLock) forget(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.confirmed, id)
}

// expiry is the earliest time the lease may expire, as far as this BlobLock knows.
func (b *BlobLock) expiry(l election.Lease) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t, ok := b.confirmed[l.ID]; ok {
		return t.Add(b.opts.Duration)
	}
	return b.opts.Now().Add(b.opts.Duration / 2)
}

// containerName extracts the container name from its URL, for messages.
func containerName(c *container.Client) string {
	u, err := url.Parse(c.URL())
	if err != nil {
		return c.URL()
	}
	return path.Base(u.Path)
}
