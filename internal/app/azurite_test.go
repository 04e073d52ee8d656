package app

import (
	"os"
	"testing"

	"github.com/batonfn/baton/internal/tools/azurite"
)

// TestMain stops the package's shared Azurite (started by the API tests) after the tests.
func TestMain(m *testing.M) { os.Exit(azurite.Main(m)) }
