package main

import (
	"bytes"
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
)

// seedKind is one family of demo blobs.
type seedKind struct {
	prefix, ext, contentType string
	share                    int // percent of the blobs
	body                     func(r *rand.Rand, i int) []byte
}

var seedKinds = []seedKind{
	{"logs/app-", ".log", "text/plain; charset=utf-8", 40, func(r *rand.Rand, i int) []byte {
		var b bytes.Buffer
		for l := 0; l < 4+r.IntN(40); l++ {
			fmt.Fprintf(&b, "2026-11-21T02:%02d:%02dZ INFO request %d served in %d ms\n", l%60, r.IntN(60), i*100+l, r.IntN(900))
		}
		return b.Bytes()
	}},
	{"data/record-", ".json", "application/json", 25, func(r *rand.Rand, i int) []byte {
		return fmt.Appendf(nil, `{"id":%d,"customer":"c-%05d","amount":%d.%02d,"tags":["t%d","t%d"]}`, i, r.IntN(99999), r.IntN(5000), r.IntN(100), r.IntN(9), r.IntN(9))
	}},
	{"images/img-", ".png", "image/png", 20, func(r *rand.Rand, i int) []byte {
		b := make([]byte, 256+r.IntN(3000))
		for k := range b {
			b[k] = byte(r.UintN(256))
		}
		copy(b, "\x89PNG\r\n\x1a\n")
		return b
	}},
	{"exports/export-", ".csv", "text/csv", 15, func(r *rand.Rand, i int) []byte {
		var b bytes.Buffer
		b.WriteString("id,region,units\n")
		for l := 0; l < 5+r.IntN(60); l++ {
			fmt.Fprintf(&b, "%d,%s,%d\n", i*1000+l, []string{"eu", "us", "apac"}[r.IntN(3)], r.IntN(1000))
		}
		return b.Bytes()
	}},
}

// seedResult describes the seeded container.
type seedResult struct {
	Blobs int
	Bytes int64
	// ByType counts blobs per content type; WrongMD5 names the blobs whose Content-MD5 is wrong.
	ByType   map[string]int
	WrongMD5 []string
}

// seed creates container and fills it with n small blobs of a few content types, each with its
// Content-MD5 set; `bad` of them (spread evenly) get a Content-MD5 that does not match their
// content. The content is deterministic.
func seed(ctx context.Context, client *azblob.Client, container string, n, bad int) (seedResult, error) {
	res := seedResult{ByType: map[string]int{}}
	if _, err := client.CreateContainer(ctx, container, nil); err != nil && !bloberror.HasCode(err, bloberror.ContainerAlreadyExists) {
		return res, fmt.Errorf("create container %s: %w", container, err)
	}
	type item struct {
		name, ct string
		body     []byte
		md5      []byte
	}
	r := rand.New(rand.NewPCG(42, 2026))
	badEvery := 0
	if bad > 0 {
		badEvery = max(n/bad, 1)
	}
	items := make([]item, 0, n)
	for i := 0; i < n; i++ {
		k := pickKind(i)
		body := k.body(r, i)
		sum := md5.Sum(body)
		it := item{name: fmt.Sprintf("%s%05d%s", k.prefix, i, k.ext), ct: k.contentType, body: body, md5: sum[:]}
		if badEvery > 0 && i%badEvery == badEvery/2 && len(res.WrongMD5) < bad {
			wrong := md5.Sum(append(append([]byte(nil), body...), "tampered"...))
			it.md5 = wrong[:]
			res.WrongMD5 = append(res.WrongMD5, it.name)
		}
		res.Bytes += int64(len(body))
		res.ByType[strings.SplitN(k.contentType, ";", 2)[0]]++
		items = append(items, it)
	}
	res.Blobs = n
	sort.Strings(res.WrongMD5)

	work := make(chan item)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range work {
				bb := client.ServiceClient().NewContainerClient(container).NewBlockBlobClient(it.name)
				// The service checks a Content-MD5 given at upload, so a wrong one is set
				// afterwards, as a tampered or bit-rotted blob would show it.
				good := md5.Sum(it.body)
				_, err := bb.UploadBuffer(ctx, it.body, &blockblob.UploadBufferOptions{
					HTTPHeaders: &blob.HTTPHeaders{BlobContentType: to.Ptr(it.ct), BlobContentMD5: good[:]}})
				if err == nil && !bytes.Equal(good[:], it.md5) {
					_, err = bb.SetHTTPHeaders(ctx, blob.HTTPHeaders{BlobContentType: to.Ptr(it.ct), BlobContentMD5: it.md5}, nil)
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("upload %s: %w", it.name, err))
					mu.Unlock()
				}
			}
		}()
	}
	for i := range items {
		it := items[i]
		select {
		case work <- it:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(work)
	wg.Wait()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if len(errs) > 0 {
		return res, fmt.Errorf("%d uploads failed, first: %w", len(errs), errors.Join(errs[0]))
	}
	return res, nil
}

// pickKind spreads the kinds by their shares, deterministically by index.
func pickKind(i int) seedKind {
	slot := i % 100
	for _, k := range seedKinds {
		if slot < k.share {
			return k
		}
		slot -= k.share
	}
	return seedKinds[0]
}
