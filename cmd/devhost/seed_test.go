package main

import (
	"bytes"
	"context"
	"crypto/md5"
	"io"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/batonfn/baton/internal/tools/azurite"
)

// TestSeed: the demo container holds n blobs of the advertised content types, each with a
// Content-MD5, exactly `bad` of which do not match their content.
func TestSeed(t *testing.T) {
	srv := azurite.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client, err := azblob.NewClientFromConnectionString(srv.ConnectionString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	name := azurite.UniqueName(t, "seed")
	res, err := seed(ctx, client, name, 200, 5)
	if err != nil {
		t.Fatal(err)
	}
	if res.Blobs != 200 || len(res.WrongMD5) != 5 || len(res.ByType) != 4 {
		t.Fatalf("seeded %+v, want 200 blobs of 4 types, 5 wrong", res)
	}
	wrong := map[string]bool{}
	for _, n := range res.WrongMD5 {
		wrong[n] = true
	}
	pager := client.NewListBlobsFlatPager(name, &container.ListBlobsFlatOptions{})
	seen, mismatched := 0, 0
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Segment.BlobItems {
			seen++
			if len(it.Properties.ContentMD5) == 0 || it.Properties.ContentType == nil {
				t.Errorf("%s: no Content-MD5 or content type", *it.Name)
				continue
			}
			resp, err := client.DownloadStream(ctx, name, *it.Name, nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			sum := md5.Sum(body)
			if match := bytes.Equal(sum[:], it.Properties.ContentMD5); match == wrong[*it.Name] {
				t.Errorf("%s: MD5 matches=%v, seeded wrong=%v", *it.Name, match, wrong[*it.Name])
			} else if !match {
				mismatched++
			}
		}
	}
	if seen != 200 || mismatched != 5 {
		t.Errorf("listed %d blobs with %d mismatches, want 200 and 5", seen, mismatched)
	}
}
