package ledgertest

import (
	"errors"
	"sync"
	"testing"

	"github.com/batonfn/baton/internal/engine/ledger"
)

// testPartials: a partial is created once, then replaced only at the version read, so
// concurrent folders lose nothing.
func testPartials(t *testing.T, newStore Factory) {
	ctx := testContext(t)
	s := newStore(t, Options{})
	if _, _, err := s.ReadPartial(ctx, "fold", 0); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("missing partial: %v, want ErrNotFound", err)
	}
	const workers, each = 8, 5
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Go(func() {
			for k := range each {
				pos := w*each + k
				for {
					p, etag, err := s.ReadPartial(ctx, "fold", 0)
					if errors.Is(err, ledger.ErrNotFound) {
						p, etag, err = ledger.Partial{Run: "fold", Shard: 0}, "", nil
					}
					if err != nil {
						errs[w] = err
						return
					}
					p.Mark(pos)
					p.Count++
					err = s.WritePartial(ctx, p, etag)
					if err == nil {
						break
					}
					if !errors.Is(err, ledger.ErrConflict) && !errors.Is(err, ledger.ErrExists) {
						errs[w] = err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	p, _, err := s.ReadPartial(ctx, "fold", 0)
	if err != nil {
		t.Fatal(err)
	}
	if p.Count != workers*each {
		t.Errorf("count %d, want %d: a concurrent update was lost", p.Count, workers*each)
	}
	for pos := range workers * each {
		if !p.Has(pos) {
			t.Errorf("position %d not marked", pos)
		}
	}
	if p.Has(workers * each) {
		t.Error("an unmarked position reads as marked")
	}
}
