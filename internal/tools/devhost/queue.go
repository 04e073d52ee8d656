package devhost

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue/queueerror"
	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/engine/config"
)

// Queue listener constants, from the Storage Queues extension 5.x (see docs/design.md, Host
// protocol).
const (
	// MessageLease is the visibility timeout of a message being processed (the default of
	// Options.MessageLease); it is renewed at half of it while the invocation runs.
	MessageLease = 10 * time.Minute
	// minPollingInterval is the first backoff after an empty poll.
	minPollingInterval = 100 * time.Millisecond
	// DefaultControlPollingInterval is the default Options.ControlPollingInterval: the longest
	// wait between polls of the idle control queue, per instance.
	DefaultControlPollingInterval = 250 * time.Millisecond
	// storageRetryBudget bounds the retries of a delete, release or poison move, so a brief
	// storage outage (an Azurite restart) does not strand a message for its 10-minute lease.
	storageRetryBudget = 30 * time.Second
)

// PoisonSuffix names the poison queue of a queue.
const PoisonSuffix = "-poison"

// queueTrigger is one queueTrigger function: its queue and a listener per instance.
type queueTrigger struct {
	h       *Host
	fn      *Function
	binding string
	name    string
	q       *azqueue.QueueClient
	poison  *azqueue.QueueClient
	opts    QueueOptions
	// shared: one listener for the whole host (the control queue, see
	// Options.ControlPollingInterval).
	shared bool

	poisonOnce sync.Mutex
	poisonMade bool

	// sb is set in the Service Bus delivery mode (servicebus.go).
	sb *sbDelivery

	// faults are the delivery faults armed on the queue (faults.go), oldest first.
	fmu    sync.Mutex
	faults []*Armed
}

// queueNameOf resolves a queue-triggered function's queueName (lower case, as queue names are).
func (h *Host) queueNameOf(fn *Function) (string, error) {
	name, err := h.settings.Resolve(fn.Trigger().Prop("queueName"))
	if err != nil {
		return "", fmt.Errorf("%s queueName: %w", fn.Name, err)
	}
	return strings.ToLower(name), nil
}

func newQueueTrigger(h *Host, fn *Function) (*queueTrigger, error) {
	return newStorageQueueTrigger(h, fn, fn.Trigger().Prop("connection"))
}

// newStorageQueueTrigger sets up fn's listener on the Storage queue of its queueName, in the
// account named by the connection setting conn ("" for AzureWebJobsStorage).
func newStorageQueueTrigger(h *Host, fn *Function, conn string) (*queueTrigger, error) {
	b := fn.Trigger()
	name, err := h.queueNameOf(fn)
	if err != nil {
		return nil, err
	}
	if err := config.ValidateQueueName(name); err != nil {
		return nil, fmt.Errorf("%s queueName %q: %w", fn.Name, name, err)
	}
	if err := config.ValidateQueueName(name + PoisonSuffix); err != nil {
		return nil, fmt.Errorf("%s: poison queue name %q: %w", fn.Name, name+PoisonSuffix, err)
	}
	if conn == "" {
		conn = config.SettingHostStorage
	}
	sc, err := config.ParseStorageConnection(conn, h.settings.Get)
	if err != nil {
		return nil, fmt.Errorf("%s connection: %w", fn.Name, err)
	}
	svc, err := azclient.Queue(sc, nil)
	if err != nil {
		return nil, fmt.Errorf("%s connection: %w", fn.Name, err)
	}
	opts := h.app.Host.Queues
	shared := h.cfg.ControlQueue != "" && strings.EqualFold(name, h.cfg.ControlQueue) && h.opts.ControlPollingInterval > 0
	if shared {
		opts.MaxPollingInterval = min(opts.MaxPollingInterval, h.opts.ControlPollingInterval)
	}
	return &queueTrigger{h: h, fn: fn, binding: b.Name, name: name, q: svc.NewQueueClient(name),
		poison: svc.NewQueueClient(name + PoisonSuffix), opts: opts, shared: shared}, nil
}

// listen is one instance's queue listener: it polls while the instance is running, keeping at
// most batchSize+newBatchThreshold messages in flight, and backs off (randomised, doubling, up
// to maxPollingInterval) while the queue is empty or unreachable.
func (t *queueTrigger) listen(ctx context.Context, in *Instance) {
	h := t.h
	var (
		mu       sync.Mutex
		inflight int
		freed    = make(chan struct{}, 1)
	)
	backoff := time.Duration(0)
	lastErr := ""
	for ctx.Err() == nil {
		if !in.live() {
			in.mu.Lock()
			ch := in.changed
			in.mu.Unlock()
			if !in.live() {
				select {
				case <-ctx.Done():
					return
				case <-ch:
				}
			}
			continue
		}
		mu.Lock()
		n := inflight
		mu.Unlock()
		if n > t.opts.NewBatchThreshold {
			select {
			case <-ctx.Done():
				return
			case <-freed:
			}
			continue
		}
		if backoff > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
		}
		resp, err := t.q.DequeueMessages(ctx, &azqueue.DequeueMessagesOptions{
			NumberOfMessages:  to.Ptr(int32(t.opts.BatchSize)),
			VisibilityTimeout: to.Ptr(int32(h.opts.MessageLease / time.Second)),
		})
		if err != nil && ctx.Err() != nil {
			return
		}
		if err != nil && !queueerror.HasCode(err, queueerror.QueueNotFound) {
			if msg := err.Error(); msg != lastErr {
				h.log.Warn("queue poll failed; backing off", "queue", t.name, "instance", in.name, "err", firstLine(msg))
				lastErr = msg
			}
		}
		if err != nil || len(resp.Messages) == 0 {
			backoff = nextBackoff(backoff, t.opts.MaxPollingInterval)
			continue
		}
		backoff, lastErr = 0, ""
		for _, m := range resp.Messages {
			mu.Lock()
			inflight++
			mu.Unlock()
			h.goWork(func(wctx context.Context) {
				defer func() {
					mu.Lock()
					inflight--
					mu.Unlock()
					select {
					case freed <- struct{}{}:
					default:
					}
				}()
				t.process(wctx, in, m)
			})
		}
	}
}

// listenShared is the one listener of a shared queue: it polls while any instance is running
// and hands each message to a random running one.
func (t *queueTrigger) listenShared(ctx context.Context) {
	h := t.h
	backoff := time.Duration(0)
	lastErr := ""
	for ctx.Err() == nil {
		if backoff > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
		}
		if h.pickInstance() == nil {
			backoff = minPollingInterval
			continue
		}
		resp, err := t.q.DequeueMessages(ctx, &azqueue.DequeueMessagesOptions{
			NumberOfMessages:  to.Ptr(int32(t.opts.BatchSize)),
			VisibilityTimeout: to.Ptr(int32(h.opts.MessageLease / time.Second)),
		})
		if err != nil && ctx.Err() != nil {
			return
		}
		if err != nil && !queueerror.HasCode(err, queueerror.QueueNotFound) {
			if msg := err.Error(); msg != lastErr {
				h.log.Warn("queue poll failed; backing off", "queue", t.name, "err", firstLine(msg))
				lastErr = msg
			}
		}
		if err != nil || len(resp.Messages) == 0 {
			backoff = nextBackoff(backoff, t.opts.MaxPollingInterval)
			continue
		}
		backoff, lastErr = 0, ""
		for _, m := range resp.Messages {
			in := h.pickInstance()
			if in == nil { // every instance stopped since the poll: process reports it and puts it back
				in = h.instances[rand.IntN(len(h.instances))]
			}
			h.goWork(func(wctx context.Context) { t.process(wctx, in, m) })
		}
	}
}

// nextBackoff doubles the polling delay with jitter, from minPollingInterval up to max.
func nextBackoff(cur, max time.Duration) time.Duration {
	if cur <= 0 {
		return minPollingInterval
	}
	next := cur * 2
	next += time.Duration(rand.Int64N(int64(next/4) + 1))
	return min(next, max)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// process handles one dequeued message on in.
func (t *queueTrigger) process(ctx context.Context, in *Instance, m *azqueue.DequeuedMessage) {
	if t.sb != nil {
		t.sb.process(ctx, in, m)
		return
	}
	h := t.h
	id, receipt := *m.MessageID, *m.PopReceipt
	text := ""
	if m.MessageText != nil {
		text = *m.MessageText
	}
	count := int64(1)
	if m.DequeueCount != nil {
		count = *m.DequeueCount
	}
	log := h.log.With("queue", t.name, "message", id, "dequeueCount", count, "instance", in.name)

	body := text
	if t.opts.MessageEncoding == "base64" {
		b, err := base64.StdEncoding.DecodeString(text)
		if err != nil || !utf8.Valid(b) {
			log.Warn("message is not valid base64 (messageEncoding base64): moved to the poison queue without invoking", "err", err)
			t.moveToPoison(ctx, id, receipt, text)
			return
		}
		body = string(b)
	}
	if count > int64(t.opts.MaxDequeueCount) {
		// Dequeued more often than allowed (a previous attempt never completed): the host
		// poisons it before processing.
		log.Warn("message already dequeued more than maxDequeueCount times: moved to the poison queue")
		t.moveToPoison(ctx, id, receipt, text)
		return
	}
	qm := QueueMessage{ID: id, PopReceipt: receipt, DequeueCount: count, Body: body}
	if m.InsertionTime != nil {
		qm.InsertionTime = *m.InsertionTime
	}
	if m.ExpirationTime != nil {
		qm.ExpirationTime = *m.ExpirationTime
	}
	if m.TimeNextVisible != nil {
		qm.NextVisibleTime = *m.TimeNextVisible
	}

	crashes := in.crashCount()
	var crash *crasher
	if a := t.takeFault(body, in); a != nil {
		s := Strike{Message: id, Body: body, Count: count}
		switch a.f.Kind {
		case FaultLost:
			t.retry(ctx, log, "drop (delivery fault)", func(c context.Context) error {
				_, err := t.q.DeleteMessage(c, id, receipt, nil)
				return err
			})
			s.Note = "the queue accepted the message and never delivers it"
			t.strike(a, s)
			return
		case FaultAnswerLost:
			s.Again = qm.NextVisibleTime
			s.Note = "the dequeue took effect and its answer was lost: invisible for the message lease, then delivered again"
			t.strike(a, s)
			return
		case FaultCrash:
			s.Again = qm.NextVisibleTime
			crash = t.startCrash(a, in, s)
		}
	}

	// Keep the message invisible while the function runs: renew at half the lease.
	stopRenew := t.renew(ctx, log, id, receipt, text, h.opts.MessageLease, 0, nil)
	_, err := in.invoke(ctx, t.fn.Name, queueRequest(t.fn.Name, t.binding, qm, h.now()), id)
	receipt = stopRenew()
	if crash != nil && crash.end() || in.crashCount() != crashes {
		// A dead host settles nothing: the message comes back when its lease lapses.
		log.Warn("the instance crashed while it held the message: left invisible until its message lease lapses",
			"messageLease", h.opts.MessageLease.String())
		return
	}

	switch {
	case errors.Is(err, ErrNotReady):
		// The handler stopped between the poll and the invocation, so the message never
		// reached it. The real host stops its listeners before its worker exits and never
		// holds such a message: put it back at once instead of after visibilityTimeout (a
		// handover check from a stopping leader must not wait behind its own instance).
		log.Info("instance not running: message returned to the queue at once", "err", firstLine(err.Error()))
		t.retry(ctx, log, "release", func(c context.Context) error {
			_, err := t.q.UpdateMessage(c, id, receipt, text, &azqueue.UpdateMessageOptions{VisibilityTimeout: to.Ptr(int32(0))})
			return err
		})
	case err == nil:
		t.retry(ctx, log, "delete", func(c context.Context) error {
			_, err := t.q.DeleteMessage(c, id, receipt, nil)
			return err
		})
	case count >= int64(t.opts.MaxDequeueCount):
		log.Warn("invocation failed on the last allowed dequeue: moving the message to the poison queue",
			"maxDequeueCount", t.opts.MaxDequeueCount, "err", firstLine(err.Error()))
		t.moveToPoison(ctx, id, receipt, text)
	default:
		log.Info("invocation failed: message visible again after visibilityTimeout",
			"visibilityTimeout", t.opts.VisibilityTimeout.String(), "err", firstLine(err.Error()))
		vis := int32((t.opts.VisibilityTimeout + time.Second - 1) / time.Second)
		t.retry(ctx, log, "release", func(c context.Context) error {
			_, err := t.q.UpdateMessage(c, id, receipt, text, &azqueue.UpdateMessageOptions{VisibilityTimeout: to.Ptr(vis)})
			return err
		})
	}
}

// renew keeps message id invisible for lease at a time, renewing at half of it, until the
// returned stop is called (which returns the current pop receipt) or, when renewFor > 0, until
// renewFor has passed since the start: then renewal stops and the message becomes visible a
// lease after the last renewal. A renewal is skipped while skip (when set) reports true.
func (t *queueTrigger) renew(ctx context.Context, log *slog.Logger, id, receipt, text string, lease, renewFor time.Duration, skip func() bool) (stop func() string) {
	var mu sync.Mutex
	current := receipt
	renewCtx, cancel := context.WithCancel(ctx)
	if renewFor > 0 {
		renewCtx, cancel = context.WithTimeout(ctx, renewFor)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(lease / 2)
		defer tick.Stop()
		for {
			select {
			case <-renewCtx.Done():
				return
			case <-tick.C:
			}
			if skip != nil && skip() {
				continue
			}
			mu.Lock()
			r, err := t.q.UpdateMessage(renewCtx, id, current, text, &azqueue.UpdateMessageOptions{VisibilityTimeout: to.Ptr(int32(lease / time.Second))})
			if err == nil && r.PopReceipt != nil {
				current = *r.PopReceipt
			}
			mu.Unlock()
			if err != nil && renewCtx.Err() == nil {
				log.Warn("message lease renewal failed", "err", firstLine(err.Error()))
			}
		}
	}()
	return func() string {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return current
	}
}

// moveToPoison copies the message text (a new message, same body) to <queue>-poison, creating
// the poison queue on first use, then deletes the original.
func (t *queueTrigger) moveToPoison(ctx context.Context, id, receipt, text string) {
	t.retry(ctx, t.h.log, "create poison queue", func(c context.Context) error {
		t.poisonOnce.Lock()
		defer t.poisonOnce.Unlock()
		if t.poisonMade {
			return nil
		}
		if _, err := t.poison.Create(c, nil); err != nil && !queueerror.HasCode(err, queueerror.QueueAlreadyExists) {
			return err
		}
		t.poisonMade = true
		return nil
	})
	ok := t.retry(ctx, t.h.log, "copy to poison queue", func(c context.Context) error {
		_, err := t.poison.EnqueueMessage(c, text, &azqueue.EnqueueMessageOptions{TimeToLive: to.Ptr(int32(-1))})
		return err
	})
	if !ok {
		return // keep the original: it comes back after its lease and is poisoned then
	}
	t.retry(ctx, t.h.log, "delete poisoned message", func(c context.Context) error {
		_, err := t.q.DeleteMessage(c, id, receipt, nil)
		return err
	})
	t.h.log.Warn("message moved to the poison queue", "queue", t.name+PoisonSuffix, "message", id)
	t.h.notePoison(t.name, id)
}

// retry runs op until it succeeds, fails permanently (message gone, receipt stale), or
// storageRetryBudget passes; it reports success.
func (t *queueTrigger) retry(ctx context.Context, log *slog.Logger, what string, op func(context.Context) error) bool {
	deadline := time.Now().Add(storageRetryBudget)
	wait := 200 * time.Millisecond
	for {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		err := op(c)
		cancel()
		switch {
		case err == nil:
			return true
		case queueerror.HasCode(err, queueerror.MessageNotFound, queueerror.PopReceiptMismatch):
			log.Error("queue "+what+": the message changed hands (lease expired?)", "queue", t.name, "err", firstLine(err.Error()))
			return false
		case time.Now().After(deadline):
			log.Error("queue "+what+" failed; giving up", "queue", t.name, "err", firstLine(err.Error()))
			return false
		}
		// Said each time: a settlement that takes seconds delays the message's next delivery.
		log.Warn("queue "+what+" failed; trying again", "queue", t.name, "in", wait.String(), "err", firstLine(err.Error()))
		time.Sleep(wait)
		wait = min(wait*2, 3*time.Second)
	}
}
