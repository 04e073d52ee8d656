package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/tools/azurite"
)

// TestToStartedAzurite: AzureWebJobsStorage and every setting the file gives the emulator
// shorthand point at the started Azurite; other values, and settings given by flag, stay.
func TestToStartedAzurite(t *testing.T) {
	dir := t.TempDir()
	settings := `{"Values":{"AzureWebJobsStorage":"UseDevelopmentStorage=true","CSV_STORAGE":"UseDevelopmentStorage=true",
		"OTHER_STORAGE":"DefaultEndpointsProtocol=https;AccountName=x","FLAGGED":"UseDevelopmentStorage=true"}}`
	if err := os.WriteFile(filepath.Join(dir, "local.settings.json"), []byte(settings), 0o644); err != nil {
		t.Fatal(err)
	}
	set := map[string]string{"FLAGGED": "from a flag"}
	if err := toStartedAzurite(dir, "", "conn", set); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{config.SettingHostStorage: "conn", "CSV_STORAGE": "conn", "FLAGGED": "from a flag"}
	if len(set) != len(want) {
		t.Errorf("settings %v, want %v", set, want)
	}
	for k, v := range want {
		if set[k] != v {
			t.Errorf("%s = %q, want %q", k, set[k], v)
		}
	}
}

// TestUploadDirs: every file under the folder lands in the container under its relative path.
func TestUploadDirs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := azurite.Start(ctx, azurite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	dir := t.TempDir()
	files := map[string]string{"a.csv": "region,units\nnorth,1\n", "2026/11/b.csv": "region,units\nsouth,2\n"}
	for name, content := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	client, err := azblob.NewClientFromConnectionString(srv.ConnectionString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := uploadDirs(ctx, client, seedDirs{"sales": dir})
	if err != nil || n != len(files) {
		t.Fatalf("uploadDirs: %d files, %v; want %d", n, err, len(files))
	}
	for name, content := range files {
		resp, err := client.DownloadStream(ctx, "sales", name, nil)
		if err != nil {
			t.Fatalf("download %s: %v", name, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(b) != content {
			t.Errorf("blob %s = %q (%v), want %q", name, b, err, content)
		}
	}
}
