package main

import (
	"bytes"
	"errors"
	"fmt"
	"go/constant"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
)

// Header opens the record file; it says what the file is and how to regenerate it.
const Header = `# The public API of github.com/batonfn/baton: every exported identifier of the packages an app
# imports, one per line with its signature, sorted (the style of Go's api/go1.txt). Generated: after
# an intended API change, run make api (go run ./internal/tools/apirecord) and commit the result.`

// Packages are the public packages the record covers.
var Packages = []string{
	"github.com/batonfn/baton",
	"github.com/batonfn/baton/batontest",
	"github.com/batonfn/baton/work/inventory",
	"github.com/batonfn/baton/work/synthetic",
}

// Record returns the sorted API lines of the packages (import paths), read from the export data
// `go list -export` builds for them, run in dir (a directory of the module that holds them).
func Record(dir string, paths ...string) ([]string, error) {
	cmd := exec.Command("go", append([]string{"list", "-export", "-f", "{{.ImportPath}}\t{{.Export}}"}, paths...)...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("go list -export: %v\n%s", err, ee.Stderr)
		}
		return nil, fmt.Errorf("go list -export: %v", err)
	}
	exports := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, file, _ := strings.Cut(line, "\t")
		if file == "" {
			return nil, fmt.Errorf("go list -export: no export data for %s", path)
		}
		exports[path] = file
	}
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
	var lines []string
	for _, path := range paths {
		pkg, err := imp.Import(path)
		if err != nil {
			return nil, err
		}
		lines = append(lines, Lines(pkg)...)
	}
	sort.Strings(lines)
	return lines, nil
}

// Render returns the record file's content: Header, then the lines, each ending in a newline.
func Render(lines []string) []byte {
	var b bytes.Buffer
	b.WriteString(Header + "\n")
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	return b.Bytes()
}

// Diff compares two records line by line: "+ line" for each line only in got, "- line" for each
// only in want, sorted by line. It returns "" when both hold the same lines.
func Diff(want, got []string) string {
	n := map[string]int{}
	for _, l := range got {
		n[l]++
	}
	for _, l := range want {
		n[l]--
	}
	keys := make([]string, 0, len(n))
	for l, c := range n {
		if c != 0 {
			keys = append(keys, l)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, l := range keys {
		sign := "+ "
		if n[l] < 0 {
			sign = "- "
		}
		for range max(n[l], -n[l]) {
			b.WriteString(sign + l + "\n")
		}
	}
	return b.String()
}

// Lines returns the API lines of one package, sorted: its exported constants, variables,
// functions and types; the exported fields of its exported structs; the exported methods in the
// method sets of its exported types and of pointers to them (promoted ones included); the
// methods of its exported interfaces. Type parameters are written $0, $1, … by position, and
// parameter and result names are left out, so renaming one is not an API change.
func Lines(pkg *types.Package) []string {
	w := &writer{pkg: pkg}
	for _, name := range pkg.Scope().Names() {
		obj := pkg.Scope().Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch obj := obj.(type) {
		case *types.Const:
			w.emit("const %s %s", name, w.typeString(obj.Type()))
			short, exact := obj.Val().String(), obj.Val().ExactString()
			if obj.Val().Kind() == constant.String || short == exact {
				w.emit("const %s = %s", name, exact)
			} else {
				w.emit("const %s = %s  // %s", name, short, exact)
			}
		case *types.Var:
			w.emit("var %s %s", name, w.typeString(obj.Type()))
		case *types.Func:
			sig := obj.Type().(*types.Signature)
			w.emit("func %s%s%s", name, w.typeParams(sig.TypeParams(), true), w.signature(sig))
		case *types.TypeName:
			w.emitType(obj)
		}
	}
	sort.Strings(w.lines)
	return w.lines
}

type writer struct {
	pkg   *types.Package
	lines []string
}

func (w *writer) emit(format string, args ...any) {
	w.lines = append(w.lines, "pkg "+w.pkg.Path()+", "+fmt.Sprintf(format, args...))
}

func (w *writer) emitType(obj *types.TypeName) {
	name := obj.Name()
	if alias, ok := obj.Type().(*types.Alias); ok {
		w.emit("type %s%s = %s", name, w.typeParams(alias.TypeParams(), true), w.typeString(types.Unalias(alias)))
		return
	}
	if obj.IsAlias() { // an alias of a predeclared type, when aliases are not materialized
		w.emit("type %s = %s", name, w.typeString(obj.Type()))
		return
	}
	named := obj.Type().(*types.Named)
	decl := name + w.typeParams(named.TypeParams(), true)
	switch u := named.Underlying().(type) {
	case *types.Struct:
		w.emit("type %s struct", decl)
		for i := range u.NumFields() {
			f := u.Field(i)
			switch {
			case !f.Exported():
			case f.Embedded():
				w.emit("type %s struct, embedded %s", decl, w.typeString(f.Type()))
			default:
				w.emit("type %s struct, %s %s", decl, f.Name(), w.typeString(f.Type()))
			}
		}
	case *types.Interface:
		var elems []string
		unexported := false
		for i := range u.NumMethods() {
			m := u.Method(i)
			if !m.Exported() {
				unexported = true
				continue
			}
			elems = append(elems, m.Name())
			w.emit("type %s interface, %s%s", decl, m.Name(), w.signature(m.Type().(*types.Signature)))
		}
		if unexported {
			w.emit("type %s interface, unexported methods", decl)
		}
		for i := range u.NumEmbeddeds() { // type-set terms; embedded interfaces' methods are listed above
			if e, ok := u.EmbeddedType(i).Underlying().(*types.Interface); !ok || !e.IsMethodSet() {
				elems = append(elems, w.typeString(u.EmbeddedType(i)))
			}
		}
		sort.Strings(elems)
		if len(elems) == 0 {
			w.emit("type %s interface {}", decl)
		} else {
			w.emit("type %s interface { %s }", decl, strings.Join(elems, ", "))
		}
		return // an interface's methods are the lines above
	default:
		w.emit("type %s %s", decl, w.typeString(u))
	}
	recv := name + w.typeParams(named.TypeParams(), false)
	value := map[string]bool{}
	ms := types.NewMethodSet(named)
	for i := range ms.Len() {
		if m := ms.At(i); m.Obj().Exported() {
			value[m.Obj().Name()] = true
			w.emit("method (%s) %s%s", recv, m.Obj().Name(), w.signature(m.Type().(*types.Signature)))
		}
	}
	ms = types.NewMethodSet(types.NewPointer(named))
	for i := range ms.Len() {
		if m := ms.At(i); m.Obj().Exported() && !value[m.Obj().Name()] {
			w.emit("method (*%s) %s%s", recv, m.Obj().Name(), w.signature(m.Type().(*types.Signature)))
		}
	}
}

// typeParams writes a type parameter list, "[$0 any, $1 comparable]" (or "[$0, $1]" without
// constraints), or "" for none.
func (w *writer) typeParams(tps *types.TypeParamList, constraints bool) string {
	if tps.Len() == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('[')
	for i := range tps.Len() {
		if i > 0 {
			b.WriteString(", ")
		}
		w.writeType(&b, tps.At(i))
		if constraints {
			b.WriteByte(' ')
			w.writeType(&b, tps.At(i).Constraint())
		}
	}
	b.WriteByte(']')
	return b.String()
}

// signature writes a signature without its receiver and names: "(int, ...string) (T, error)".
func (w *writer) signature(sig *types.Signature) string {
	var b strings.Builder
	w.writeSignature(&b, sig)
	return b.String()
}

func (w *writer) writeSignature(b *strings.Builder, sig *types.Signature) {
	b.WriteByte('(')
	for i := range sig.Params().Len() {
		if i > 0 {
			b.WriteString(", ")
		}
		t := sig.Params().At(i).Type()
		if sig.Variadic() && i == sig.Params().Len()-1 {
			b.WriteString("...")
			if s, ok := t.Underlying().(*types.Slice); ok {
				t = s.Elem()
			}
		}
		w.writeType(b, t)
	}
	b.WriteByte(')')
	switch res := sig.Results(); res.Len() {
	case 0:
	case 1:
		b.WriteByte(' ')
		w.writeType(b, res.At(0).Type())
	default:
		b.WriteString(" (")
		for i := range res.Len() {
			if i > 0 {
				b.WriteString(", ")
			}
			w.writeType(b, res.At(i).Type())
		}
		b.WriteByte(')')
	}
}

func (w *writer) typeString(t types.Type) string {
	var b strings.Builder
	w.writeType(&b, t)
	return b.String()
}

func (w *writer) writeType(b *strings.Builder, t types.Type) {
	switch t := t.(type) {
	case *types.Basic:
		switch t.Kind() {
		case types.UnsafePointer:
			b.WriteString("unsafe.Pointer")
		case types.UntypedBool:
			b.WriteString("ideal-bool")
		case types.UntypedInt:
			b.WriteString("ideal-int")
		case types.UntypedRune:
			b.WriteString("ideal-char")
		case types.UntypedFloat:
			b.WriteString("ideal-float")
		case types.UntypedComplex:
			b.WriteString("ideal-complex")
		case types.UntypedString:
			b.WriteString("ideal-string")
		default:
			b.WriteString(t.Name())
		}
	case *types.Named:
		w.writeName(b, t.Obj(), t.TypeArgs())
	case *types.Alias:
		w.writeName(b, t.Obj(), t.TypeArgs())
	case *types.TypeParam:
		b.WriteString("$" + strconv.Itoa(t.Index()))
	case *types.Pointer:
		b.WriteByte('*')
		w.writeType(b, t.Elem())
	case *types.Slice:
		b.WriteString("[]")
		w.writeType(b, t.Elem())
	case *types.Array:
		fmt.Fprintf(b, "[%d]", t.Len())
		w.writeType(b, t.Elem())
	case *types.Map:
		b.WriteString("map[")
		w.writeType(b, t.Key())
		b.WriteByte(']')
		w.writeType(b, t.Elem())
	case *types.Chan:
		switch t.Dir() {
		case types.SendOnly:
			b.WriteString("chan<- ")
		case types.RecvOnly:
			b.WriteString("<-chan ")
		default:
			b.WriteString("chan ")
		}
		if e, ok := t.Elem().(*types.Chan); ok && t.Dir() == types.SendRecv && e.Dir() == types.RecvOnly {
			b.WriteByte('(')
			w.writeType(b, e)
			b.WriteByte(')')
		} else {
			w.writeType(b, t.Elem())
		}
	case *types.Signature:
		b.WriteString("func")
		w.writeSignature(b, t)
	case *types.Struct:
		if t.NumFields() == 0 {
			b.WriteString("struct{}")
			return
		}
		b.WriteString("struct{ ")
		for i := range t.NumFields() {
			if i > 0 {
				b.WriteString("; ")
			}
			if f := t.Field(i); !f.Embedded() {
				b.WriteString(f.Name() + " ")
			}
			w.writeType(b, t.Field(i).Type())
		}
		b.WriteString(" }")
	case *types.Interface:
		var elems []string
		for i := range t.NumEmbeddeds() {
			elems = append(elems, w.typeString(t.EmbeddedType(i)))
		}
		if t.IsImplicit() && len(elems) == 1 { // a constraint written as its type set: ~int | ~string
			b.WriteString(elems[0])
			return
		}
		for i := range t.NumExplicitMethods() {
			m := t.ExplicitMethod(i)
			elems = append(elems, m.Name()+w.signature(m.Type().(*types.Signature)))
		}
		if len(elems) == 0 {
			b.WriteString("interface{}")
			return
		}
		b.WriteString("interface{ " + strings.Join(elems, "; ") + " }")
	case *types.Union:
		for i := range t.Len() {
			if i > 0 {
				b.WriteString(" | ")
			}
			if t.Term(i).Tilde() {
				b.WriteByte('~')
			}
			w.writeType(b, t.Term(i).Type())
		}
	default:
		b.WriteString(types.TypeString(t, w.qualifier))
	}
}

// writeName writes a named type or alias: unqualified when declared in the recorded package or
// predeclared, else qualified by its package's name; then its type arguments, if any.
func (w *writer) writeName(b *strings.Builder, obj *types.TypeName, args *types.TypeList) {
	if q := w.qualifier(obj.Pkg()); q != "" {
		b.WriteString(q + ".")
	}
	b.WriteString(obj.Name())
	if args.Len() > 0 {
		b.WriteByte('[')
		for i := range args.Len() {
			if i > 0 {
				b.WriteString(", ")
			}
			w.writeType(b, args.At(i))
		}
		b.WriteByte(']')
	}
}

func (w *writer) qualifier(p *types.Package) string {
	if p == nil || p == w.pkg {
		return ""
	}
	return p.Name()
}
