// Package scaffold writes and maintains a Baton app's files: `baton init` writes a new app,
// `baton sync` rewrites the generated files after an upgrade of Baton, `baton check` reports
// those that differ from what this version of Baton writes.
//
// An app's files are of two kinds. The user's own (go.mod, main.go, the example job and its
// test, README.md, .gitignore, local.settings.example.json) are written once by init and never
// touched again. The generated ones (host.json, the function folders, azure.yaml, infra/,
// scripts/, the Makefile, package.json and package-lock.json) are Baton's: most are Baton's own
// files adapted to the app (Copied, rules), so they cannot drift from what Baton itself runs and
// deploys. Those whose format has comments open with Marker; JSON has none, so the manifest
// .baton/generated.json lists every generated path with the SHA-256 of what was written: sync
// rewrites a file only while it still has that hash (the user has not edited it) unless forced,
// and check shows a diff for each that differs. A user who wants to own a generated file deletes
// its entry: sync leaves it alone and check reports it as the app's, not as drift.
//
// Sync and check stay inside the app's folder: the manifest may name only paths Baton generates
// (ReadManifest refuses any other), and every file is read, written and removed through an
// os.Root, so that no symlink leads out.
package scaffold

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"text/template"
)

//go:generate go run ./gen

//go:embed files templates
var embedded embed.FS

// ManifestPath is where the manifest of generated files lives, relative to the app root.
const ManifestPath = ".baton/generated.json"

// PlaceholderVersion is the version go.mod requires when a replace directive supplies Baton.
const PlaceholderVersion = "v0.0.0-00010101000000-000000000000"

// BatonModule is the module path an app requires.
const BatonModule = "github.com/batonfn/baton"

// Params describe the app. Module is required.
type Params struct {
	// Module is the app's Go module path (e.g. github.com/you/nightly).
	Module string `json:"module"`
	// Name is the app's name: its handler binary (host.json defaultExecutablePath), the azd
	// project and the prefix of its Azure resource names. Lowercase letters, digits and
	// hyphens, starting with a letter, at most 20 characters (Azure name limits); default: the
	// last element of Module, when that fits.
	Name string `json:"name"`
	// BatonVersion is the version of Baton go.mod requires (default: a placeholder that only a
	// Replace can satisfy).
	BatonVersion string `json:"-"`
	// Replace, when set, adds `replace github.com/batonfn/baton => <Replace>` to go.mod (a local
	// checkout of Baton).
	Replace string `json:"-"`
}

var validName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,19}$`)

// DefaultName derives an app name from a module path, or "" when its last element does not fit.
func DefaultName(module string) string {
	n := strings.ToLower(path.Base(module))
	if !validName.MatchString(n) {
		return ""
	}
	return n
}

// Validate fills in defaults and reports every problem, naming the field.
func (p *Params) Validate() error {
	var errs []error
	if p.Module == "" {
		errs = append(errs, errors.New("module: required (the app's Go module path)"))
	}
	if p.Name == "" {
		p.Name = DefaultName(p.Module)
	}
	if !validName.MatchString(p.Name) {
		errs = append(errs, fmt.Errorf("name %q: want lowercase letters, digits and hyphens, starting with a letter, at most 20 characters", p.Name))
	}
	if p.BatonVersion == "" {
		p.BatonVersion = PlaceholderVersion
	}
	return errors.Join(errs...)
}

// File is one file an app gets.
type File struct {
	Path      string // slash-separated, relative to the app root
	Content   []byte
	Generated bool // Baton's (listed in the manifest), else the user's
	Mode      fs.FileMode
}

// templateFiles are the files not copied from Baton: text/template sources under templates/
// (with a ".tmpl" suffix), and whether each is generated.
var templateFiles = map[string]bool{
	"Makefile":       true,
	"go.mod":         false,
	"main.go":        false,
	"primes.go":      false,
	"primes_test.go": false,
	"README.md":      false,
	".gitignore":     false,
}

// copiedGenerated reports whether the copy of Baton's file rel is generated:
// local.settings.example.json is where the user sets the job's params, so it is theirs.
func copiedGenerated(rel string) bool { return rel != "local.settings.example.json" }

// generates reports whether this version of Baton generates the file at rel.
func generates(rel string) bool {
	if gen, ok := templateFiles[rel]; ok {
		return gen
	}
	return slices.Contains(Copied, rel) && copiedGenerated(rel)
}

// Render returns every file of the app described by p (validated), sorted by path.
func Render(p Params) ([]File, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var files []File
	for _, rel := range Copied {
		b, err := embedded.ReadFile("files/" + rel)
		if err != nil {
			return nil, err
		}
		b, err = adapt(rel, b, p.Name)
		if err != nil {
			return nil, err
		}
		gen := copiedGenerated(rel)
		if gen {
			b = mark(rel, b)
		}
		files = append(files, File{Path: rel, Content: b, Generated: gen, Mode: fileMode(rel)})
	}
	data := struct {
		Params
		GoVersion string
	}{p, strings.TrimPrefix(runtime.Version(), "go")}
	for rel, gen := range templateFiles {
		src, err := embedded.ReadFile("templates/" + strings.TrimPrefix(rel, ".") + ".tmpl")
		if err != nil {
			return nil, err
		}
		t, err := template.New(rel).Delims("[[", "]]").Parse(string(src))
		if err != nil {
			return nil, fmt.Errorf("template %s: %w", rel, err)
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, data); err != nil {
			return nil, fmt.Errorf("template %s: %w", rel, err)
		}
		files = append(files, File{Path: rel, Content: buf.Bytes(), Generated: gen, Mode: 0o644})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files, nil
}

// adapt applies rel's rules to b.
func adapt(rel string, b []byte, name string) ([]byte, error) {
	s := string(b)
	for _, r := range rules[rel] {
		if !strings.Contains(s, r.Old) {
			return nil, fmt.Errorf("scaffold: %s no longer contains %q: update its rule in rules.go", rel, r.Old)
		}
		s = strings.ReplaceAll(s, r.Old, strings.ReplaceAll(r.New, appName, name))
	}
	return []byte(s), nil
}

// Marker opens every generated file whose format has comments (the convention go vet, linters
// and GitHub recognise); JSON files have none, and the manifest alone marks them.
const Marker = "Code generated by baton init; DO NOT EDIT."

// mark puts Marker in the comment syntax of rel's format, after a first line that must stay
// first (a #! line, a YAML modeline); other formats are returned as they are.
func mark(rel string, b []byte) []byte {
	var line string
	switch path.Ext(rel) {
	case ".bicep":
		line = "// " + Marker
	case ".sh", ".ps1", ".yaml":
		line = "# " + Marker
	default:
		return b
	}
	s := string(b)
	if strings.HasPrefix(s, "#!") || strings.HasPrefix(s, "# yaml-language-server:") {
		first, rest, _ := strings.Cut(s, "\n")
		return []byte(first + "\n" + line + "\n" + rest)
	}
	return []byte(line + "\n" + s)
}

// fileMode: the shell scripts are executable (azd runs them as hooks).
func fileMode(rel string) fs.FileMode {
	if strings.HasSuffix(rel, ".sh") {
		return 0o755
	}
	return 0o644
}

// Hash is the manifest's hash of a file's content.
func Hash(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
