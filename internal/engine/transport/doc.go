// Package transport sends work messages: one small Sender contract and two implementations,
// ServiceBusSender (production, azservicebus) and QueueSender (local runs with only
// Azurite, azqueue). The coordinator enqueues partition and check messages through it; the
// Functions host delivers them to the workers through its serviceBusTrigger or queueTrigger.
//
// # Model: at-least-once, deterministic IDs, idempotent receivers
//
// Send returns nil only after the service accepted every message. On error, any prefix or
// subset may have been accepted (batches already sent, parallel enqueues that completed), and
// the error says how many. The caller's recovery is to send the same messages again, with
// the same IDs: every Message carries a deterministic ID ("<runID>/<index>"), so a re-send
// is a replay, not new work. Messages are therefore delivered at least once, possibly more:
//
//   - Service Bus drops a replay whose MessageID it saw within the entity's duplicate
//     detection window, provided the queue was created with RequiresDuplicateDetection (a
//     property of the entity, not of this package). Outside the window, or without the
//     setting, duplicates reach the workers. Delivery itself is at-least-once too: a worker
//     that fails or times out gets the message again (dead-lettered after MaxDeliveryCount).
//   - The Storage queue has no duplicate detection at all: every Send of a message adds
//     another copy, and a failed invocation makes it visible again (poison queue after
//     maxDequeueCount). The ID is not sent.
//
// So workers must be idempotent (results keyed by run and partition index); this package
// never promises exactly-once.
//
// Validation happens before anything is sent: an empty or overlong ID (ErrInvalid), a
// negative TTL (ErrInvalid) or a body that cannot fit (ErrTooLarge) fails the whole Send
// with nothing sent. Sending an empty slice is a no-op. Errors are classified once per
// adapter, into one of these classes:
//
//   - throttled (IsThrottled, and IsTransient too): the service asked the sender to slow
//     down: Service Bus server-busy (which azservicebus retries itself and then returns as a
//     raw *amqp.Error) or a quota reached (a full entity: dead letters count too), Storage
//     ServerBusy, 429 or 503. Back off, then send the same messages again;
//   - transient (IsTransient): a blip: connection or link lost, timeout, 408/5xx;
//   - ErrTooLarge: the message does not fit (the SDK's batch check or the broker's
//     message-size-exceeded);
//   - ErrClosed: the sender (or the SDK's link under it) was closed;
//   - permanent (no marker): validation (ErrInvalid), auth, entity not found or disabled,
//     context cancellation, anything unknown.
//
// The SDK errors stay in the chain for errors.As.
//
// # Service Bus (ServiceBusSender)
//
// Messages are packed in order into as few batches as fit (NewMessageBatch; a new batch
// when AddMessage reports ErrMessageTooLarge) and the batches are sent one after another.
// MessageID = Message.ID, ContentType application/json, ApplicationProperties =
// Properties, ScheduledEnqueueTime = NotBefore, TimeToLive = TTL (capped by the entity's
// DefaultMessageTimeToLive; Service Bus counts a scheduled message's TTL from its enqueue
// time). The batch size limit is the entity's (256 KiB on Standard, 1 MiB per batch on
// Premium); a message that does not fit an empty batch is ErrTooLarge. Service Bus keeps
// the body bytes as they are: the serviceBusTrigger hands them to the handler as a string.
//
// # Storage queue (QueueSender)
//
// The queue has no batch API, so each message is one EnqueueMessage call, at most
// Parallelism in flight: by default a window adapted to the calls' latency, from 16 between 2
// and 64 (it opens while latency holds at its floor and closes when calls queue up at the
// store). The text is base64(body): azqueue sends text as-is
// and the Functions queue trigger decodes base64 by default (messageEncoding "base64");
// plain JSON text would go to the poison queue without the function ever running. The
// queue's 64 KiB message limit is 65,536 base64 characters, so the largest body is 48 KiB
// (MaxQueueBody); larger is ErrTooLarge. NotBefore becomes the visibility timeout in whole
// seconds, rounded up (never early), capped at 7 days − 1 s (MaxQueueDelay): a NotBefore
// further away is delivered early, at the cap. The TTL is counted from the moment the
// message becomes visible (as on Service Bus), i.e. visibility + TTL, so the service's rule
// "TTL > visibility timeout" always holds; default 7 days. Visibility is computed from this
// process's clock and applied by the service's clock: a skew between them shifts delivery.
// Properties are ignored: put everything the worker needs in the body. The queue is created
// before the first Send (once per sender; an existing queue is fine) unless NoCreate is set.
//
// # Dead letters (DeadLetterQueue)
//
// A message no invocation could handle within its delivery budget is moved aside: to the
// Service Bus queue's dead-letter subqueue (also on expiry), or by the Functions queue
// trigger to "<queue>-poison". DeadLetterQueue counts, peeks and purges them with the rights
// the app already has to receive: DeadLetterQueue in transport/servicebus peeks the subqueue
// (a bounded count, "at least N" beyond it; with the broker's reason and description) and
// purges it in ReceiveAndDelete mode; PoisonQueue in transport/storagequeue reads the poison
// queue's approximate message count, peeks up to 32 and clears it. Dead letters count
// against a Service Bus entity's size quota, and a full entity refuses every send.
//
// # Not guaranteed
//
//   - Ordering: the Storage queue sends in parallel and neither service orders redeliveries.
//   - Deduplication on the Storage queue, or on Service Bus outside the detection window.
//   - Atomicity: a failed Send may have delivered some messages; re-send them all.
//   - Exact delivery times: a scheduled message becomes visible at or shortly after NotBefore
//     (subject to clock skew on the Storage queue).
//   - A bound on how long Send takes: it blocks as long as ctx allows. azcore sets no
//     per-try timeout by default, so a request the service never answers holds Send until
//     ctx ends; give ctx a deadline (or set RetryOptions.TryTimeout on the queue client).
package transport
