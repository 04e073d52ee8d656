package examples_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/batonfn/baton/config"
	"github.com/batonfn/baton/internal/azurite"
	"github.com/batonfn/baton/internal/devhost"
	"github.com/batonfn/baton/internal/devhost/devhosttest"
	"github.com/batonfn/baton/internal/scaffold"
	"github.com/batonfn/baton/internal/scaffold/scaffoldtest"
	"github.com/batonfn/baton/ledger"
)

// TestCSVTotals_MatchesScaffold: the example's generated files are exactly what the scaffold
// writes for it today (regenerated in memory from its manifest), so the two cannot drift.
func TestCSVTotals_MatchesScaffold(t *testing.T) {
	drifts, err := scaffold.Check("csvtotals")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range drifts {
		t.Errorf("examples/csvtotals/%s: %s (run go tool baton sync in examples/csvtotals)", d.Path, d.Problem)
	}
	m, err := scaffold.ReadManifest("csvtotals")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Files) < 20 || m.App.Name != "csvtotals" {
		t.Errorf("manifest lists %d generated files for app %q: want the scaffold's files for csvtotals", len(m.Files), m.App.Name)
	}
}

// buildExample builds the example app's handler into a temporary folder.
func buildExample(t *testing.T, ctx context.Context, dir string) string {
	t.Helper()
	exe := filepath.Join(t.TempDir(), filepath.Base(dir))
	scaffoldtest.Go(t, ctx, dir, "build", "-o", exe, ".")
	return exe
}

// seedSales uploads n CSV blobs (region,units) into a new container and returns the container
// and the units per region it wrote.
func seedSales(t *testing.T, ctx context.Context, client *azblob.Client, n int) (string, map[string]int64) {
	t.Helper()
	container := devhosttest.ShortName("sales")
	if _, err := client.CreateContainer(ctx, container, nil); err != nil {
		t.Fatal(err)
	}
	regions := []string{"north", "south", "east", "west", "central"}
	want := map[string]int64{}
	for i := range n {
		var b strings.Builder
		b.WriteString("day,region,units\n")
		for r := range 3 + i%4 {
			region, units := regions[(i*3+r)%len(regions)], int64(10*i+r+1)
			fmt.Fprintf(&b, "2026-11-%02d,%s,%d\n", i%28+1, region, units)
			want[region] += units
		}
		if _, err := client.UploadBuffer(ctx, container, fmt.Sprintf("day-%03d.csv", i), []byte(b.String()), nil); err != nil {
			t.Fatal(err)
		}
	}
	return container, want
}

// TestCSVTotals_EndToEnd runs the example app's binary on two instances under the local host
// against Azurite: the timer's one occurrence elects a leader, which partitions the seeded CSV
// blobs; the instances total them; the report's totals are the seeded ones.
func TestCSVTotals_EndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the example and runs it against Azurite")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	exe := buildExample(t, ctx, "csvtotals")
	srv, err := azurite.Start(ctx, azurite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	client, err := azblob.NewClientFromConnectionString(srv.ConnectionString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	const blobs, perPartition = 14, 3
	container, want := seedSales(t, ctx, client, blobs)

	c := devhosttest.Start(t, devhosttest.Options{
		AppRoot: "csvtotals", Executable: exe, Server: srv, Instances: 2,
		LogPath: filepath.Join(t.TempDir(), "host.log"),
		Settings: map[string]string{
			config.SettingJob:       "csvtotals",
			config.SettingJobParams: fmt.Sprintf(`{"container":%q,"key":"region","column":"units","blobsPerPartition":%d}`, container, perPartition),
			config.SettingSchedule:  "*/2 * * * * *",
			"CSV_STORAGE":           srv.ConnectionString(),
		},
		Host: func(o *devhost.Options) { o.MaxTimerFires = 1 },
	})
	t.Cleanup(func() { _ = c.Close() })

	created, err := c.Host.WaitLine(ctx, func(l devhost.LogLine) bool { return l.Msg == "run created" })
	if err != nil {
		t.Fatalf("no run created: %v (log: %s)", err, c.LogPath)
	}
	run := created.Str("run")
	rep := waitReport(t, ctx, c, run)
	if rep.State != ledger.StateSucceeded || rep.Job != "csvtotals" || rep.Partitions != (blobs+perPartition-1)/perPartition || rep.Failed != 0 {
		t.Fatalf("run %s: job %s %s with %d partitions, %d failed; want csvtotals succeeded with %d partitions (log: %s)",
			run, rep.Job, rep.State, rep.Partitions, rep.Failed, (blobs+perPartition-1)/perPartition, c.LogPath)
	}
	var got struct {
		Totals map[string]int64 `json:"totals"`
		Blobs  int64            `json:"blobs"`
	}
	if err := json.Unmarshal(rep.Aggregate, &got); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got.Totals, want) || got.Blobs != blobs {
		t.Errorf("report totals %v over %d blobs, want %v over %d", got.Totals, got.Blobs, want, blobs)
	}
}

// waitReport waits until the run's report is written and returns it.
func waitReport(t *testing.T, ctx context.Context, c *devhosttest.Cluster, run string) ledger.Report {
	t.Helper()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		// The aggregator claims the report with an in-progress one, then replaces it.
		rep, _, err := c.Store.ReadReport(ctx, run)
		if err == nil && rep.State.Final() {
			return rep
		}
		select {
		case <-ctx.Done():
			t.Fatalf("run %s has no final report: %v (last read: %s, %v; log: %s)", run, ctx.Err(), rep.State, err, c.LogPath)
		case <-tick.C:
		}
	}
}
