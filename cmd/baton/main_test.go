package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommands: init writes an app, check exits 0 on it and 1 once a generated file drifts,
// sync names the user-edited file it skipped and leaves it as the user wrote it.
func TestCommands(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "app")
	var out, errOut strings.Builder
	if code := run(ctx, []string{"init", dir, "-module", "example.com/app", "-replace", "../..", "-tidy=false"}, &out, &errOut); code != 0 {
		t.Fatalf("init: exit %d: %s%s", code, out.String(), errOut.String())
	}
	if code := run(ctx, []string{"check", "-C", dir}, &out, &errOut); code != 0 {
		t.Fatalf("check of a fresh app: exit %d: %s%s", code, out.String(), errOut.String())
	}
	host := filepath.Join(dir, "host.json")
	if err := os.WriteFile(host, []byte(`{"version":"2.0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := run(ctx, []string{"check", "-C", dir}, &out, &errOut); code != 1 || !strings.Contains(out.String(), "host.json: differs") {
		t.Errorf("check with host.json drifted: exit %d, output %q; want 1 naming host.json", code, out.String())
	}
	out.Reset()
	if code := run(ctx, []string{"sync", "-C", dir}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "skipped host.json") {
		t.Errorf("sync: exit %d, output %q; want host.json named as skipped", code, out.String())
	}
	if b, _ := os.ReadFile(host); string(b) != `{"version":"2.0"}` {
		t.Errorf("sync rewrote the user's host.json: %s", b)
	}
}

// TestInit_DevelopmentBuildNeedsReplace: a baton built from a checkout cannot name a version
// to require, so init asks for -replace instead of writing an app that cannot build.
func TestInit_DevelopmentBuildNeedsReplace(t *testing.T) {
	var out, errOut strings.Builder
	dir := filepath.Join(t.TempDir(), "app")
	code := run(context.Background(), []string{"init", dir, "-module", "example.com/app"}, &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "-replace") {
		t.Errorf("init from a development build: exit %d, stderr %q; want 1 asking for -replace", code, errOut.String())
	}
	if _, err := os.Stat(dir); err == nil {
		t.Error("init wrote the app anyway")
	}
}
