package inventory_test

import (
	"os"
	"testing"

	"github.com/batonfn/baton/internal/tools/azurite"
)

// TestMain stops the package's shared Azurite after the tests.
func TestMain(m *testing.M) { os.Exit(azurite.Main(m)) }
