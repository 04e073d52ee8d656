package infra_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The alert queries match the handler's log lines by message and read their attributes, so the
// tests read both out of the Go source: a renamed message or attribute key fails them, not the
// alert in production.

// logSite is one slog call with a literal message.
type logSite struct {
	file string
	line int
	msg  string
	keys map[string]bool // the call's own keys, those of every With in its function, and the logger it is derived from
}

// slogBuiltins are the keys slog's JSON handler writes on every line.
var slogBuiltins = []string{"time", "level", "msg"}

// logSourceDirs are the packages whose lines the alerts read, relative to the repository root.
var logSourceDirs = []string{"coordinator", "work", "internal/app", "internal/engine/election"}

// readLogSites parses the non-test Go files of dirs under root and returns every slog call
// (Debug, Info, Warn, Error with a literal message first; LogAttrs with one third) with the
// keys its line carries. Keys come from the call's arguments ("key", value pairs and
// slog.String("key", …) attributes), from every .With(…) in the enclosing function, from the
// With calls of the package's logger helpers it calls (methods named log or logger), and, for
// a function that logs through an invocation's Logger, from the With in the function that
// builds the invocation.
func readLogSites(t *testing.T, root string, dirs []string) []logSite {
	t.Helper()
	fset := token.NewFileSet()
	type pkg struct {
		files   []*ast.File
		helpers map[string]map[string]bool // logger helper method name → its With keys
	}
	pkgs := map[string]*pkg{}
	invocationKeys := map[string]bool{}
	for _, dir := range dirs {
		entries, err := os.ReadDir(filepath.Join(root, dir))
		if err != nil {
			t.Fatal(err)
		}
		p := &pkg{helpers: map[string]map[string]bool{}}
		for _, e := range entries {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(root, dir, e.Name()), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			p.files = append(p.files, f)
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				if fd.Recv != nil && (fd.Name.Name == "log" || fd.Name.Name == "logger") {
					p.helpers[fd.Name.Name] = withKeys(fd.Body)
				}
				if buildsInvocation(fd.Body) {
					for k := range withKeys(fd.Body) {
						invocationKeys[k] = true
					}
				}
			}
		}
		pkgs[dir] = p
	}
	var sites []logSite
	for _, dir := range dirs {
		p := pkgs[dir]
		for _, f := range p.files {
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				fnKeys := withKeys(fd.Body)
				for name, keys := range p.helpers {
					if callsMethod(fd.Body, name) {
						for k := range keys {
							fnKeys[k] = true
						}
					}
				}
				if usesInvocationLogger(fd.Body) {
					for k := range invocationKeys {
						fnKeys[k] = true
					}
				}
				ast.Inspect(fd.Body, func(n ast.Node) bool {
					call, ok := n.(*ast.CallExpr)
					if !ok {
						return true
					}
					sel, ok := call.Fun.(*ast.SelectorExpr)
					if !ok {
						return true
					}
					var msgAt int
					switch sel.Sel.Name {
					case "Debug", "Info", "Warn", "Error":
						msgAt = 0
					case "LogAttrs":
						msgAt = 2
					default:
						return true
					}
					if len(call.Args) <= msgAt {
						return true
					}
					msg, ok := stringLit(call.Args[msgAt])
					if !ok {
						return true
					}
					keys := map[string]bool{}
					for k := range fnKeys {
						keys[k] = true
					}
					for _, k := range argKeys(call.Args[msgAt+1:]) {
						keys[k] = true
					}
					for _, k := range slogBuiltins {
						keys[k] = true
					}
					pos := fset.Position(call.Pos())
					rel, _ := filepath.Rel(root, pos.Filename)
					sites = append(sites, logSite{file: filepath.ToSlash(rel), line: pos.Line, msg: msg, keys: keys})
					return true
				})
			}
		}
	}
	return sites
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// argKeys returns the keys of slog arguments: "key", value pairs and slog.X("key", …) attributes.
func argKeys(args []ast.Expr) []string {
	var keys []string
	for i := 0; i < len(args); i++ {
		if k, ok := stringLit(args[i]); ok {
			keys = append(keys, k)
			i++ // its value
			continue
		}
		if call, ok := args[i].(*ast.CallExpr); ok {
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "slog" && len(call.Args) > 0 {
					if k, ok := stringLit(call.Args[0]); ok {
						keys = append(keys, k)
					}
				}
			}
		}
	}
	return keys
}

// withKeys returns the keys of every .With(…) call in body.
func withKeys(body ast.Node) map[string]bool {
	keys := map[string]bool{}
	ast.Inspect(body, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok {
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "With" {
				for _, k := range argKeys(call.Args) {
					keys[k] = true
				}
			}
		}
		return true
	})
	return keys
}

// callsMethod reports whether body calls x.name(…) for some x.
func callsMethod(body ast.Node, name string) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok {
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == name {
				found = true
			}
		}
		return !found
	})
	return found
}

// buildsInvocation reports whether body builds an invocation{…} (whose Logger it sets).
func buildsInvocation(body ast.Node) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if cl, ok := n.(*ast.CompositeLit); ok {
			if id, ok := cl.Type.(*ast.Ident); ok && id.Name == "invocation" {
				found = true
			}
		}
		return !found
	})
	return found
}

// usesInvocationLogger reports whether body reads inv.Logger.
func usesInvocationLogger(body ast.Node) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Logger" {
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "inv" {
				found = true
			}
		}
		return !found
	})
	return found
}

// sitesOf returns the sites logging msg exactly.
func sitesOf(sites []logSite, msg string) []logSite {
	var out []logSite
	for _, s := range sites {
		if s.msg == msg {
			out = append(out, s)
		}
	}
	return out
}

func TestReadLogSites(t *testing.T) {
	sites := readLogSites(t, repoRoot(t), logSourceDirs)
	// Known lines and the keys they carry, each through a different route: the call's own
	// pairs, a With in the function, the coordinator's log helper, an invocation's Logger, and
	// slog.Attr arguments of LogAttrs.
	for _, c := range []struct {
		msg  string
		keys []string
	}{
		{"run finished", []string{"run", "state", "succeeded", "msg", "level", "time"}},
		{"occurrence recorded", []string{"run", "epoch", "instance", "schedule", "state", "occurrence", "reason"}},
		{"heartbeat: schedules decided", []string{"function", "invocation", "epoch", "decisions"}},
		{"leadership acquired", []string{"holder", "epoch"}},
	} {
		got := sitesOf(sites, c.msg)
		if len(got) == 0 {
			t.Errorf("no log call with message %q in %v", c.msg, logSourceDirs)
			continue
		}
		for _, s := range got {
			for _, k := range c.keys {
				if !s.keys[k] {
					t.Errorf("%s:%d %q: keys %v, want %s among them", s.file, s.line, c.msg, sortedKeys(s.keys), k)
				}
			}
		}
	}
	// A key nobody logs is not invented.
	for _, s := range sitesOf(sites, "run finished") {
		if s.keys["instance"] || s.keys["reason"] {
			t.Errorf("%s:%d run finished: keys %v include instance or reason, which its call does not log", s.file, s.line, sortedKeys(s.keys))
		}
	}
	if slices.ContainsFunc(sites, func(s logSite) bool { return strings.HasSuffix(s.file, "_test.go") }) {
		t.Error("test files were read")
	}
}
