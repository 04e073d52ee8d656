package bloblease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/batonfn/baton/election"
	"github.com/batonfn/baton/ledger"
	"github.com/google/uuid"
)

// How an acquisition works.
//
// A contender first CLAIMS the lock: it writes its record (holder, epoch one above the record
// it replaces, acquired-at) into the lease blob's metadata with no lease ID and If-Match on
// the ETag of the record it knows. Storage refuses that write while a live lease exists
// (LeaseIdMissing) and when the blob changed since (ConditionNotMet), so of the contenders that
// knew the same record exactly one claims, and its epoch is one above the latest. It then takes
// the lease with If-Match on its claim's ETag: the lease goes to the claimant only if nobody
// claimed over it in between. Lease operations leave the ETag alone, so a holder's record is
// the current record for as long as it holds the lease: a reader that finds the lease held
// reads the holder's record in the same call.
//
// The claim needs the record's ETag and epoch. A lock that won its last attempt knows them
// without reading: it wrote the record itself, and its Release wrote the release mark and noted
// the mark's ETag. So the usual winner — the previous holder, on its next heartbeat — claims
// and takes the lease in two calls. Any other contender last saw the lease held (or never saw
// it): it reads first, which costs one call when the lease is still held (the answer names the
// holder), and three (read, claim, lease) when it takes over.
//
// A record that is not leased is free to claim when it is released, lapsed (expired or
// broken), never claimed (epoch 0), or the same record this lock saw before the attempt. Any
// other one is a claim in flight: another contender is between its two calls. The attempt then
// re-reads for a moment (2 ms to 256 ms apart) until that contender holds the lease, and claims
// itself only if the record stays unchanged that long (its claimant gave up or crashed).
//
// Fencing never depends on what a lock remembers: every record write is conditioned on the exact
// ETag whose epoch it bumps. A stale memory costs a refused claim and a read. A lease blob
// written by an earlier Baton (which took the lease first and then recorded itself with the
// same metadata and If-Match) works as is, and an earlier and this version contending for it
// during a rolling deploy still hold it one at a time, with increasing epochs.

// maxClaims bounds the claims of one attempt: a first one, and one more after a refused claim
// found the record free again (a release or a lapse it did not know about).
const maxClaims = 2

// attempt is one Acquire.
type attempt struct {
	b      *BlobLock
	lc     *lease.BlobClient
	holder ledger.Holder
	start  time.Time
	// prior is the record as this lock knew it before the attempt (zero when it knew none).
	prior   leaseRecord
	created bool
	claims  int
}

// Acquire makes one attempt to take the lease (see above), creating the container and the
// lease blob first when missing (concurrent creators all succeed). When the lease is held it
// returns *election.HeldError naming the holder. The whole attempt is bounded by a third of the
// lease duration.
func (b *BlobLock) Acquire(ctx context.Context, holder ledger.Holder) (election.Lease, error) {
	if err := holder.Validate(); err != nil {
		return election.Lease{}, fmt.Errorf("acquire lease %s: %w", b.name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, b.opts.Duration/3)
	defer cancel()

	id := uuid.NewString()
	lc, err := lease.NewBlobClient(b.blob, &lease.BlobClientOptions{LeaseID: &id})
	if err != nil {
		return election.Lease{}, fmt.Errorf("acquire lease %s: %w", b.name, err)
	}
	a := &attempt{b: b, lc: lc, holder: holder, start: b.opts.Now()}
	var claimFirst bool
	a.prior, claimFirst = b.knowledge()
	epoch, err := a.run(ctx, claimFirst)
	b.mu.Lock()
	b.won = err == nil
	b.mu.Unlock()
	if err != nil {
		if held := (*election.HeldError)(nil); errors.As(err, &held) {
			return election.Lease{}, err
		}
		return election.Lease{}, fmt.Errorf("acquire lease %s: %w", b.name, err)
	}
	b.confirm(id, a.start)
	return election.Lease{ID: id, Holder: holder, Epoch: epoch, AcquiredAt: a.start, Duration: b.opts.Duration}, nil
}

// run claims and takes the lease and returns the epoch, or *election.HeldError. claimFirst
// starts from the known record instead of reading it.
func (a *attempt) run(ctx context.Context, claimFirst bool) (int64, error) {
	rec := a.prior
	if !claimFirst {
		var err error
		if rec, err = a.read(ctx); err != nil {
			return 0, err
		}
	}
	for {
		if !claimFirst {
			var free bool
			var err error
			if rec, free, err = a.judge(ctx, rec); err != nil || !free {
				return 0, err
			}
		}
		claimFirst = false
		if a.claims == maxClaims {
			// Every claim met a newer record: others are contending right now.
			return 0, a.b.heldError(ctx, rec, false)
		}
		a.claims++
		epoch := rec.Epoch + 1
		etag, err := a.claim(ctx, epoch, rec.ETag)
		switch {
		case err == nil:
			return epoch, a.take(ctx, epoch, etag)
		case errors.Is(err, errConditionNotMet), errors.Is(err, election.ErrLeaseLost), isMissing(err):
			// Someone claimed or holds it, or the blob changed or vanished since rec; or our own
			// claim landed and only its response was lost (its retry then meets our record).
			if rec, err = a.read(ctx); err != nil {
				return 0, err
			}
			if !leased(rec) && a.ours(rec) {
				return rec.Epoch, a.take(ctx, rec.Epoch, rec.ETag)
			}
		default:
			return 0, fmt.Errorf("claim: %w", err)
		}
	}
}

// read reads the record, creating the container and the blob when missing (once per attempt).
func (a *attempt) read(ctx context.Context) (leaseRecord, error) {
	for {
		rec, err := a.b.read(ctx)
		switch {
		case err == nil:
			return rec, nil
		case !a.created && isMissing(err):
			if err := a.b.create(ctx, errors.Is(err, errContainerNotFound)); err != nil {
				return leaseRecord{}, err
			}
			a.created = true
		default:
			return leaseRecord{}, fmt.Errorf("read record: %w", err)
		}
	}
}

// judge decides from a record just read whether to claim: a held lease ends the attempt with
// *election.HeldError; a claim in flight gets a moment to take the lease (then it is held) or
// to be given up (then it is free). It returns the latest record.
func (a *attempt) judge(ctx context.Context, rec leaseRecord) (leaseRecord, bool, error) {
	switch {
	case leased(rec):
		return rec, false, a.b.heldError(ctx, rec, true)
	case a.free(rec):
		return rec, true, nil
	}
	inFlight := rec.ETag
	for wait := 2 * time.Millisecond; wait <= 256*time.Millisecond; wait *= 2 {
		if err := sleep(ctx, wait); err != nil {
			return rec, false, &election.HeldError{Holder: rec.Holder, Epoch: rec.Epoch, Since: rec.AcquiredAt}
		}
		var err error
		if rec, err = a.read(ctx); err != nil {
			return rec, false, err
		}
		switch {
		case leased(rec):
			return rec, false, a.b.heldError(ctx, rec, true)
		case a.free(rec):
			return rec, true, nil
		}
	}
	if rec.ETag == inFlight {
		return rec, true, nil // its claimant gave up or crashed between its two calls
	}
	// Claims keep replacing each other: others are contending right now.
	return rec, false, &election.HeldError{Holder: rec.Holder, Epoch: rec.Epoch, Since: rec.AcquiredAt}
}

// ours reports whether rec is this attempt's claim.
func (a *attempt) ours(rec leaseRecord) bool {
	return rec.Holder == a.holder && rec.AcquiredAt.Equal(a.start)
}

// free reports whether a record whose lease is not held may be claimed now (see above).
func (a *attempt) free(rec leaseRecord) bool {
	return rec.Epoch == 0 || !rec.ReleasedAt.IsZero() ||
		rec.LeaseState == election.LeaseStateExpired || rec.LeaseState == election.LeaseStateBroken ||
		(rec.ETag != "" && rec.ETag == a.prior.ETag)
}

// claim writes this attempt's record at epoch, if the blob is still at etag and not leased,
// and returns the ETag of the claim.
func (a *attempt) claim(ctx context.Context, epoch int64, etag azcore.ETag) (azcore.ETag, error) {
	b := a.b
	md := encodeLeaseMetadata(a.holder, epoch, a.start, time.Time{})
	var resp blob.SetMetadataResponse
	err := b.do(ctx, "claim", func(ctx context.Context) (err error) {
		resp, err = b.blob.SetMetadata(ctx, md, &blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{
			ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &etag}}})
		return err
	})
	if err != nil {
		return "", err
	}
	if resp.ETag == nil {
		return "", errors.New("claim: storage returned no ETag")
	}
	b.learn(leaseRecord{Holder: a.holder, Epoch: epoch, AcquiredAt: a.start, LeaseState: election.LeaseStateAvailable, ETag: *resp.ETag})
	return *resp.ETag, nil
}

// take acquires the lease on the claim at etag. Retries of a lost response reuse the lease ID
// (storage treats a repeat as the same acquisition) and still match: lease calls leave the
// ETag alone.
func (a *attempt) take(ctx context.Context, epoch int64, etag azcore.ETag) error {
	b := a.b
	err := b.do(ctx, "acquire", func(ctx context.Context) error {
		_, err := a.lc.AcquireLease(ctx, int32(b.opts.Duration/time.Second), &lease.BlobAcquireOptions{
			ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &etag}})
		return err
	})
	switch {
	case err == nil:
		b.learn(leaseRecord{Holder: a.holder, Epoch: epoch, AcquiredAt: a.start, LeaseState: election.LeaseStateLeased, ETag: etag})
		return nil
	case errors.Is(err, errLeasePresent), errors.Is(err, errConditionNotMet):
		// Someone claimed over ours and took the lease first (or is about to), or a Baton
		// before claims took the lease over our claim and has not recorded itself yet: our
		// own record is not the holder's.
		return b.heldError(ctx, leaseRecord{}, false, a.ours)
	default:
		if errors.Is(err, errTransient) {
			// A lost response may hide a granted lease: give it back rather than block
			// everyone until it lapses, and mark the claim released so that the next
			// contender need not wait to see whether it completes.
			b.releaseQuietly(a.lc)
			b.markQuietly(encodeLeaseMetadata(a.holder, epoch, a.start, b.opts.Now()), etag)
		}
		return fmt.Errorf("acquire: %w", err)
	}
}

// knowledge is the record this lock last saw, and whether the lock may claim on it without
// reading: it won its last attempt, so the record is its own (or its release mark).
func (b *BlobLock) knowledge() (leaseRecord, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.known, b.won && b.known.ETag != ""
}

// learn notes rec (with its ETag) as the latest record this lock saw.
func (b *BlobLock) learn(rec leaseRecord) {
	if rec.ETag == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.known = rec
}

// markQuietly writes md over an unleased record still at etag: the release mark of a claim
// whose lease was given back. Best effort.
func (b *BlobLock) markQuietly(md map[string]*string, etag azcore.ETag) {
	ctx, cancel := context.WithTimeout(context.Background(), b.opts.AttemptTimeout)
	defer cancel()
	_ = b.do(ctx, "mark released", func(ctx context.Context) error {
		_, err := b.blob.SetMetadata(ctx, md, &blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{
			ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &etag}}})
		return err
	})
}

// leased reports whether rec shows a live lease.
func leased(rec leaseRecord) bool {
	return rec.LeaseState == election.LeaseStateLeased || rec.LeaseState == election.LeaseStateBreaking
}

// isMissing reports whether err is a missing blob or container.
func isMissing(err error) bool {
	return errors.Is(err, errBlobNotFound) || errors.Is(err, errContainerNotFound)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// heldError builds the election.HeldError for a lost attempt from rec, re-reading it first unless
// it is fresh. A lease taken by an earlier Baton (which records itself after taking the lease)
// may show the previous record for a few milliseconds: re-read a few times, 2 ms to 256 ms
// apart, until the record shows a live holder (and none that not rules out). This is a bounded
// confirmation inside one attempt, not a wait for the lock.
func (b *BlobLock) heldError(ctx context.Context, rec leaseRecord, fresh bool, not ...func(leaseRecord) bool) error {
	var err error
	if !fresh {
		rec, err = b.read(ctx)
	}
	settled := func() bool {
		if err != nil || rec.Epoch == 0 || !rec.ReleasedAt.IsZero() || !leased(rec) {
			return false
		}
		for _, f := range not {
			if f(rec) {
				return false
			}
		}
		return true
	}
	for wait := 2 * time.Millisecond; !settled() && wait <= 256*time.Millisecond; wait *= 2 {
		if sleep(ctx, wait) != nil {
			break
		}
		rec, err = b.read(ctx)
	}
	return &election.HeldError{Holder: rec.Holder, Epoch: rec.Epoch, Since: rec.AcquiredAt}
}
