package devhost

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/google/uuid"

	"github.com/batonfn/baton/internal/engine/protocol"
)

// The Service Bus delivery mode (Options.Delivery = DeliveryServiceBus) runs each
// serviceBusTrigger function on the Storage queue of its queueName, in AzureWebJobsStorage, and
// delivers its messages as a Service Bus queue and the Functions Service Bus trigger (PeekLock,
// autoCompleteMessages) do; docs/design.md lists what it emulates and what it cannot:
//
//   - Peek-lock: a delivered message is invisible while its lock is held. The lock is
//     Options.LockDuration (the queue's LockDuration), renewed at half of it while the
//     invocation runs, for at most host.json's maxAutoLockRenewalDuration; an invocation that
//     outlives that lets the lock lapse and the message is delivered again, with DeliveryCount
//     one higher, while the first invocation still runs; a paused instance (a frozen VM)
//     renews nothing, so its locks lapse too. Completing or abandoning with a lost
//     lock fails (logged, as the trigger's MessageLockLostException).
//   - Success completes (deletes) the message; a failure abandons it: visible again at once.
//   - DeliveryCount is 1 on the first delivery and counts every delivery, lock lapses included.
//   - Dead-lettering: a failure on delivery maxDeliveryCount (host.json's maxDequeueCount, which
//     Baton requires equal to the Service Bus queue's maxDeliveryCount), or a message found
//     with maxDeliveryCount deliveries spent, is moved to <queue>-poison with its body as sent,
//     where the Storage queue's dead-letter reader finds it; the reason is logged.
//   - Scheduled messages (sent with ServiceBusMessage.ScheduledEnqueueTime) are delivered at
//     that time to the millisecond of the devhost's clock, never before.
//   - Duplicate detection: a message whose MessageId was already seen on the queue, sent
//     within Options.DuplicateWindow of the first, is dropped without a delivery.
//
// The broker's per-message state (MessageId, DeliveryCount, sequence number, schedule) lives
// in the Storage message's own text: the devhost rewrites a message into an sbFrame on its
// first delivery, so the state survives instances, devhost listeners and lock lapses. A plain
// message (what Baton's Storage-queue sender writes) has the Storage message ID as MessageId
// and no schedule of its own (its visibility timeout, whole seconds, already delayed it).

// Delivery says how queue messages reach the handler.
type Delivery string

const (
	// DeliveryQueue runs queueTrigger functions as the Storage Queues extension does.
	DeliveryQueue Delivery = "queue"
	// DeliveryServiceBus runs serviceBusTrigger functions with Service Bus semantics on
	// Storage queues.
	DeliveryServiceBus Delivery = "servicebus"
)

// Deliveries lists the delivery modes.
var Deliveries = []Delivery{DeliveryQueue, DeliveryServiceBus}

// ParseDelivery reads a delivery mode ("" is DeliveryQueue).
func ParseDelivery(s string) (Delivery, error) {
	switch d := Delivery(strings.ToLower(strings.TrimSpace(s))); d {
	case "":
		return DeliveryQueue, nil
	case DeliveryQueue, DeliveryServiceBus:
		return d, nil
	}
	return "", fmt.Errorf("delivery %q: use %q (Storage queue trigger) or %q (Service Bus semantics on Storage queues)", s, DeliveryQueue, DeliveryServiceBus)
}

// Defaults of the emulated Service Bus queue: those of Baton's Bicep (infra/main.bicep).
const (
	DefaultLockDuration    = time.Minute
	DefaultDuplicateWindow = time.Hour
	// sbMaxPollingInterval bounds the wait between polls: a Service Bus receiver is handed a
	// message as soon as it is available, so the emulation polls often.
	sbMaxPollingInterval = 250 * time.Millisecond
	// sbHoldAhead: a scheduled message due within this is held in the devhost (its lock kept)
	// and delivered on the millisecond; one due later is hidden again until shortly before.
	sbHoldAhead = 2 * time.Second
	// deadLetterReason is the reason Service Bus records for an exhausted message.
	deadLetterReason = "MaxDeliveryCountExceeded"
)

// sbFrame is a message's broker state, kept as its Storage message text (base64 of its JSON,
// marked by the "$serviceBus" key).
type sbFrame struct {
	Marker    int    `json:"$serviceBus"`
	MessageID string `json:"messageId"`
	Body      string `json:"body"`
	// Scheduled is the ScheduledEnqueueTime (zero: none).
	Scheduled time.Time `json:"scheduledEnqueueTimeUtc,omitzero"`
	// Sent is when the message entered the queue (the Storage insertion time), the start of
	// its duplicate detection window.
	Sent          time.Time         `json:"sent,omitzero"`
	DeliveryCount int64             `json:"deliveryCount"`
	Sequence      int64             `json:"sequenceNumber,omitempty"`
	Properties    map[string]string `json:"applicationProperties,omitempty"`
}

// ServiceBusMessage is a message as a Service Bus sender describes it, for sending to a queue
// the Service Bus delivery mode serves (tests, tools).
type ServiceBusMessage struct {
	MessageID string
	Body      string
	// ScheduledEnqueueTime delays delivery until then (zero: now).
	ScheduledEnqueueTime time.Time
	Properties           map[string]string
}

// SendServiceBus enqueues m on q for the Service Bus delivery mode: the Storage message hides
// it until about a second before ScheduledEnqueueTime (now is the sender's clock), and the
// devhost delivers it on the millisecond.
func SendServiceBus(ctx context.Context, q *azqueue.QueueClient, m ServiceBusMessage, now time.Time) error {
	if m.MessageID == "" {
		return errors.New("send to the Service Bus delivery mode: empty MessageID")
	}
	b, err := json.Marshal(sbFrame{Marker: 1, MessageID: m.MessageID, Body: m.Body, Scheduled: m.ScheduledEnqueueTime.UTC(), Properties: m.Properties})
	if err != nil {
		return fmt.Errorf("send %s: %w", m.MessageID, err)
	}
	vis := int32(0)
	if d := m.ScheduledEnqueueTime.Sub(now); d > sbHoldAhead {
		vis = int32((d - time.Second) / time.Second)
	}
	if _, err := q.EnqueueMessage(ctx, base64.StdEncoding.EncodeToString(b), &azqueue.EnqueueMessageOptions{VisibilityTimeout: to.Ptr(vis)}); err != nil {
		return fmt.Errorf("send %s: %w", m.MessageID, err)
	}
	return nil
}

// sbDelivery is the Service Bus delivery of one queue.
type sbDelivery struct {
	t        *queueTrigger
	lock     time.Duration
	renewFor time.Duration
	window   time.Duration

	mu   sync.Mutex
	seen map[string]sbSeen // MessageId -> the first message with it
	seq  int64
	dups []string
}

// sbSeen is the first Storage message seen with a MessageId.
type sbSeen struct {
	storageID string
	sent      time.Time
}

// newServiceBusTrigger sets up the Service Bus delivery of a serviceBusTrigger function.
func newServiceBusTrigger(h *Host, fn *Function) (*queueTrigger, error) {
	t, err := newStorageQueueTrigger(h, fn, "")
	if err != nil {
		return nil, err
	}
	calls := h.app.Host.ServiceBus.MaxConcurrentCalls
	t.opts.BatchSize = min(calls, MaxBatchSize)
	t.opts.NewBatchThreshold = calls - t.opts.BatchSize
	t.opts.MaxPollingInterval = min(t.opts.MaxPollingInterval, sbMaxPollingInterval)
	t.sb = &sbDelivery{t: t, lock: h.opts.LockDuration, renewFor: h.app.Host.ServiceBus.MaxAutoLockRenewal,
		window: h.opts.DuplicateWindow, seen: map[string]sbSeen{}}
	return t, nil
}

// serviceBusTwin returns the serviceBusTrigger function that replaces queue function fn in the
// Service Bus delivery mode (one on the same queue), or nil.
func (h *Host) serviceBusTwin(fn *Function) *Function {
	if h.opts.Delivery != DeliveryServiceBus {
		return nil
	}
	name, err := h.queueNameOf(fn)
	if err != nil {
		return nil
	}
	for _, other := range h.app.Functions {
		if other.Disabled || !strings.EqualFold(other.Trigger().Type, "serviceBusTrigger") {
			continue
		}
		if n, err := h.queueNameOf(other); err == nil && n == name {
			return other
		}
	}
	return nil
}

// Duplicates lists the messages the Service Bus delivery mode dropped as duplicates
// ("<queue>/<MessageId>").
func (h *Host) Duplicates() []string {
	var out []string
	for _, q := range h.queues {
		if q.sb != nil {
			q.sb.mu.Lock()
			out = append(out, q.sb.dups...)
			q.sb.mu.Unlock()
		}
	}
	return out
}

// encodeText is a body as the queue's messageEncoding puts it in a Storage message.
func (d *sbDelivery) encodeText(body string) string {
	if d.t.opts.MessageEncoding == "base64" {
		return base64.StdEncoding.EncodeToString([]byte(body))
	}
	return body
}

// frameOf reads a dequeued message's broker state: its sbFrame, or a new one for a plain
// message. ok is false when a plain message's text is not in the queue's messageEncoding.
func (d *sbDelivery) frameOf(m *azqueue.DequeuedMessage, text string) (sbFrame, bool) {
	b, err := base64.StdEncoding.DecodeString(text)
	if err == nil {
		var f sbFrame
		if json.Unmarshal(b, &f) == nil && f.Marker == 1 && f.MessageID != "" {
			return f, true
		}
	}
	body := text
	if d.t.opts.MessageEncoding == "base64" {
		if err != nil || !utf8.Valid(b) {
			return sbFrame{}, false
		}
		body = string(b)
	}
	return sbFrame{Marker: 1, MessageID: *m.MessageID, Body: body}, true
}

func (f sbFrame) text() string {
	b, _ := json.Marshal(f)
	return base64.StdEncoding.EncodeToString(b)
}

// duplicate records the first sight of f (sent at sent) and reports whether an earlier message
// with its MessageId was sent within the window.
func (d *sbDelivery) duplicate(storageID string, f sbFrame) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, s := range d.seen { // forget what left every window
		if f.Sent.Sub(s.sent) > d.window {
			delete(d.seen, id)
		}
	}
	if s, ok := d.seen[f.MessageID]; ok && s.storageID != storageID {
		if diff := f.Sent.Sub(s.sent); diff >= -d.window && diff <= d.window {
			d.dups = append(d.dups, d.t.name+"/"+f.MessageID)
			return true
		}
	}
	d.seen[f.MessageID] = sbSeen{storageID: storageID, sent: f.Sent}
	return false
}

// process delivers one dequeued message (hidden for the listener's 10-minute lease so far).
func (d *sbDelivery) process(ctx context.Context, in *Instance, m *azqueue.DequeuedMessage) {
	t, h := d.t, d.t.h
	id, receipt := *m.MessageID, *m.PopReceipt
	text := ""
	if m.MessageText != nil {
		text = *m.MessageText
	}
	log := h.log.With("queue", t.name, "message", id, "instance", in.name)
	f, ok := d.frameOf(m, text)
	if !ok {
		log.Warn("message is not valid base64 (messageEncoding base64): dead-lettered without invoking")
		t.moveToPoison(ctx, id, receipt, text)
		return
	}
	log = log.With("messageId", f.MessageID)
	if f.DeliveryCount == 0 && f.Sequence == 0 {
		if f.Sent.IsZero() && m.InsertionTime != nil {
			f.Sent = m.InsertionTime.UTC()
		}
		if d.duplicate(id, f) {
			log.Info("duplicate MessageId within the duplicate detection window: dropped", "window", d.window.String())
			t.retry(ctx, log, "drop duplicate", func(c context.Context) error {
				_, err := t.q.DeleteMessage(c, id, receipt, nil)
				return err
			})
			return
		}
		d.mu.Lock()
		d.seq++
		f.Sequence = d.seq
		d.mu.Unlock()
	}
	if wait := f.Scheduled.Sub(h.now()); wait > 0 {
		if !d.holdUntilScheduled(ctx, log, id, &receipt, f, wait) {
			return
		}
	}
	maxCount := int64(t.opts.MaxDequeueCount)
	if f.DeliveryCount >= maxCount {
		// Its last lock lapsed (or its last settlement was lost): the broker dead-letters it
		// on the next receive.
		log.Warn("message already delivered maxDeliveryCount times: dead-lettered", "reason", deadLetterReason, "deliveryCount", f.DeliveryCount)
		t.moveToPoison(ctx, id, receipt, d.encodeText(f.Body))
		return
	}

	crashes := in.crashCount()
	fault := t.takeFault(f.Body, in)
	if fault != nil && fault.f.Kind == FaultLost {
		t.retry(ctx, log, "drop (delivery fault)", func(c context.Context) error {
			_, err := t.q.DeleteMessage(c, id, receipt, nil)
			return err
		})
		t.strike(fault, Strike{Message: id, MessageID: f.MessageID, Body: f.Body, Count: f.DeliveryCount,
			Note: "the queue accepted the message and never delivers it"})
		return
	}

	// Receive: take the lock and count the delivery in one update.
	f.DeliveryCount++
	lockSecs := int32(d.lock / time.Second)
	ftext := f.text()
	r, err := t.q.UpdateMessage(ctx, id, receipt, ftext, &azqueue.UpdateMessageOptions{VisibilityTimeout: to.Ptr(lockSecs)})
	if err != nil || r.PopReceipt == nil {
		log.Warn("could not lock the message; it is delivered again later", "err", errOr(err, "no pop receipt"))
		if fault != nil {
			t.untake(fault)
		}
		return
	}
	receipt = *r.PopReceipt
	lockedAt := time.Now()
	log = log.With("deliveryCount", f.DeliveryCount)
	var crash *crasher
	if fault != nil {
		s := Strike{Message: id, MessageID: f.MessageID, Body: f.Body, Count: f.DeliveryCount, Again: lockedAt.Add(d.lock)}
		if fault.f.Kind == FaultAnswerLost {
			// The receive took the lock and counted the delivery; the receiver never heard.
			s.Note = "the receive took effect and its answer was lost: locked until the lock lapses, then delivered again"
			t.strike(fault, s)
			return
		}
		crash = t.startCrash(fault, in, s)
	}
	// A paused instance models a frozen VM, whose host renews nothing: its locks lapse.
	paused := func() bool { st, _ := in.State(); return st == StatePaused }
	stop := t.renew(ctx, log, id, receipt, ftext, d.lock, max(d.renewFor, time.Nanosecond), paused) // 0: no renewal
	req := serviceBusRequest(t.fn.Name, t.binding, f, m, uuid.NewString(), h.now())
	_, err = in.invoke(ctx, t.fn.Name, req, id)
	receipt = stop()
	if crash != nil && crash.end() || in.crashCount() != crashes {
		// A dead host settles and renews nothing: the lock lapses and the message comes back.
		log.Warn("the instance crashed while it held the message: delivered again when its lock lapses", "lockDuration", d.lock.String())
		return
	}
	if held := time.Since(lockedAt); held > d.renewFor+d.lock {
		log.Warn("invocation outlived maxAutoLockRenewalDuration: its lock lapsed and the message may have been delivered again", "held", held.Round(time.Millisecond).String())
	}

	settle := func(what string, op func(context.Context) error) {
		if !t.retry(ctx, log, what, op) {
			log.Warn("settlement failed: the message lock was lost (MessageLockLost): the message is another delivery's now", "settlement", what)
		}
	}
	abandon := func(c context.Context) error {
		_, err := t.q.UpdateMessage(c, id, receipt, ftext, &azqueue.UpdateMessageOptions{VisibilityTimeout: to.Ptr(int32(0))})
		return err
	}
	switch {
	case errors.Is(err, ErrNotReady):
		// The handler stopped between the receive and the invocation: a stopping host does
		// not receive, so put the message back uncounted.
		log.Info("instance not running: message returned to the queue at once", "err", firstLine(err.Error()))
		f.DeliveryCount--
		ftext = f.text()
		settle("release", abandon)
	case err == nil:
		settle("complete", func(c context.Context) error {
			_, err := t.q.DeleteMessage(c, id, receipt, nil)
			return err
		})
	case f.DeliveryCount >= maxCount:
		log.Warn("invocation failed on the last allowed delivery: dead-lettering the message",
			"reason", deadLetterReason, "maxDeliveryCount", maxCount, "err", firstLine(err.Error()))
		t.moveToPoison(ctx, id, receipt, d.encodeText(f.Body))
	default:
		log.Info("invocation failed: message abandoned, delivered again at once", "err", firstLine(err.Error()))
		settle("abandon", abandon)
	}
}

// holdUntilScheduled handles a message whose ScheduledEnqueueTime is wait away: one due later
// than sbHoldAhead is hidden again until about a second before (false: not delivered now); one
// due sooner is held, its Storage message hidden, and released on the millisecond (true).
func (d *sbDelivery) holdUntilScheduled(ctx context.Context, log *slog.Logger, id string, receipt *string, f sbFrame, wait time.Duration) bool {
	t := d.t
	vis := int32((wait - time.Second) / time.Second)
	if wait <= sbHoldAhead {
		vis = int32((wait+d.lock)/time.Second) + 1
	}
	var newReceipt string
	ok := t.retry(ctx, log, "hide scheduled message", func(c context.Context) error {
		r, err := t.q.UpdateMessage(c, id, *receipt, f.text(), &azqueue.UpdateMessageOptions{VisibilityTimeout: to.Ptr(vis)})
		if err == nil && r.PopReceipt != nil {
			newReceipt = *r.PopReceipt
		}
		return err
	})
	if !ok || wait > sbHoldAhead {
		return false
	}
	*receipt = newReceipt
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false // it becomes visible when its hiding ends
	case <-timer.C:
	}
	for wait := f.Scheduled.Sub(t.h.now()); wait > 0; wait = f.Scheduled.Sub(t.h.now()) {
		// The clock may be another than the timer's: wait out the rest on it.
		select {
		case <-ctx.Done():
			return false
		case <-time.After(min(wait, time.Millisecond)):
		}
	}
	return true
}

// serviceBusRequest builds a serviceBusTrigger invocation (single dispatch): the body
// double-encoded as Data.<binding>, then the trigger's binding data as metadata — DeliveryCount
// and SequenceNumber as strings, MessageId and LockToken quoted, the times as DateTime (no
// offset) and DateTimeOffset (+00:00) without fractions, ApplicationProperties and its alias
// UserProperties, the action objects empty — then the body's JSON properties, then sys.
func serviceBusRequest(function, binding string, f sbFrame, m *azqueue.DequeuedMessage, lockToken string, now time.Time) []byte {
	enqueued := f.Sent
	if !f.Scheduled.IsZero() {
		enqueued = f.Scheduled // a scheduled message is enqueued when it activates
	}
	props := f.Properties
	if props == nil {
		props = map[string]string{}
	}
	pj, _ := json.Marshal(props)
	empty := json.RawMessage("{}")
	md := map[string]json.RawMessage{
		"DeliveryCount":         protocol.IntMeta(f.DeliveryCount),
		"MessageId":             protocol.QuoteMeta(f.MessageID),
		"LockToken":             protocol.QuoteMeta(lockToken),
		"SequenceNumber":        protocol.IntMeta(f.Sequence),
		"EnqueuedTimeUtc":       protocol.DateTimeMeta(enqueued),
		"EnqueuedTime":          protocol.DateTimeOffsetMeta(enqueued),
		"ApplicationProperties": pj,
		"UserProperties":        pj,
		"MessageActions":        empty,
		"ReceiveActions":        empty,
		"Client":                json.RawMessage(`{"FullyQualifiedNamespace":"devhost","Identifier":"devhost","TransportType":0,"IsClosed":false}`),
	}
	if m.ExpirationTime != nil {
		md["ExpiresAtUtc"] = protocol.DateTimeMeta(*m.ExpirationTime)
		md["ExpiresAt"] = protocol.DateTimeOffsetMeta(*m.ExpirationTime)
	}
	protocol.LeakBodyProperties(md, f.Body)
	md["sys"] = protocol.SysMeta(function, now, uuid.NewString())
	return request{Data: map[string]any{binding: protocol.EncodeStringData(f.Body)}, Metadata: md}.encode()
}
