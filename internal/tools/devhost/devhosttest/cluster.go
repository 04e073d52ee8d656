// Package devhosttest starts the local multi-instance host over the real handler binary for
// the end-to-end tests and the benchmarks: one harness, so both run the handler the same way.
package devhosttest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/election/bloblease"
	"github.com/batonfn/baton/internal/engine/ledger/blobstore"
	"github.com/batonfn/baton/internal/tools/azurite"
	"github.com/batonfn/baton/internal/tools/devhost"
)

// Options configure a cluster. AppRoot, Executable and Server are required.
type Options struct {
	AppRoot    string // the repository root: host.json and the function folders
	Executable string // the handler binary
	Server     *azurite.Server
	Instances  int               // default 3
	Settings   map[string]string // over Defaults
	LogPath    string            // the host's log file (required)
	// Host adjusts the host options last (log levels, timers, hooks, polling).
	Host func(*devhost.Options)
}

// Cluster is a running local host plus the test's own view of storage.
type Cluster struct {
	Host     *devhost.Host
	Server   *azurite.Server
	Settings map[string]string
	Store    *blobstore.Store
	Lock     *bloblease.BlobLock
	Leases   *container.Client
	LogPath  string
	log      io.Closer
}

// ShortName is a random queue or container name with the given prefix (lowercase, short).
func ShortName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// Defaults are the settings every cluster starts from: the Storage-queue transport on the
// given Azurite, fresh queue and container names, the synthetic job, and the Service Bus
// functions disabled.
func Defaults(srv *azurite.Server) map[string]string {
	return map[string]string{
		config.SettingHostStorage:       srv.ConnectionString(),
		config.SettingTransport:         string(config.TransportQueue),
		config.SettingWorkQueue:         ShortName("q"),
		config.SettingControlQueue:      ShortName("c"),
		config.SettingLeaseContainer:    ShortName("lease"),
		config.SettingRunsContainer:     ShortName("runs"),
		config.SettingLeaseName:         "baton-leader",
		config.SettingJob:               "synthetic",
		"AzureWebJobs.Work.Disabled":    "true",
		"AzureWebJobs.Control.Disabled": "true",
		"FUNCTIONS_WORKER_RUNTIME":      "custom",
		config.SettingStorage:           "",
		config.SettingSiteName:          "",
		config.SettingWebsiteInstance:   "",
	}
}

// Start starts the host with opts and returns once every instance is ready. The host is
// stopped when the test ends (or earlier by Close).
func Start(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	if opts.Instances == 0 {
		opts.Instances = 3
	}
	settings := Defaults(opts.Server)
	maps.Copy(settings, opts.Settings)
	if err := os.MkdirAll(filepath.Dir(opts.LogPath), 0o755); err != nil {
		tb.Fatal(err)
	}
	logFile, err := os.Create(opts.LogPath)
	if err != nil {
		tb.Fatal(err)
	}
	c := &Cluster{Server: opts.Server, Settings: settings, LogPath: opts.LogPath, log: logFile}
	hopts := devhost.Options{
		AppRoot: opts.AppRoot, Executable: opts.Executable, Instances: opts.Instances,
		SettingsFile: filepath.Join(opts.AppRoot, "local.settings.example.json"), Settings: settings,
		HTTPAddr: "127.0.0.1:0", Out: logFile,
	}
	if opts.Host != nil {
		opts.Host(&hopts)
	}
	h, err := devhost.New(hopts)
	if err != nil {
		tb.Fatal(err)
	}
	c.Host = h
	// The test's own view goes to Azurite directly, even when the cluster's storage setting
	// points elsewhere (a counting proxy): it sees the same containers.
	cfg := h.Config()
	blobs, err := azclient.Blob(opts.Server.Storage(), nil)
	if err != nil {
		tb.Fatal(err)
	}
	c.Store = blobstore.New(blobs.ServiceClient().NewContainerClient(cfg.RunsContainer), blobstore.Options{})
	c.Leases = blobs.ServiceClient().NewContainerClient(cfg.LeaseContainer)
	c.Lock, err = bloblease.NewBlobLock(c.Leases, cfg.LeaseName,
		bloblease.BlobLockOptions{Duration: cfg.LeaseDuration, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := h.Start(ctx); err != nil {
		tb.Fatalf("start the host: %v (log: %s)", err, opts.LogPath)
	}
	return c
}

// Close stops the host and closes its log.
func (c *Cluster) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := c.Host.Close(ctx)
	_ = c.log.Close()
	return err
}
