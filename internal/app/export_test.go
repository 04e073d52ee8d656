package app

import "github.com/batonfn/baton/work"

// The built-in jobs' names, as the reference app registers them.
const (
	syntheticName = "synthetic"
	inventoryName = "inventory"
)

// builtins makes the built-in jobs for this package's tests. They are written against the
// public API, which imports this package, so only an external test file can build them: see
// builtins_test.go, whose init sets this.
var builtins func() *work.Registry

// SetBuiltins is how builtins_test.go hands the built-in jobs to this package's tests.
func SetBuiltins(f func() *work.Registry) { builtins = f }

// builtin returns a fresh instance of the named built-in job, as the engine runs it.
func builtin(name string) work.Job {
	j, err := builtins().Lookup(name)
	if err != nil {
		panic(err)
	}
	return j
}
