package eventually_test

import (
	"sync/atomic"
	"testing"

	"github.com/batonfn/baton/internal/lib/eventually"
)

func TestTrue_ReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	go func() {
		for range 5 {
			n.Add(1)
		}
	}()
	eventually.True(t, func() bool { return n.Load() == 5 })
	if n.Load() != 5 {
		t.Fatalf("returned at %d, want 5", n.Load())
	}
}
