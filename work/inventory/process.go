package inventory

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/batonfn/baton"
	"golang.org/x/sync/errgroup"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

// checkConcurrency bounds the downloads one partition runs at once.
const checkConcurrency = 8

// Process audits the blobs in the partition's range. A transient storage error fails the
// partition (it is retried); a blob that is gone counts as vanished; any other refusal to
// read a blob (archived, forbidden, …) lists it as unreadable.
func (j *Job) Process(ctx context.Context, part baton.Partition) (json.RawMessage, error) {
	p, err := j.params(part.Params) // a run planned before a container became reserved reads nothing either
	if err != nil {
		return nil, baton.Permanent(err)
	}
	var r Range
	dec := json.NewDecoder(bytes.NewReader(part.Payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil || r.Last == "" || r.Last <= r.After {
		return nil, baton.Permanent(fmt.Errorf("inventory: bad range payload %s", part.Payload))
	}

	s := newSummary()
	var toCheck []*container.BlobItem
	err = j.list(ctx, p, r.After, func(item *container.BlobItem) (bool, error) {
		if *item.Name > r.Last {
			return false, nil
		}
		t := Tally{Objects: 1}
		ct, tier := NoContentType, NoTier
		if pr := item.Properties; pr != nil {
			if pr.ContentLength != nil {
				t.Bytes = *pr.ContentLength
			}
			if pr.ContentType != nil && *pr.ContentType != "" {
				ct = *pr.ContentType
			}
			if pr.AccessTier != nil && *pr.AccessTier != "" {
				tier = string(*pr.AccessTier)
			}
			if len(pr.ContentMD5) > 0 {
				toCheck = append(toCheck, item)
			} else {
				s.NoMD5++
			}
		} else {
			s.NoMD5++
		}
		s.Tally.add(t)
		byCT, byTier := s.ByContentType[ct], s.ByTier[tier]
		byCT.add(t)
		byTier.add(t)
		s.ByContentType[ct], s.ByTier[tier] = byCT, byTier
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	if err := j.checkAll(ctx, p.Container, toCheck, &s); err != nil {
		return nil, err
	}
	s.Corrupt = capSorted(s.Corrupt, MaxPartitionSize, func(c Corrupt) string { return c.Name })
	s.Unreadable = capSorted(s.Unreadable, MaxPartitionSize, func(u Unreadable) string { return u.Name })
	return json.Marshal(s)
}

// checkAll recomputes the MD5 of every item, a few at a time, recording the outcome in s. A read
// that fails for a reason other than the blob's own state ends the partition with that error.
func (j *Job) checkAll(ctx context.Context, cont string, items []*container.BlobItem, s *Summary) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(checkConcurrency)
	var mu sync.Mutex
	for _, item := range items {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error {
			sum, err := j.md5Of(gctx, cont, *item.Name)
			mu.Lock()
			defer mu.Unlock()
			var re *azcore.ResponseError
			switch {
			case err == nil && bytes.Equal(sum, item.Properties.ContentMD5):
				s.Verified++
			case err == nil:
				s.CorruptCount++
				s.Corrupt = append(s.Corrupt, Corrupt{Name: *item.Name,
					Expected: base64.StdEncoding.EncodeToString(item.Properties.ContentMD5),
					Actual:   base64.StdEncoding.EncodeToString(sum)})
			case errors.As(err, &re) && re.StatusCode == http.StatusNotFound:
				s.Vanished++
			case errors.As(err, &re) && re.StatusCode >= 400 && re.StatusCode < 500 &&
				re.StatusCode != http.StatusRequestTimeout && re.StatusCode != http.StatusTooManyRequests:
				s.UnreadableCount++
				s.Unreadable = append(s.Unreadable, Unreadable{Name: *item.Name, Error: fmt.Sprintf("%d %s", re.StatusCode, re.ErrorCode)})
			default:
				return fmt.Errorf("inventory: read %s/%s: %w", cont, *item.Name, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}

// md5Of streams a blob and returns the MD5 of its content.
func (j *Job) md5Of(ctx context.Context, cont, name string) ([]byte, error) {
	resp, err := j.client.DownloadStream(ctx, cont, name, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	h := md5.New()
	if _, err := io.Copy(h, resp.Body); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}
