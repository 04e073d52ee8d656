package ledgertest

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// testBlocks: a span's block is written once (one winner of a race), refused when it does not
// fit its span, read back whole, and listed member by member beside results of their own; the
// block rule (Record) gives every partition exactly one outcome whoever records first.
func testBlocks(t *testing.T, newStore Factory) {
	ctx := testContext(t)
	s := newStore(t, Options{})
	res := func(run string, i, attempts int) ledger.Result {
		return ledger.Result{Run: run, Index: i, OK: i%3 != 0, Attempts: attempts, Error: fmt.Sprint("e", i)}
	}
	span := ledger.Span{First: 256, Size: 256}

	t.Run("create once", func(t *testing.T) {
		w := oneWinner(t, race(8, func(k int) error {
			rs := []ledger.Result{res("b", 256+k, k), res("b", 300, k)}
			return s.PutBlock(ctx, ledger.Block{Run: "b", Span: span, Results: rs})
		}))
		got, err := s.ReadBlock(ctx, "b", span)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Results) != 2 || got.Results[0].Index != 256+w || got.Results[1].Attempts != w || got.Span != span {
			t.Errorf("stored block %+v, want the winner's (%d)", got, w)
		}
		if _, err := s.ReadBlock(ctx, "b", ledger.Span{First: 0, Size: 256}); !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("reading a block never written: %v, want ErrNotFound", err)
		}
	})

	t.Run("refused", func(t *testing.T) {
		for name, b := range map[string]ledger.Block{
			"unaligned":      {Run: "bad", Span: ledger.Span{First: 3, Size: 4}},
			"too small":      {Run: "bad", Span: ledger.Span{First: 0, Size: 1}},
			"too large":      {Run: "bad", Span: ledger.Span{First: 0, Size: 2 * ledger.MaxSpan}},
			"outside":        {Run: "bad", Span: ledger.Span{First: 0, Size: 4}, Results: []ledger.Result{res("bad", 4, 1)}},
			"out of order":   {Run: "bad", Span: ledger.Span{First: 0, Size: 4}, Results: []ledger.Result{res("bad", 2, 1), res("bad", 1, 1)}},
			"another run":    {Run: "bad", Span: ledger.Span{First: 0, Size: 4}, Results: []ledger.Result{res("other", 1, 1)}},
			"twice the same": {Run: "bad", Span: ledger.Span{First: 0, Size: 4}, Results: []ledger.Result{res("bad", 1, 1), res("bad", 1, 2)}},
		} {
			if err := s.PutBlock(ctx, b); err == nil {
				t.Errorf("%s: PutBlock accepted %+v", name, b)
			}
		}
		if _, err := s.ReadBlock(ctx, "bad", ledger.Span{First: 0, Size: 4}); !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("a refused block was stored: %v", err)
		}
	})

	t.Run("listed", func(t *testing.T) {
		// Block 0+4 holds 0 and 2; 1 and 3 recorded their own; block 8+8 is empty; 9 its own;
		// block 1024+1024 holds 2047 (its last bit).
		for _, b := range []ledger.Block{
			{Run: "l", Span: ledger.Span{First: 0, Size: 4}, Results: []ledger.Result{res("l", 0, 1), res("l", 2, 1)}},
			{Run: "l", Span: ledger.Span{First: 8, Size: 8}},
			{Run: "l", Span: ledger.Span{First: 1024, Size: 1024}, Results: []ledger.Result{res("l", 2047, 1)}},
		} {
			if err := s.PutBlock(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
		for _, i := range []int{3, 1, 9} {
			if err := s.PutResult(ctx, res("l", i, 1)); err != nil {
				t.Fatal(err)
			}
		}
		var got []ledger.ResultRef
		if err := s.ListResults(ctx, "l", func(r ledger.ResultRef) error { got = append(got, r); return nil }); err != nil {
			t.Fatal(err)
		}
		got = WrittenNow(t, got)
		b4, b1k := ledger.Span{First: 0, Size: 4}, ledger.Span{First: 1024, Size: 1024}
		want := []ledger.ResultRef{{Index: 0, Block: b4}, {Index: 1}, {Index: 2, Block: b4}, {Index: 3}, {Index: 9}, {Index: 2047, Block: b1k}}
		if !slices.Equal(got, want) {
			t.Errorf("listed %v, want %v", got, want)
		}
		rd := ledger.NewReader(s, "l")
		for _, i := range []int{0, 1, 2, 3, 9, 2047} {
			r, err := rd.Read(ctx, i)
			if err != nil || r.Index != i || r.Error != fmt.Sprint("e", i) {
				t.Errorf("Reader.Read(%d) = %+v, %v", i, r, err)
			}
		}
		if _, err := rd.Read(ctx, 5); !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("Reader.Read of an unrecorded partition: %v, want ErrNotFound", err)
		}
	})

	t.Run("one outcome each", func(t *testing.T) {
		// Eight recorders race over one span, each with results for an overlapping half of it
		// and attempts of its own: every partition ends with one recorded outcome, which each
		// recorder is told, in a block or on its own.
		sp := ledger.Span{First: 0, Size: 16}
		told := make([][]ledger.Recorded, 8)
		race(8, func(k int) error {
			var rs []ledger.Result
			for i := k; i < k+8; i++ {
				rs = append(rs, res("one", i, k+1))
			}
			told[k], _ = ledger.Record(ctx, s, "one", sp, rs, nil)
			return nil
		})
		rd := ledger.NewReader(s, "one")
		l, err := ledger.List(ctx, s, "one")
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int]int{}
		for _, r := range l.Refs {
			seen[r.Index]++
		}
		for i := range 15 {
			if seen[i] != 1 {
				t.Errorf("partition %d has %d recorded outcomes, want 1", i, seen[i])
			}
		}
		for k, rec := range told {
			for j, o := range rec {
				if o.Err != nil {
					t.Errorf("recorder %d, partition %d: %v", k, k+j, o.Err)
					continue
				}
				stored, err := rd.Read(ctx, k+j)
				if err != nil || stored.Attempts != o.Result.Attempts {
					t.Errorf("recorder %d was told partition %d's outcome has attempts %d; stored: %+v, %v", k, k+j, o.Result.Attempts, stored, err)
				}
			}
		}
	})
}
