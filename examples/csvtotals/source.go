package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"strings"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/batonfn/baton"
)

// SettingStorage names the storage account holding the CSV blobs: a connection string (e.g.
// Azurite's), or a blob service URL (https://<account>.blob.core.windows.net) reached with the
// app's managed identity. It is the app's own setting, apart from the storage Baton uses.
const SettingStorage = "CSV_STORAGE"

// blobSource reads the blobs from Azure Blob Storage, connecting on first use (so `validate`
// and a deployment without the setting still start).
type blobSource struct {
	connect func() (*azblob.Client, error)
}

func newBlobSource(getenv func(string) string) *blobSource {
	return &blobSource{connect: sync.OnceValues(func() (*azblob.Client, error) {
		v := getenv(SettingStorage)
		switch {
		case v == "":
			return nil, baton.Permanent(fmt.Errorf("%s is not set: the storage account holding the CSV blobs", SettingStorage))
		case strings.HasPrefix(v, "https://"):
			cred, err := azidentity.NewDefaultAzureCredential(nil)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", SettingStorage, err)
			}
			return azblob.NewClient(v, cred, nil)
		default:
			c, err := azblob.NewClientFromConnectionString(v, nil)
			if err != nil {
				return nil, baton.Permanent(fmt.Errorf("%s: %w", SettingStorage, err))
			}
			return c, nil
		}
	})}
}

func (s *blobSource) List(ctx context.Context, container, prefix, after string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		c, err := s.connect()
		if err != nil {
			yield("", err)
			return
		}
		pager := c.NewListBlobsFlatPager(container, &azblob.ListBlobsFlatOptions{Prefix: &prefix})
		for pager.More() {
			page, err := pager.NextPage(ctx)
			if err != nil {
				yield("", classify(err))
				return
			}
			for _, b := range page.Segment.BlobItems {
				if *b.Name > after && !yield(*b.Name, nil) {
					return
				}
			}
		}
	}
}

func (s *blobSource) Open(ctx context.Context, container, name string) (io.ReadCloser, error) {
	c, err := s.connect()
	if err != nil {
		return nil, err
	}
	resp, err := c.DownloadStream(ctx, container, name, nil)
	if err != nil {
		return nil, classify(err)
	}
	return resp.Body, nil
}

// classify marks the errors a retry cannot fix (no such container or blob) as permanent.
func classify(err error) error {
	var re *azcore.ResponseError
	if bloberror.HasCode(err, bloberror.ContainerNotFound, bloberror.BlobNotFound) ||
		(errors.As(err, &re) && re.StatusCode == 404) {
		return baton.Permanent(err)
	}
	return err
}
