// Package deadletter opens the dead-letter queues of Baton's work and control queues on the
// transport the settings name (the Service Bus dead-letter subqueues, or the Storage poison
// queues), for the HTTP API's counts and the `baton deadletters` command. It is wiring: the
// one place besides the handler that turns settings into dead-letter readers.
package deadletter

import (
	"context"
	"errors"
	"fmt"

	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/internal/engine/transport/servicebus"
	"github.com/batonfn/baton/internal/engine/transport/storagequeue"
)

// Queues are the dead-letter queues of the work and control queues, in that order.
type Queues struct {
	List  []transport.DeadLetterQueue
	close func(context.Context) error
}

// Open builds the readers of cfg's work and control queues' dead letters. No network I/O
// happens here: on Service Bus the client connects on the first count (its own AMQP
// connection, apart from the senders'), so an app whose dead letters nobody asks about
// opens nothing.
func Open(cfg config.Config) (*Queues, error) {
	names := []string{cfg.WorkQueue, cfg.ControlQueue}
	switch cfg.Transport {
	case config.TransportQueue:
		qs, err := azclient.Queue(cfg.Storage, nil)
		if err != nil {
			return nil, err
		}
		q := &Queues{close: func(context.Context) error { return nil }}
		for _, n := range names {
			q.List = append(q.List, storagequeue.NewPoisonQueue(qs, n))
		}
		return q, nil
	case config.TransportServiceBus:
		client, err := azclient.ServiceBus(cfg.ServiceBus, nil)
		if err != nil {
			return nil, err
		}
		q := &Queues{}
		var dlqs []*servicebus.DeadLetterQueue
		for _, n := range names {
			d, err := servicebus.NewDeadLetterQueue(client, n, servicebus.DeadLetterQueueOptions{})
			if err != nil {
				return nil, errors.Join(fmt.Errorf("%s: %w", config.SettingServiceBus, err), client.Close(context.Background()))
			}
			dlqs = append(dlqs, d)
			q.List = append(q.List, d)
		}
		q.close = func(ctx context.Context) error {
			var errs []error
			for _, d := range dlqs {
				errs = append(errs, d.Close(ctx))
			}
			return errors.Join(append(errs, client.Close(ctx))...)
		}
		return q, nil
	}
	return nil, fmt.Errorf("%s=%q is not a transport", config.SettingTransport, cfg.Transport)
}

// Find returns the dead-letter queue of the queue named name.
func (q *Queues) Find(name string) (transport.DeadLetterQueue, error) {
	var known []string
	for _, d := range q.List {
		if d.Queue() == name {
			return d, nil
		}
		known = append(known, d.Queue())
	}
	return nil, fmt.Errorf("queue %q is neither the work nor the control queue %v", name, known)
}

// Close closes the receivers and the client.
func (q *Queues) Close(ctx context.Context) error { return q.close(ctx) }
