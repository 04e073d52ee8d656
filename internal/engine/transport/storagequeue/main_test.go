package storagequeue

import (
	"os"
	"testing"

	"github.com/batonfn/baton/internal/tools/azurite"
)

func TestMain(m *testing.M) { os.Exit(azurite.Main(m)) }
