package bloblease

import (
	"os"
	"testing"

	"github.com/batonfn/baton/internal/tools/azurite"
)

// TestMain stops the package's shared Azurite after the tests; its lease tests mostly wait, so
// they run 4 at a time (azurite.MainWaiting).
func TestMain(m *testing.M) { os.Exit(azurite.MainWaiting(m)) }
