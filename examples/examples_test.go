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
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/ledger"
	"github.com/batonfn/baton/internal/tools/azurite"
	"github.com/batonfn/baton/internal/tools/devhost"
	"github.com/batonfn/baton/internal/tools/devhost/devhosttest"
	"github.com/batonfn/baton/internal/tools/scaffold"
	"github.com/batonfn/baton/internal/tools/scaffold/scaffoldtest"
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
func seedSales(t *testing.T, ctx context.Context, client *azblob.Client, container string, n int) (string, map[string]int64) {
	t.Helper()
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
// against Azurite: the schedule main.go declares (morning-totals, its expression overridden
// through BATON_SCHEDULES to fire every two seconds) is fired by the heartbeat, exactly once per
// occurrence; its run partitions the seeded CSV blobs; the instances total them; the report's
// totals are the seeded ones.
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
	// The schedule's params are the job's defaults: the container sales, 20 blobs a partition.
	const schedule, blobs, perPartition = "morning-totals", 45, 20
	container, want := seedSales(t, ctx, client, "sales", blobs)

	c := devhosttest.Start(t, devhosttest.Options{
		AppRoot: "csvtotals", Executable: exe, Server: srv, Instances: 2,
		LogPath: filepath.Join(t.TempDir(), "host.log"),
		Settings: map[string]string{
			config.SettingHeartbeat: "* * * * * *",
			config.SettingSchedule:  "",
			config.SettingJob:       "",
			config.SettingSchedules: fmt.Sprintf(`{%q:{"cron":"*/2 * * * * *","timeZone":"UTC","overlap":"skip"}}`, schedule),
			"CSV_STORAGE":           srv.ConnectionString(),
		},
	})
	t.Cleanup(func() { _ = c.Close() })

	created, err := c.Host.WaitLine(ctx, func(l devhost.LogLine) bool { return l.Msg == "run created" && l.Str("schedule") == schedule })
	if err != nil {
		t.Fatalf("no run of %s created: %v (log: %s)", schedule, err, c.LogPath)
	}
	run := created.Str("run")
	if name, ok := ledger.ParseRunID(run); !ok || name.Schedule != schedule || name.Occurrence.IsZero() || name.Occurrence.Second()%2 != 0 {
		t.Errorf("run %s: want a run of the schedule %s at one of its occurrences", run, schedule)
	}
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
		t.Errorf("report totals %v over %d blobs in %s, want %v over %d", got.Totals, got.Blobs, container, want, blobs)
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
