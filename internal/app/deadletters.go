package app

import (
	"github.com/batonfn/baton/internal/engine/api"
	"github.com/batonfn/baton/internal/engine/transport"
)

// withDeadLetters gives the API the work and control queues' dead letters, whose counts
// GET /api/leader and the dashboard show.
func withDeadLetters(queues []transport.DeadLetterQueue) func(*api.Config) {
	return func(c *api.Config) {
		for _, q := range queues {
			c.DeadLetters = append(c.DeadLetters, q)
		}
	}
}
