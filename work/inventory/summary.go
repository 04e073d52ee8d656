package inventory

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"slices"

	"github.com/batonfn/baton"
)

// Tally counts objects and their bytes.
type Tally struct {
	Objects int64 `json:"objects"`
	Bytes   int64 `json:"bytes"`
}

func (t *Tally) add(o Tally) { t.Objects += o.Objects; t.Bytes += o.Bytes }

// Corrupt is a blob whose content does not match its Content-MD5 (both base64).
type Corrupt struct {
	Name     string `json:"name"`
	Expected string `json:"expected"`
	Actual   string `json:"actual"`
}

// Unreadable is a blob whose content could not be read to check it.
type Unreadable struct {
	Name  string `json:"name"`
	Error string `json:"error"`
}

// Keys used when a blob has no content type or no access tier.
const (
	NoContentType = "(none)"
	NoTier        = "(none)"
)

// Summary is a partition's output and, merged, the run's aggregate.
type Summary struct {
	Tally
	ByContentType map[string]Tally `json:"byContentType"`
	ByTier        map[string]Tally `json:"byTier"`
	// Verified blobs had a Content-MD5 that matched their content; NoMD5 blobs had none.
	Verified int64 `json:"verified"`
	NoMD5    int64 `json:"noMD5"`
	// Vanished blobs were listed but gone before they could be read.
	Vanished int64 `json:"vanished"`
	// CorruptCount and UnreadableCount are exact; the lists are sorted by name and, in the
	// aggregate, capped at MaxListed (Truncated says so).
	CorruptCount    int64        `json:"corruptCount"`
	UnreadableCount int64        `json:"unreadableCount"`
	Corrupt         []Corrupt    `json:"corrupt"`
	Unreadable      []Unreadable `json:"unreadable"`
	Truncated       bool         `json:"truncated,omitempty"`
	// Partitions and FailedPartitions are set in the aggregate: partitions whose result is a
	// recorded failure are not in the counts (the report lists them).
	Partitions       int `json:"partitions,omitempty"`
	FailedPartitions int `json:"failedPartitions,omitempty"`
}

func newSummary() Summary {
	return Summary{ByContentType: map[string]Tally{}, ByTier: map[string]Tally{}, Corrupt: []Corrupt{}, Unreadable: []Unreadable{}}
}

// merge adds o into s, keeping the lists sorted and at most limit long.
func (s *Summary) merge(o Summary, limit int) {
	s.Tally.add(o.Tally)
	for k, v := range o.ByContentType {
		t := s.ByContentType[k]
		t.add(v)
		s.ByContentType[k] = t
	}
	for k, v := range o.ByTier {
		t := s.ByTier[k]
		t.add(v)
		s.ByTier[k] = t
	}
	s.Verified += o.Verified
	s.NoMD5 += o.NoMD5
	s.Vanished += o.Vanished
	s.CorruptCount += o.CorruptCount
	s.UnreadableCount += o.UnreadableCount
	s.Corrupt = capSorted(append(s.Corrupt, o.Corrupt...), limit, func(c Corrupt) string { return c.Name })
	s.Unreadable = capSorted(append(s.Unreadable, o.Unreadable...), limit, func(u Unreadable) string { return u.Name })
	s.Truncated = s.Truncated || o.Truncated ||
		int64(len(s.Corrupt)) < s.CorruptCount || int64(len(s.Unreadable)) < s.UnreadableCount
}

func capSorted[T any](list []T, limit int, name func(T) string) []T {
	slices.SortFunc(list, func(a, b T) int { return cmp.Compare(name(a), name(b)) })
	if len(list) > limit {
		list = list[:limit]
	}
	return list
}

// Aggregate merges the partition summaries.
func (*Job) Aggregate(ctx context.Context, run baton.RunInfo, results iter.Seq2[baton.Result, error]) (json.RawMessage, error) {
	total := newSummary()
	total.Partitions = run.Partitions
	for r, err := range results {
		if err != nil {
			return nil, err
		}
		if !r.OK {
			total.FailedPartitions++
			continue
		}
		var s Summary
		if err := json.Unmarshal(r.Output, &s); err != nil {
			return nil, baton.Permanent(fmt.Errorf("inventory: output of partition %d: %w", r.Index, err))
		}
		total.merge(s, MaxListed)
	}
	return json.Marshal(total)
}

// Merge combines partial aggregates: counts add up and the capped, name-sorted lists merge,
// so any grouping of the partitions gives the same aggregate.
func (*Job) Merge(ctx context.Context, run baton.RunInfo, parts []json.RawMessage) (json.RawMessage, error) {
	total := newSummary()
	total.Partitions = run.Partitions
	for _, part := range parts {
		var s Summary
		if err := json.Unmarshal(part, &s); err != nil {
			return nil, baton.Permanent(fmt.Errorf("inventory: partial aggregate: %w", err))
		}
		total.merge(s, MaxListed)
		total.FailedPartitions += s.FailedPartitions
	}
	return json.Marshal(total)
}
