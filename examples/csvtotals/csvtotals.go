package main

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"iter"
	"strconv"
	"strings"

	"github.com/batonfn/baton"
)

// Params are the csvtotals job's parameters: which container to read, which column to total
// and which to group by, and how many blobs one partition reads.
type Params struct {
	// Container holds the CSV blobs (in the account CSV_STORAGE names); Prefix narrows them.
	Container string `json:"container"`
	Prefix    string `json:"prefix,omitempty"`
	// Key is the column to group by, Column the integer column to total (header names).
	Key    string `json:"key"`
	Column string `json:"column"`
	// BlobsPerPartition is how many blobs one partition reads (default 20, at most 40: the
	// names travel in the partition's payload).
	BlobsPerPartition int `json:"blobsPerPartition,omitempty"`
}

// Validate fills in the default partition size and names every problem.
func (p *Params) Validate() error {
	if p.BlobsPerPartition == 0 {
		p.BlobsPerPartition = 20
	}
	var errs []error
	if p.Container == "" {
		errs = append(errs, errors.New("container: required"))
	}
	if p.Key == "" || p.Column == "" {
		errs = append(errs, errors.New("key and column: required (CSV header names)"))
	}
	if p.BlobsPerPartition < 1 || p.BlobsPerPartition > 40 {
		errs = append(errs, fmt.Errorf("blobsPerPartition %d: want 1 to 40", p.BlobsPerPartition))
	}
	return errors.Join(errs...)
}

// Blobs is one partition: a run of consecutive blob names, in listing order.
type Blobs struct {
	Names []string `json:"names"`
}

// Totals is both a partition's output and the run's report: the column's total per key, with
// the rows and blobs read (and, in the report, the partitions that failed for good).
type Totals struct {
	Totals       map[string]int64 `json:"totals"`
	Rows         int64            `json:"rows"`
	Blobs        int64            `json:"blobs"`
	FailedRanges int64            `json:"failedRanges"`
}

func (t *Totals) add(o Totals) {
	if t.Totals == nil {
		t.Totals = map[string]int64{}
	}
	for k, v := range o.Totals {
		t.Totals[k] += v
	}
	t.Rows += o.Rows
	t.Blobs += o.Blobs
	t.FailedRanges += o.FailedRanges
}

// Source is where the CSV blobs are: Azure Blob Storage in the app (blobSource), a map in the
// tests.
type Source interface {
	// List yields the names in container that start with prefix and sort after after, in
	// ascending order.
	List(ctx context.Context, container, prefix, after string) iter.Seq2[string, error]
	// Open reads one blob.
	Open(ctx context.Context, container, name string) (io.ReadCloser, error)
}

// csvTotalsJob totals a CSV column per key over the blobs of a container, a partition per
// BlobsPerPartition blobs.
func csvTotalsJob(src Source) baton.Job {
	j := job{src: src}
	return baton.TypedJob(j.plan, j.process, aggregate).WithMerge(merge)
}

type job struct{ src Source }

// plan lists the blobs in name order and emits them in runs of BlobsPerPartition; the cursor is
// the last name of the run, so planning resumes after it.
func (j job) plan(ctx context.Context, p Params, cursor string, emit func(Blobs, string) error) error {
	var batch []string
	for name, err := range j.src.List(ctx, p.Container, p.Prefix, cursor) {
		if err != nil {
			return fmt.Errorf("list %s: %w", p.Container, err)
		}
		batch = append(batch, name)
		if len(batch) == p.BlobsPerPartition {
			if err := emit(Blobs{Names: batch}, name); err != nil {
				return err
			}
			batch = nil
		}
	}
	if len(batch) > 0 {
		return emit(Blobs{Names: batch}, batch[len(batch)-1])
	}
	return nil
}

// process reads its blobs and totals the column per key. It only reads, so running it again
// gives the same totals while the blobs are unchanged.
func (j job) process(ctx context.Context, part baton.Part[Params, Blobs]) (Totals, error) {
	t := Totals{Totals: map[string]int64{}}
	for _, name := range part.Payload.Names {
		if err := j.readBlob(ctx, part.Params, name, &t); err != nil {
			return Totals{}, err
		}
		t.Blobs++
	}
	return t, nil
}

// readBlob adds one blob's rows to t. A blob that is not the CSV the params describe is a
// permanent error: reading it again cannot help.
func (j job) readBlob(ctx context.Context, p Params, name string, t *Totals) error {
	rc, err := j.src.Open(ctx, p.Container, name)
	if err != nil {
		return fmt.Errorf("open %s: %w", name, err)
	}
	defer rc.Close()
	r := csv.NewReader(rc)
	header, err := r.Read()
	if err != nil {
		return baton.Permanent(fmt.Errorf("%s: header: %w", name, err))
	}
	key, col := index(header, p.Key), index(header, p.Column)
	if key < 0 || col < 0 {
		return baton.Permanent(fmt.Errorf("%s: no column %q or %q in header %v", name, p.Key, p.Column, header))
	}
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return baton.Permanent(fmt.Errorf("%s: %w", name, err))
		}
		v, err := strconv.ParseInt(strings.TrimSpace(rec[col]), 10, 64)
		if err != nil {
			line, _ := r.FieldPos(col)
			return baton.Permanent(fmt.Errorf("%s line %d: column %s: %w", name, line, p.Column, err))
		}
		t.Totals[rec[key]] += v
		t.Rows++
	}
}

func index(header []string, name string) int {
	for i, h := range header {
		if strings.TrimSpace(h) == name {
			return i
		}
	}
	return -1
}

func aggregate(ctx context.Context, run baton.RunOf[Params], results iter.Seq2[baton.Outcome[Totals], error]) (Totals, error) {
	t := Totals{Totals: map[string]int64{}}
	for r, err := range results {
		if err != nil {
			return t, err
		}
		if !r.OK {
			t.FailedRanges++ // a range that failed for good is counted, and listed by Baton
			continue
		}
		t.add(r.Output)
	}
	return t, nil
}

// merge adds totals: associative and order-insensitive, so Baton folds results as they arrive.
func merge(ctx context.Context, run baton.RunOf[Params], parts []Totals) (Totals, error) {
	t := Totals{Totals: map[string]int64{}}
	for _, p := range parts {
		t.add(p)
	}
	return t, nil
}
