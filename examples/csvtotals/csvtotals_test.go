package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/batonfn/baton"
	"github.com/batonfn/baton/batontest"
)

// memSource is a Source over a map of container → blob name → content.
type memSource map[string]map[string]string

func (m memSource) List(ctx context.Context, container, prefix, after string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		blobs, ok := m[container]
		if !ok {
			yield("", baton.Permanent(fmt.Errorf("container %s not found", container)))
			return
		}
		for _, name := range slices.Sorted(maps.Keys(blobs)) {
			if strings.HasPrefix(name, prefix) && name > after && !yield(name, nil) {
				return
			}
		}
	}
}

func (m memSource) Open(ctx context.Context, container, name string) (io.ReadCloser, error) {
	b, ok := m[container][name]
	if !ok {
		return nil, baton.Permanent(fmt.Errorf("blob %s not found", name))
	}
	return io.NopCloser(strings.NewReader(b)), nil
}

// salesData is n blobs of CSV rows (region, units and other columns in a varying order) and the
// totals per region, counted here as they are written.
func salesData(n int) (map[string]string, map[string]int64, int64) {
	regions := []string{"north", "south", "east", "west"}
	blobs := map[string]string{}
	want := map[string]int64{}
	var rows int64
	for i := range n {
		var b strings.Builder
		if i%2 == 0 {
			b.WriteString("region,units,sku\n")
		} else {
			b.WriteString("sku,units,region\n") // the columns are found by name
		}
		for r := range i%5 + 1 {
			region, units := regions[(i+r)%len(regions)], int64(i*7+r)
			if i%2 == 0 {
				fmt.Fprintf(&b, "%s,%d,sku-%d\n", region, units, r)
			} else {
				fmt.Fprintf(&b, "sku-%d,%d,%s\n", r, units, region)
			}
			want[region] += units
			rows++
		}
		blobs[fmt.Sprintf("2026/11/sales-%03d.csv", i)] = b.String()
	}
	return blobs, want, rows
}

// TestCSVTotals: the job keeps Baton's exactly-once promises (batontest) and totals the column
// per key over every blob.
func TestCSVTotals(t *testing.T) {
	blobs, want, rows := salesData(23)
	blobs["other/ignored.csv"] = "region,units\nnorth,1000000\n" // outside the prefix
	src := memSource{"sales": blobs}
	rep := batontest.Check(t, csvTotalsJob(src), Params{Container: "sales", Prefix: "2026/", Key: "region", Column: "units", BlobsPerPartition: 5})
	if rep.Partitions != 5 {
		t.Errorf("%d partitions, want 5 (23 blobs, 5 per partition)", rep.Partitions)
	}
	var got Totals
	if err := json.Unmarshal(rep.Aggregate, &got); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got.Totals, want) || got.Rows != rows || got.Blobs != 23 || got.FailedRanges != 0 {
		t.Errorf("report %+v, want totals %v over %d rows of 23 blobs", got, want, rows)
	}
}

// TestCSVTotals_BadBlob: a blob that is not the CSV the params describe fails its partition
// for good (retrying cannot fix it), naming the blob and the line.
func TestCSVTotals_BadBlob(t *testing.T) {
	src := memSource{"sales": {"a.csv": "region,units\nnorth,12\nsouth,twelve\n"}}
	j := job{src: src}
	_, err := j.process(context.Background(), baton.Part[Params, Blobs]{
		Params:  Params{Container: "sales", Key: "region", Column: "units"},
		Payload: Blobs{Names: []string{"a.csv"}},
	})
	if err == nil || !strings.Contains(err.Error(), "a.csv line 3") || !errors.Is(err, baton.ErrPermanent) {
		t.Errorf("process of a bad row: %v, want a permanent error naming a.csv line 3", err)
	}
}

// TestParams_Validate: every problem is named.
func TestParams_Validate(t *testing.T) {
	p := Params{BlobsPerPartition: 99}
	err := p.Validate()
	for _, want := range []string{"container", "key and column", "blobsPerPartition 99"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want it to name %s", err, want)
		}
	}
}
