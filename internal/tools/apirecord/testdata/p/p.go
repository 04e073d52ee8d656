// Package p exercises every kind of declaration the API record lists, and some it must not.
package p

import (
	"context"
	"io"
)

// Constants: typed, untyped, iota.
const (
	Untyped      = 42
	Text         = "hello"
	Typed   Kind = 7
	Pi           = 3.14159265358979323846264338327950288419716939937510582097494459
)

// Kind is a named basic type with methods.
type Kind int

const (
	KindA Kind = iota
	KindB
)

func (k Kind) String() string { return "" }
func (k *Kind) Set(s string)  {}
func (k Kind) hidden()        {}

var (
	Default       = KindB
	ErrBroken     error
	Table         map[string][]*Kind
	Ch            chan<- (<-chan int)
	Grid          [3][2]byte
	Anon          struct{ A, b int }
	unexportedVar int
)

// Func has names on its parameters and results; the record drops them.
func Func(ctx context.Context, r io.Reader, opts ...string) (n int, err error) { return 0, nil }

func unexported() {}

// Map is generic with a type-set constraint.
func Map[K comparable, V Number](m map[K]V, f func(K, V) V) []V { return nil }

// Number is a constraint interface.
type Number interface {
	~int | ~float64
}

// Shape is an interface with exported, unexported and embedded methods.
type Shape interface {
	io.Closer
	Area() float64
	scale(float64)
}

// Empty is the empty interface.
type Empty interface{}

// Point is a struct with exported, unexported and embedded fields.
type Point struct {
	X, Y  int
	label string
	Kind
	*inner
	Handler func(ctx context.Context, p *Point) error
}

func (p Point) Norm() float64    { return 0 }
func (p *Point) Move(dx, dy int) {}

type inner struct{ Depth int }

// Promoted to Point through the embedded *inner.
func (i *inner) Deep() int { return i.Depth }

// List is a generic struct with methods.
type List[T any, C comparable] struct {
	Items []T
	key   C
}

func (l *List[T, C]) Push(v T)              {}
func (l List[T, C]) Len() int               { return len(l.Items) }
func (l List[T, C]) Key() C                 { return l.key }
func (l *List[T, C]) push(v T)              {}
func (l List[T, C]) Each(func(int, T) bool) {}

// Handler is a func type; Alias an alias; Pair an alias of an instantiation.
type (
	Handler func(context.Context, ...any) (any, error)
	Alias   = Point
	Pair    = List[string, int]
	hidden  struct{}
)

func (hidden) Exported() {}
