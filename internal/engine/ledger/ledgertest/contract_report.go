package ledgertest

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/batonfn/baton/internal/engine/ledger"
)

func testReadReportBounded(t *testing.T, newStore Factory) {
	s := newStore(t, Options{})
	ctx := testContext(t)

	if _, _, err := s.ReadReportBounded(ctx, "tick-none", 1<<10); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("missing report: got %v, want ErrNotFound", err)
	}
	if _, _, err := s.ReadReportBounded(ctx, "../leases", 1<<10); err == nil || errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("invalid run ID: got %v, want a validation error", err)
	}

	small := ledger.Report{Run: "run-small", Job: "synthetic", State: ledger.StateSucceeded, Partitions: 2, Succeeded: 2,
		Aggregate: json.RawMessage(`{"sum":1}`)}
	if _, err := s.ClaimReport(ctx, small); err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(small)
	got, info, err := s.ReadReportBounded(ctx, "run-small", 1<<10)
	if err != nil || !info.Decoded || info.Size != int64(len(want)) || got.Succeeded != 2 || string(got.Aggregate) != `{"sum":1}` {
		t.Errorf("small report: got %+v %+v %v; want it decoded, size %d", got, info, err, len(want))
	}

	big := small
	big.Run, big.Aggregate = "run-big", json.RawMessage(`{"pad":"`+strings.Repeat("x", 5000)+`"}`)
	if _, err := s.ClaimReport(ctx, big); err != nil {
		t.Fatal(err)
	}
	got, info, err = s.ReadReportBounded(ctx, "run-big", 1<<10)
	if err != nil || info.Decoded || info.Size <= 5000 || got.Run != "" {
		t.Errorf("large report: got %+v %+v %v; want not decoded with its size", got, info, err)
	}
	// Exactly at the bound is still decoded.
	wantBig, _ := json.Marshal(big)
	if _, info, err = s.ReadReportBounded(ctx, "run-big", int64(len(wantBig))); err != nil || !info.Decoded {
		t.Errorf("report of exactly maxBytes: %+v %v, want decoded", info, err)
	}
}
