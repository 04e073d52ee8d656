package app

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/deadletter"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/work"
)

// deadLettersMain runs `baton deadletters ...` (args after the binary's name) until done or
// ctx ends, and returns the process's exit code.
func deadLettersMain(ctx context.Context, args []string, o Options) int {
	if err := deadLetters(ctx, args, o.Getenv, o.Stdout); err != nil {
		fmt.Fprintln(o.Stderr, "baton:", err)
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	return 0
}

// deadLettersUsage is printed for a command line deadLetters does not know.
const deadLettersUsage = `usage:
  baton deadletters                          count each queue's dead letters
  baton deadletters peek [-queue Q] [-n N]   print up to N dead letters (default 10), one JSON object a line
  baton deadletters purge -queue Q           delete every dead letter of queue Q
Settings come from the environment, as for the app (see docs/deploy.md).
`

// errUsage is a command line that names no known command.
var errUsage = errors.New("bad command line")

// deadLetters runs `baton deadletters [count|peek|purge] [flags]` (args after the binary's
// name) with the settings getenv reads, writing to out. It counts, shows and deletes the
// messages the work and control queues gave up on: the Service Bus dead-letter subqueues, or
// the Storage queues' "<queue>-poison". It reads the same settings as the app (the transport,
// the queue names and their connection) but needs neither the schedule nor the job; reading
// and purging take the right to receive from the queue (Azure Service Bus Data Receiver).
func deadLetters(ctx context.Context, args []string, getenv config.Getenv, out io.Writer) error {
	if len(args) == 0 || args[0] != "deadletters" {
		fmt.Fprint(out, deadLettersUsage)
		return errUsage
	}
	args = args[1:]
	sub := "count"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	if sub != "count" && sub != "peek" && sub != "purge" {
		fmt.Fprint(out, deadLettersUsage)
		return fmt.Errorf("%w: unknown command %q", errUsage, sub)
	}
	fs := flag.NewFlagSet("baton deadletters "+sub, flag.ContinueOnError)
	fs.SetOutput(out)
	queue := fs.String("queue", "", "the work or control queue (peek: default both)")
	n := fs.Int("n", 10, "peek: the most dead letters to print per queue")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := deadLetterSettings(getenv)
	if err != nil {
		return err
	}
	if sub == "purge" && *queue == "" {
		return fmt.Errorf("purge needs -queue: name the queue whose dead letters to delete (%s or %s)", cfg.WorkQueue, cfg.ControlQueue)
	}
	queues, err := deadletter.Open(cfg)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = queues.Close(cctx)
	}()
	picked := queues.List
	if *queue != "" {
		q, err := queues.Find(*queue)
		if err != nil {
			return err
		}
		picked = []transport.DeadLetterQueue{q}
	}
	switch sub {
	case "count":
		return countDeadLetters(ctx, picked, out)
	case "peek":
		return peekDeadLetters(ctx, picked, *n, out)
	}
	purged, err := picked[0].Purge(ctx)
	fmt.Fprintf(out, "purged %d dead letters of queue %s\n", purged, *queue)
	return err
}

// deadLetterSettings reads the settings the dead-letter commands need, with the app's
// defaults and names (a subset of config.Load, which also wants the schedule and the job).
func deadLetterSettings(getenv config.Getenv) (config.Config, error) {
	or := func(name, def string) string {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			return v
		}
		return def
	}
	cfg := config.Config{
		Transport:    config.Transport(strings.ToLower(or(config.SettingTransport, string(config.DefaultTransport)))),
		WorkQueue:    or(config.SettingWorkQueue, config.DefaultWorkQueue),
		ControlQueue: or(config.SettingControlQueue, config.DefaultControlQueue),
	}
	var err error
	switch cfg.Transport {
	case config.TransportQueue:
		cfg.Storage, err = config.ParseStorageConnection(or(config.SettingStorage, config.SettingHostStorage), getenv)
	case config.TransportServiceBus:
		cfg.ServiceBus, err = config.ParseServiceBusConnection(config.SettingServiceBus, getenv)
	default:
		err = fmt.Errorf("%s=%q is not a transport: use %q or %q", config.SettingTransport, cfg.Transport,
			config.TransportServiceBus, config.TransportQueue)
	}
	return cfg, err
}

// countDeadLetters prints one line per queue: its name and how many dead letters it holds.
func countDeadLetters(ctx context.Context, queues []transport.DeadLetterQueue, out io.Writer) error {
	var errs []error
	for _, q := range queues {
		c, err := q.Count(ctx)
		if err != nil {
			errs = append(errs, err)
			fmt.Fprintf(out, "%s\tnot counted: %v\n", q.Queue(), err)
			continue
		}
		atLeast := ""
		if c.AtLeast {
			atLeast = "at least "
		}
		fmt.Fprintf(out, "%s\t%s%d dead letters\n", q.Queue(), atLeast, c.Count)
	}
	return errors.Join(errs...)
}

// peekLine is one dead letter as peek prints it: the run and partition it belongs to (from
// its envelope, when the body is one) next to what the broker recorded.
type peekLine struct {
	Queue string `json:"queue"`
	transport.DeadLetter
	Body json.RawMessage `json:"body"`
	Kind string          `json:"kind,omitempty"`
	Run  string          `json:"run,omitempty"`
	Part *int            `json:"part,omitempty"`
	// Count is a bundle's number of partitions, Part onwards.
	Count int `json:"count,omitempty"`
}

// peekDeadLetters prints up to n dead letters of each queue, one JSON object a line.
func peekDeadLetters(ctx context.Context, queues []transport.DeadLetterQueue, n int, out io.Writer) error {
	enc := json.NewEncoder(out)
	for _, q := range queues {
		letters, err := q.Peek(ctx, n)
		if err != nil {
			return err
		}
		for _, d := range letters {
			if err := enc.Encode(newPeekLine(q.Queue(), d)); err != nil {
				return err
			}
		}
	}
	return nil
}

func newPeekLine(queue string, d transport.DeadLetter) peekLine {
	line := peekLine{Queue: queue, DeadLetter: d}
	if json.Valid(d.Body) {
		line.Body = d.Body
	} else {
		line.Body, _ = json.Marshal(string(d.Body))
	}
	if env, err := work.DecodeEnvelope(d.Body); err == nil {
		line.Kind, line.Run = string(env.Kind), env.Run
		if env.Kind == work.KindPartition {
			part := env.Part
			line.Part, line.Count = &part, env.Count
		}
	}
	return line
}
