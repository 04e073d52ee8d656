package scaffold

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Manifest is .baton/generated.json: what wrote the generated files, for which app, and the
// hash of each generated file as written. It names only paths Baton generates (or generated
// before, Retired); ReadManifest refuses any other entry.
type Manifest struct {
	// Baton is the version of Baton that last wrote the files.
	Baton string `json:"baton"`
	// App holds the parameters the files were rendered with.
	App Params `json:"app"`
	// Files maps each generated path to Hash of its content as written. A generated path
	// without an entry is the app's own: sync leaves it alone and check does not compare it.
	Files map[string]string `json:"files"`
}

// Init writes the app described by p into dir, which must not exist or be empty, with a manifest
// naming version as the writer. It returns the paths written.
func Init(dir string, p Params, version string) ([]string, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	files, err := Render(p)
	if err != nil {
		return nil, err
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("init: %s is not empty", dir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("init: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("init: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("init: %w", err)
	}
	defer root.Close()
	m := Manifest{Baton: version, App: p, Files: map[string]string{}}
	var written []string
	for _, f := range files {
		if err := writeFile(root, f); err != nil {
			return written, err
		}
		written = append(written, f.Path)
		if f.Generated {
			m.Files[f.Path] = Hash(f.Content)
		}
	}
	return append(written, ManifestPath), writeManifest(root, m)
}

// SyncOptions tune Sync.
type SyncOptions struct {
	// Force rewrites the generated files the user edited or deleted (their edits are lost);
	// files the app owns (no manifest entry) are still left alone.
	Force bool
}

// SyncReport says what Sync did with each generated file it did not leave as it was.
type SyncReport struct {
	Updated []string // rewritten with this version's content
	Added   []string // new in this version, written
	Removed []string // no longer generated, unedited: deleted
	// Overwritten are the files the user had edited, rewritten (Force).
	Overwritten []string
	// Restored are the files the user had deleted, written again (Force).
	Restored []string
	// Owned are the generated paths the app owns (no manifest entry): left alone.
	Owned []string
	// Skipped are the files left alone, each with why and how to resolve it: the user edited
	// or deleted them (without Force), or edited one this version no longer generates.
	Skipped []Skip
}

// Skip is a file Sync left alone.
type Skip struct{ Path, Reason string }

// Sync brings the generated files of the app in dir to what this version of Baton writes. It
// rewrites those whose content is still what the manifest recorded, and with opt.Force those
// the user edited or deleted too; it never writes a user's file, nor a generated path the app
// owns. Every file is read, written and removed through dir as an os.Root, so neither a
// manifest entry nor a symlink reaches outside dir: such a file is refused, named in the error,
// and the others are still synced. The manifest is updated for what was written, with version
// as the writer.
func Sync(dir, version string, opt SyncOptions) (SyncReport, error) {
	var rep SyncReport
	root, m, files, err := openApp(dir, "sync")
	if err != nil {
		return rep, err
	}
	defer root.Close()
	var errs []error
	want := map[string]bool{}
	for _, f := range files {
		if !f.Generated {
			continue
		}
		want[f.Path] = true
		recorded, listed := m.Files[f.Path]
		cur, err := root.ReadFile(filepath.FromSlash(f.Path))
		exists := err == nil
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fileErr(f.Path, err))
			continue
		}
		edited := exists && Hash(cur) != recorded
		switch {
		case !listed && exists:
			rep.Owned = append(rep.Owned, f.Path)
			continue
		case listed && exists && bytes.Equal(cur, f.Content):
			m.Files[f.Path] = Hash(cur) // already what this version writes, however it got there
			continue
		case listed && !exists && !opt.Force:
			rep.Skipped = append(rep.Skipped, Skip{f.Path, "deleted since Baton wrote it: `go tool baton sync -force` (or git) restores it"})
			continue
		case listed && edited && !opt.Force:
			rep.Skipped = append(rep.Skipped, Skip{f.Path, "edited since Baton wrote it (`go tool baton check` shows the difference): to keep your edits, own it by deleting its entry from " + ManifestPath + "; to take this version's, run `go tool baton sync -force`"})
			continue
		}
		if err := writeFile(root, f); err != nil {
			errs = append(errs, err)
			continue
		}
		m.Files[f.Path] = Hash(f.Content)
		switch {
		case !listed:
			rep.Added = append(rep.Added, f.Path)
		case !exists:
			rep.Restored = append(rep.Restored, f.Path)
		case edited:
			rep.Overwritten = append(rep.Overwritten, f.Path)
		default:
			rep.Updated = append(rep.Updated, f.Path)
		}
	}
	for _, rel := range sortedKeys(m.Files) {
		if want[rel] {
			continue
		}
		cur, err := root.ReadFile(filepath.FromSlash(rel))
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			errs = append(errs, fileErr(rel, err))
			continue // keep the entry: nothing was decided
		case Hash(cur) != m.Files[rel]:
			rep.Skipped = append(rep.Skipped, Skip{rel, "no longer generated, and edited: now yours"})
		default:
			if err := removeFile(root, rel); err != nil {
				errs = append(errs, err)
				continue
			}
			rep.Removed = append(rep.Removed, rel)
		}
		delete(m.Files, rel)
	}
	m.Baton = version
	if err := writeManifest(root, m); err != nil {
		errs = append(errs, err)
	}
	return rep, errors.Join(errs...)
}

// Drift is a generated file that differs from what this version of Baton writes.
type Drift struct {
	Path, Problem string
	// Diff is a unified diff from what this version writes to the file on disk, bounded to a
	// few dozen lines; empty unless both exist.
	Diff string
}

// CheckReport is what Inspect found.
type CheckReport struct {
	// Drifts are the generated files that differ from what this version writes.
	Drifts []Drift
	// Owned are the generated paths the app owns (on disk, no manifest entry): not compared.
	Owned []string
}

// Check compares the generated files of the app in dir with what this version of Baton writes
// and returns every difference (none: the app is in sync); files the app owns are no
// difference. See Inspect.
func Check(dir string) ([]Drift, error) {
	rep, err := Inspect(dir)
	return rep.Drifts, err
}

// Inspect compares the generated files of the app in dir with what this version of Baton
// writes: it reports each that differs, is missing, is new or is no longer generated, and each
// the app owns. Files are read through dir as an os.Root: one a symlink leads outside dir is
// named in the error, never read.
func Inspect(dir string) (CheckReport, error) {
	var rep CheckReport
	root, m, files, err := openApp(dir, "check")
	if err != nil {
		return rep, err
	}
	defer root.Close()
	var errs []error
	want := map[string]bool{}
	for _, f := range files {
		if !f.Generated {
			continue
		}
		want[f.Path] = true
		recorded, listed := m.Files[f.Path]
		cur, err := root.ReadFile(filepath.FromSlash(f.Path))
		switch {
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			errs = append(errs, fileErr(f.Path, err))
		case !listed && err == nil:
			rep.Owned = append(rep.Owned, f.Path)
		case !listed:
			rep.Drifts = append(rep.Drifts, Drift{Path: f.Path, Problem: "new in this version of Baton: go tool baton sync writes it"})
		case err != nil:
			rep.Drifts = append(rep.Drifts, Drift{Path: f.Path, Problem: "missing: go tool baton sync -force writes it again"})
		case bytes.Equal(cur, f.Content):
		case Hash(cur) == recorded:
			rep.Drifts = append(rep.Drifts, Drift{f.Path, "differs from what this version of Baton writes (an older one wrote it): go tool baton sync rewrites it", unifiedDiff(f.Path, f.Content, cur)})
		default:
			rep.Drifts = append(rep.Drifts, Drift{f.Path, "differs from what this version of Baton writes, and was edited since Baton wrote it: to keep your edits, own it by deleting its entry from " + ManifestPath + "; to take this version's, run go tool baton sync -force", unifiedDiff(f.Path, f.Content, cur)})
		}
	}
	for _, rel := range sortedKeys(m.Files) {
		if !want[rel] {
			rep.Drifts = append(rep.Drifts, Drift{Path: rel, Problem: "no longer generated by this version of Baton: go tool baton sync removes it (unless you edited it)"})
		}
	}
	return rep, errors.Join(errs...)
}

// ReadManifest reads dir's manifest and refuses it when an entry is not a path Baton
// generates (or Retired): never absolute, never "..", never a user's file.
func ReadManifest(dir string) (Manifest, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return Manifest{}, fmt.Errorf("read the manifest of generated files: %w (is %s an app written by baton init?)", err, dir)
	}
	defer root.Close()
	return loadManifest(root, dir)
}

// openApp opens the app in dir as an os.Root (the caller closes it), reads its manifest and
// renders what this version of Baton generates for it; verb names the command in errors.
func openApp(dir, verb string) (*os.Root, Manifest, []File, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, Manifest{}, nil, fmt.Errorf("%s: %w", verb, err)
	}
	m, err := loadManifest(root, dir)
	if err == nil {
		var files []File
		if files, err = Render(m.App); err == nil {
			return root, m, files, nil
		}
	}
	root.Close()
	return nil, Manifest{}, nil, err
}

func loadManifest(root *os.Root, dir string) (Manifest, error) {
	var m Manifest
	b, err := root.ReadFile(filepath.FromSlash(ManifestPath))
	if err != nil {
		return m, fmt.Errorf("read the manifest of generated files: %w (is %s an app written by baton init?)", err, dir)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s: %w", ManifestPath, err)
	}
	if m.Files == nil {
		m.Files = map[string]string{}
	}
	var errs []error
	for _, rel := range sortedKeys(m.Files) {
		switch {
		case !fs.ValidPath(rel) || rel == "." || strings.Contains(rel, `\`):
			errs = append(errs, fmt.Errorf("%s: refused the entry %q: not a path inside the app (absolute or with ..); Baton lists only the files it generates", ManifestPath, rel))
		case !generates(rel) && !slices.Contains(Retired, rel):
			errs = append(errs, fmt.Errorf("%s: refused the entry %q: not a file Baton generates (delete the entry)", ManifestPath, rel))
		}
	}
	return m, errors.Join(errs...)
}

func writeManifest(root *os.Root, m Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(root, File{Path: ManifestPath, Content: append(b, '\n'), Mode: 0o644})
}

// writeFile writes f inside root, creating its folders.
func writeFile(root *os.Root, f File) error {
	name := filepath.FromSlash(f.Path)
	if d := filepath.Dir(name); d != "." {
		if err := root.MkdirAll(d, 0o755); err != nil {
			return fileErr(f.Path, err)
		}
	}
	if err := root.WriteFile(name, f.Content, f.Mode); err != nil {
		return fileErr(f.Path, err)
	}
	if err := root.Chmod(name, f.Mode); err != nil { // WriteFile keeps an existing file's mode
		return fileErr(f.Path, err)
	}
	return nil
}

// removeFile removes rel inside root, then its folders as long as they are empty.
func removeFile(root *os.Root, rel string) error {
	if err := root.Remove(filepath.FromSlash(rel)); err != nil {
		return fileErr(rel, err)
	}
	for d := path.Dir(rel); d != "."; d = path.Dir(d) {
		fi, err := root.Lstat(filepath.FromSlash(d))
		if err != nil || !fi.IsDir() || root.Remove(filepath.FromSlash(d)) != nil {
			break // a symlink, or not empty
		}
	}
	return nil
}

// fileErr names rel in err, and says so when the path leads out of the app's folder.
func fileErr(rel string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	if strings.Contains(err.Error(), "path escapes") {
		return fmt.Errorf("%s: refused: a symlink on its path leads out of the app's folder (%w)", rel, err)
	}
	return fmt.Errorf("%s: %w", rel, err)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
