package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRecord_MatchesAPIFile: api/baton.txt is the public API of the code, so an API change shows
// in review as a change of that file.
func TestRecord_MatchesAPIFile(t *testing.T) {
	lines, err := Record(".", Packages...)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "..", "..", "api", "baton.txt")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v: run make api to write the record, and commit it", err)
	}
	got := strings.Split(strings.TrimSuffix(string(Render(lines)), "\n"), "\n")
	want := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if d := Diff(want, got); d != "" {
		t.Errorf("api/baton.txt is not the public API of the code (+ only in the code, - only in the file):\n%s"+
			"If the change is intended, run make api and commit api/baton.txt.", d)
	}
}

// TestLines_Package: the record of testdata/p, a package with every kind of declaration.
func TestLines_Package(t *testing.T) {
	const path = "github.com/batonfn/baton/internal/tools/apirecord/testdata/p"
	got, err := Record(".", path)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, l := range strings.Split(strings.TrimSpace(wantP), "\n") {
		want = append(want, "pkg "+path+", "+strings.TrimSpace(l))
	}
	if d := Diff(want, got); d != "" {
		t.Errorf("record of testdata/p (+ unexpected, - missing):\n%s", d)
	}
	for i := 1; i < len(got); i++ {
		if got[i-1] >= got[i] {
			t.Errorf("lines not sorted and unique: %q before %q", got[i-1], got[i])
		}
	}
}

// wantP is the record of testdata/p without the "pkg <path>, " prefix of each line. Left out:
// unexported declarations, fields and methods; exported methods of unexported types; the
// parameter and result names.
const wantP = `
const KindA = 0
const KindA Kind
const KindB = 1
const KindB Kind
const Pi = 3.14159  // 314159265358979323846264338327950288419716939937510582097494459/100000000000000000000000000000000000000000000000000000000000000
const Pi ideal-float
const Text = "hello"
const Text ideal-string
const Typed = 7
const Typed Kind
const Untyped = 42
const Untyped ideal-int
func Func(context.Context, io.Reader, ...string) (int, error)
func Map[$0 comparable, $1 Number](map[$0]$1, func($0, $1) $1) []$1
method (*Kind) Set(string)
method (*List[$0, $1]) Push($0)
method (*Point) Move(int, int)
method (*Point) Set(string)
method (Kind) String() string
method (List[$0, $1]) Each(func(int, $0) bool)
method (List[$0, $1]) Key() $1
method (List[$0, $1]) Len() int
method (Point) Deep() int
method (Point) Norm() float64
method (Point) String() string
type Alias = Point
type Empty interface {}
type Handler func(context.Context, ...any) (any, error)
type Kind int
type List[$0 any, $1 comparable] struct
type List[$0 any, $1 comparable] struct, Items []$0
type Number interface { ~int | ~float64 }
type Pair = List[string, int]
type Point struct
type Point struct, Handler func(context.Context, *Point) error
type Point struct, X int
type Point struct, Y int
type Point struct, embedded Kind
type Shape interface { Area, Close }
type Shape interface, Area() float64
type Shape interface, Close() error
type Shape interface, unexported methods
var Anon struct{ A int; b int }
var Ch chan<- <-chan int
var Default Kind
var ErrBroken error
var Grid [3][2]byte
var Table map[string][]*Kind
`

// TestDiff: lines only in got are added (+), lines only in want removed (-), in line order.
func TestDiff(t *testing.T) {
	if d := Diff([]string{"a", "b", "c"}, []string{"a", "b", "c"}); d != "" {
		t.Errorf("Diff of equal records = %q, want none", d)
	}
	got := Diff([]string{"a", "b", "d", "d"}, []string{"b", "c", "d"})
	if want := "- a\n+ c\n- d\n"; got != want {
		t.Errorf("Diff = %q, want %q", got, want)
	}
}
