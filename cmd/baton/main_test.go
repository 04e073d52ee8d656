package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batonfn/baton/internal/tools/scaffold"
)

// initApp runs baton init into a new temporary folder and returns the app's folder.
func initApp(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "app")
	var out, errOut strings.Builder
	if code := run(context.Background(), []string{"init", dir, "-module", "example.com/app", "-replace", "../..", "-tidy=false"}, &out, &errOut); code != 0 {
		t.Fatalf("init: exit %d: %s%s", code, out.String(), errOut.String())
	}
	return dir
}

// baton runs the command with args and returns its exit code, stdout and stderr.
func baton(args ...string) (int, string, string) {
	var out, errOut strings.Builder
	code := run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// editManifest applies edit to the files of dir's .baton/generated.json.
func editManifest(t *testing.T, dir string, edit func(files map[string]any)) {
	t.Helper()
	path := filepath.Join(dir, ".baton", "generated.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(m["files"].(map[string]any))
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCommands: init writes an app, check exits 0 on it and 1 once a generated file drifts,
// showing the diff; sync names the user-edited file it skipped with both ways out and leaves it
// as the user wrote it; sync -force overwrites it, naming it, and check is green again.
func TestCommands(t *testing.T) {
	dir := initApp(t)
	if code, out, errOut := baton("check", "-C", dir); code != 0 {
		t.Fatalf("check of a fresh app: exit %d: %s%s", code, out, errOut)
	}
	host := filepath.Join(dir, "host.json")
	generated, err := os.ReadFile(host)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(host, []byte(`{"version":"2.0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ := baton("check", "-C", dir)
	if code != 1 || !strings.Contains(out, "host.json: differs") {
		t.Errorf("check with host.json drifted: exit %d, output %q; want 1 naming host.json", code, out)
	}
	for _, want := range []string{"--- host.json", "+++ host.json", "\n+{\"version\":\"2.0\"}\n", "\n-  \"version\": \"2.0\",\n", "sync -force"} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q (the diff and the way out):\n%s", want, out)
		}
	}
	code, out, _ = baton("sync", "-C", dir)
	if code != 0 || !strings.Contains(out, "skipped     host.json") || !strings.Contains(out, "-force") || !strings.Contains(out, ".baton/generated.json") {
		t.Errorf("sync: exit %d, output %q; want host.json named as skipped, with -force and the manifest as ways out", code, out)
	}
	if b, _ := os.ReadFile(host); string(b) != `{"version":"2.0"}` {
		t.Errorf("sync rewrote the user's host.json: %s", b)
	}
	code, out, _ = baton("sync", "-C", dir, "-force")
	if code != 0 || !strings.Contains(out, "overwritten host.json") {
		t.Errorf("sync -force: exit %d, output %q; want host.json named as overwritten", code, out)
	}
	if b, _ := os.ReadFile(host); string(b) != string(generated) {
		t.Errorf("sync -force left host.json as %s", b)
	}
	if code, out, errOut := baton("check", "-C", dir); code != 0 {
		t.Errorf("check after sync -force: exit %d: %s%s", code, out, errOut)
	}
}

// TestCheck_OwnedFileIsGreen: a generated file whose manifest entry the user deleted is theirs:
// check exits 0 and lists it as theirs, sync leaves it alone, again and again.
func TestCheck_OwnedFileIsGreen(t *testing.T) {
	dir := initApp(t)
	editManifest(t, dir, func(files map[string]any) { delete(files, "host.json") })
	host := filepath.Join(dir, "host.json")
	if err := os.WriteFile(host, []byte(`{"version":"2.0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		code, out, errOut := baton("sync", "-C", dir)
		if code != 0 || !strings.Contains(out, "yours       host.json") || strings.Contains(out, "skipped") {
			t.Errorf("sync with host.json owned: exit %d, output %q %q; want it named as yours", code, out, errOut)
		}
		code, out, errOut = baton("check", "-C", dir)
		if code != 0 || !strings.Contains(out, "host.json: yours") {
			t.Errorf("check with host.json owned: exit %d, output %q %q; want 0, naming it as yours", code, out, errOut)
		}
	}
	if b, _ := os.ReadFile(host); string(b) != `{"version":"2.0"}` {
		t.Errorf("sync rewrote the owned host.json: %s", b)
	}
}

// TestSync_RefusesPathOutside: a manifest entry leading out of the app is refused by name, and
// the file it names is left alone.
func TestSync_RefusesPathOutside(t *testing.T) {
	dir := initApp(t)
	victim := filepath.Join(filepath.Dir(dir), "victim.txt")
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Its hash, as if Baton had written it: an unchecked sync deletes it.
	editManifest(t, dir, func(files map[string]any) { files["../victim.txt"] = scaffold.Hash([]byte("precious")) })
	for _, cmd := range []string{"sync", "check"} {
		if code, out, errOut := baton(cmd, "-C", dir); code != 1 || !strings.Contains(errOut, `"../victim.txt"`) {
			t.Errorf("%s with a ../victim.txt entry: exit %d, output %q %q; want 1 naming the entry", cmd, code, out, errOut)
		}
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious" {
		t.Errorf("the file outside the app after sync: %q, %v; want it untouched", b, err)
	}
}

// TestSync_SymlinkOutside: a generated folder that is a symlink leading out of the app is
// refused by name: nothing is written there.
func TestSync_SymlinkOutside(t *testing.T) {
	dir := initApp(t)
	outside := filepath.Join(filepath.Dir(dir), "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "infra")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../outside", filepath.Join(dir, "infra")); err != nil {
		t.Fatal(err)
	}
	editManifest(t, dir, func(files map[string]any) {
		for rel := range files {
			if strings.HasPrefix(rel, "infra/") {
				delete(files, rel) // as if this version generated infra/ anew
			}
		}
	})
	code, out, errOut := baton("sync", "-C", dir)
	if code != 1 || !strings.Contains(errOut, "infra/main.bicep") {
		t.Errorf("sync through an infra symlink leading outside: exit %d, output %q %q; want 1 naming infra/main.bicep", code, out, errOut)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("sync wrote outside the app: %v", entries)
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
