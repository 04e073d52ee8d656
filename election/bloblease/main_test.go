package bloblease

import (
	"flag"
	"os"
	"testing"

	"github.com/batonfn/baton/internal/azurite"
)

// TestMain stops the package's shared Azurite after the tests.
//
// The lease tests against Azurite spend most of their time waiting for 15 s leases to lapse,
// not using CPU, so unless -parallel is given they may overlap more than GOMAXPROCS (2 on the
// CI machine) would allow; that keeps the package's test time near the longest such test.
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", "4")
	}
	os.Exit(azurite.Main(m))
}
