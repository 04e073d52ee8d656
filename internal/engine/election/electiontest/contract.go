// Package electiontest holds what tests of leadership share: the contract every election.Lock
// must keep (RunLockContract), and a recorder of the leader's log lines.
package electiontest

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/ledger"
)

// Holder is the identity of contender i in lock tests.
func Holder(i int) ledger.Holder {
	return ledger.Holder{App: "baton-test", Instance: "instance-" + strconv.Itoa(i), PID: 1000 + i}
}

// RunLockContract checks the rules every election.Lock implementation must follow. newLock returns a
// fresh lock that no one has used.
func RunLockContract(t *testing.T, newLock func(t *testing.T) election.Lock) {
	ctx := context.Background()
	a, b := Holder(1), Holder(2)

	t.Run("state of an unused lock is empty", func(t *testing.T) {
		lk := newLock(t)
		got, err := lk.State(ctx)
		if err != nil {
			t.Fatalf("State: %v", err)
		}
		if got != (election.LeaderState{}) {
			t.Errorf("State = %+v, want zero", got)
		}
	})

	t.Run("acquire records holder and epoch 1", func(t *testing.T) {
		lk := newLock(t)
		l, err := lk.Acquire(ctx, a)
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		if l.Epoch != 1 || l.Holder != a || l.ID == "" || l.Duration <= 0 || l.AcquiredAt.IsZero() {
			t.Errorf("lease = %+v, want epoch 1, holder %v, an ID, a duration and an acquired-at", l, a)
		}
		if !l.PreviousHolder.IsZero() || !l.PreviousReleasedAt.IsZero() {
			t.Errorf("first lease = %+v, want no previous holder and no previous release", l)
		}
		st, err := lk.State(ctx)
		if err != nil {
			t.Fatalf("State: %v", err)
		}
		if !st.Held || st.Holder != a || st.Epoch != 1 || !st.Since.Equal(l.AcquiredAt) || st.LeaseState != election.LeaseStateLeased {
			t.Errorf("State = %+v, want held by %v at epoch 1 since %v, leased", st, a, l.AcquiredAt)
		}
	})

	t.Run("second contender gets election.HeldError naming the holder", func(t *testing.T) {
		lk := newLock(t)
		l, err := lk.Acquire(ctx, a)
		if err != nil {
			t.Fatalf("Acquire a: %v", err)
		}
		_, err = lk.Acquire(ctx, b)
		var held *election.HeldError
		if !errors.As(err, &held) {
			t.Fatalf("Acquire b: got %v, want *HeldError", err)
		}
		if held.Holder != a || held.Epoch != l.Epoch || !held.Since.Equal(l.AcquiredAt) {
			t.Errorf("HeldError = %+v, want holder %v epoch %d since %v", held, a, l.Epoch, l.AcquiredAt)
		}
		if errors.Is(err, election.ErrLeaseLost) {
			t.Errorf("HeldError also matches ErrLeaseLost: %v", err)
		}
	})

	t.Run("holder renews; release hands over at once with the next epoch", func(t *testing.T) {
		lk := newLock(t)
		la, err := lk.Acquire(ctx, a)
		if err != nil {
			t.Fatalf("Acquire a: %v", err)
		}
		if err := lk.Renew(ctx, la); err != nil {
			t.Fatalf("Renew: %v", err)
		}
		if err := lk.Release(ctx, la); err != nil {
			t.Fatalf("Release: %v", err)
		}
		st, err := lk.State(ctx)
		if err != nil {
			t.Fatalf("State: %v", err)
		}
		if st.Held || st.Holder != a || st.Epoch != 1 || st.ReleasedAt.IsZero() || st.LeaseState != election.LeaseStateAvailable {
			t.Errorf("State after release = %+v, want not held, last holder %v epoch 1, released, available", st, a)
		}
		lb, err := lk.Acquire(ctx, b)
		if err != nil {
			t.Fatalf("Acquire b right after release: %v", err)
		}
		if lb.Epoch != la.Epoch+1 {
			t.Errorf("epoch after handover = %d, want %d", lb.Epoch, la.Epoch+1)
		}
		if lb.PreviousHolder != a || !lb.PreviousReleasedAt.Equal(st.ReleasedAt) {
			t.Errorf("lease after handover: previous holder %v released at %v, want %v released at %v (the record's)",
				lb.PreviousHolder, lb.PreviousReleasedAt, a, st.ReleasedAt)
		}
		if lb.ID == la.ID {
			t.Errorf("lease ID reused across acquisitions: %s", lb.ID)
		}
		st, err = lk.State(ctx)
		if err != nil {
			t.Fatalf("State: %v", err)
		}
		if !st.Held || st.Holder != b || st.Epoch != 2 || !st.ReleasedAt.IsZero() {
			t.Errorf("State = %+v, want held by %v at epoch 2, not released", st, b)
		}
	})

	t.Run("stale lease cannot renew or release", func(t *testing.T) {
		lk := newLock(t)
		la, err := lk.Acquire(ctx, a)
		if err != nil {
			t.Fatalf("Acquire a: %v", err)
		}
		if err := lk.Release(ctx, la); err != nil {
			t.Fatalf("Release: %v", err)
		}
		lb, err := lk.Acquire(ctx, b)
		if err != nil {
			t.Fatalf("Acquire b: %v", err)
		}
		if err := lk.Renew(ctx, la); !errors.Is(err, election.ErrLeaseLost) {
			t.Errorf("Renew of the old lease: got %v, want ErrLeaseLost", err)
		}
		if err := lk.Release(ctx, la); !errors.Is(err, election.ErrLeaseLost) {
			t.Errorf("Release of the old lease: got %v, want ErrLeaseLost", err)
		}
		forged := lb
		forged.ID = "00000000-0000-4000-8000-000000000000"
		if err := lk.Renew(ctx, forged); !errors.Is(err, election.ErrLeaseLost) {
			t.Errorf("Renew with a forged ID: got %v, want ErrLeaseLost", err)
		}
		if err := lk.Renew(ctx, lb); err != nil {
			t.Errorf("Renew by the real holder after the others failed: %v", err)
		}
		st, err := lk.State(ctx)
		if err != nil {
			t.Fatalf("State: %v", err)
		}
		if !st.Held || st.Holder != b {
			t.Errorf("State = %+v, want still held by %v", st, b)
		}
	})

	t.Run("identity is required", func(t *testing.T) {
		lk := newLock(t)
		_, err := lk.Acquire(ctx, ledger.Holder{App: "x"})
		var held *election.HeldError
		if err == nil || errors.As(err, &held) {
			t.Errorf("Acquire with no instance: got %v, want a validation error", err)
		}
	})
}
