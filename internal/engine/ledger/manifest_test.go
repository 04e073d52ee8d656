package ledger_test

import (
	"strings"
	"testing"

	"github.com/batonfn/baton/internal/engine/ledger"
)

func TestValidateRunID(t *testing.T) {
	for _, tc := range []struct {
		name string
		id   string
		ok   bool
	}{
		{"one character", "a", true},
		{"timer run", "tick-20261121t020000z", true},
		{"digits only", "0123", true},
		{"63 characters", strings.Repeat("a", 63), true},
		{"64 characters", strings.Repeat("a", 64), false},
		{"empty", "", false},
		{"leading dash", "-abc", false},
		{"trailing dash", "abc-", false},
		{"upper case", "Abc", false},
		{"slash escapes the prefix", "a/b", false},
		{"dot dot", "..", false},
		{"underscore", "a_b", false},
		{"space", "a b", false},
		{"unicode", "ünï", false},
		{"newline", "abc\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ledger.ValidateRunID(tc.id)
			if got := err == nil; got != tc.ok {
				t.Errorf("ValidateRunID(%q) = %v, want ok=%v", tc.id, err, tc.ok)
			}
		})
	}
}

func TestManifest_SegmentEpoch(t *testing.T) {
	m := ledger.Manifest{Segments: []ledger.Segment{{Epoch: 1, From: 0}, {Epoch: 3, From: 100}, {Epoch: 4, From: 250}}}
	for _, tc := range []struct {
		index int
		want  int64
	}{{0, 1}, {99, 1}, {100, 3}, {249, 3}, {250, 4}, {1 << 20, 4}} {
		if got := m.SegmentEpoch(tc.index); got != tc.want {
			t.Errorf("SegmentEpoch(%d) = %d, want %d", tc.index, got, tc.want)
		}
	}
	if got := (&ledger.Manifest{}).SegmentEpoch(5); got != 0 {
		t.Errorf("SegmentEpoch without segments = %d, want 0", got)
	}
}

func TestManifest_BatchOf(t *testing.T) {
	for _, tc := range []struct {
		size, index, want int
	}{{100, 0, 0}, {100, 99, 0}, {100, 100, 1}, {7, 50, 7}, {0, 50, 0}, {-1, 50, 0}} {
		m := ledger.Manifest{BatchSize: tc.size}
		if got := m.BatchOf(tc.index); got != tc.want {
			t.Errorf("BatchSize %d: BatchOf(%d) = %d, want %d", tc.size, tc.index, got, tc.want)
		}
	}
}

func TestState_Final(t *testing.T) {
	final := map[ledger.State]bool{
		ledger.StatePlanning: false, ledger.StateEnqueuing: false, ledger.StateRunning: false,
		ledger.StateSucceeded: true, ledger.StatePartial: true, ledger.StateFailed: true,
		ledger.StateTimedOut: true, ledger.StateSkipped: true, "": false, "bogus": false,
	}
	for s, want := range final {
		if got := s.Final(); got != want {
			t.Errorf("State(%q).Final() = %v, want %v", s, got, want)
		}
	}
}

func TestManifest_FoldSlot(t *testing.T) {
	// A block of 1 (and a run written before blocks: 0) is partial i % shards at i / shards.
	for _, block := range []int{0, 1} {
		m := ledger.Manifest{FoldShards: 4, FoldBlock: block}
		for i := range 40 {
			if s, p := m.FoldSlot(i); s != i%4 || p != i/4 {
				t.Fatalf("block %d: FoldSlot(%d) = %d, %d; want %d, %d", block, i, s, p, i%4, i/4)
			}
		}
	}
	// Blocks of 8 over 4 partials: 0-7 → partial 0, 8-15 → 1, ..., 32-39 → 0 again after 0-7.
	m := ledger.Manifest{FoldShards: 4, FoldBlock: 8}
	seen := map[[2]int]int{}
	for i := range 1000 {
		s, p := m.FoldSlot(i)
		if want := i / 8 % 4; s != want {
			t.Fatalf("FoldSlot(%d) partial %d, want %d", i, s, want)
		}
		if prev, dup := seen[[2]int{s, p}]; dup {
			t.Fatalf("partitions %d and %d share partial %d position %d", prev, i, s, p)
		}
		seen[[2]int{s, p}] = i
		if p > i {
			t.Fatalf("FoldSlot(%d) position %d: a bitmap longer than the run", i, p)
		}
	}
	if s, p := m.FoldSlot(33); s != 0 || p != 9 {
		t.Errorf("FoldSlot(33) = %d, %d; want 0, 9", s, p)
	}
}
