package election_test

import (
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/election"
	"github.com/batonfn/baton/internal/engine/election/electiontest"
)

// The in-memory lock keeps the same contract as the blob lease (election/bloblease runs it on
// Azurite).
func TestMemoryLock_Contract(t *testing.T) {
	electiontest.RunLockContract(t, func(t *testing.T) election.Lock { return election.NewMemoryLock(15 * time.Second) })
}
