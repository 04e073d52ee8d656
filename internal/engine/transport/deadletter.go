package transport

import (
	"context"
	"time"
)

// DeadLetterQueue reads and purges the messages one queue gave up on: Service Bus moves a
// message to the queue's dead-letter subqueue after MaxDeliveryCount failed deliveries (or
// when it expires); the Functions queue trigger moves one to "<queue>-poison" after
// maxDequeueCount. Dead letters count against the Service Bus entity's size quota until
// they are purged, and a full entity refuses every send (throttled), so they must not pile
// up unseen.
//
// Implementations need only the rights the app already has to receive from the queue
// (Azure Service Bus Data Receiver; on a Storage queue, Storage Queue Data Contributor).
type DeadLetterQueue interface {
	// Queue is the name of the queue whose dead letters these are (not the dead-letter
	// queue's own name).
	Queue() string
	// Count counts the dead letters, up to a limit of the implementation's; see
	// DeadLetterCount.AtLeast.
	Count(ctx context.Context) (DeadLetterCount, error)
	// Peek returns up to max dead letters, oldest first, without removing them.
	Peek(ctx context.Context, max int) ([]DeadLetter, error)
	// Purge deletes every dead letter there is when it starts and returns how many it
	// deleted (on the Storage queue: the approximate count read just before).
	Purge(ctx context.Context) (int64, error)
}

// DeadLetterCount is the number of dead letters of one queue.
type DeadLetterCount struct {
	// Queue is the queue whose dead letters these are.
	Queue string `json:"queue"`
	// Count is the number of dead letters: the service's approximate message count on the
	// Storage queue, the number peeked on Service Bus.
	Count int64 `json:"count"`
	// AtLeast is true when counting stopped at its limit: there are Count or more.
	AtLeast bool `json:"atLeast"`
}

// DeadLetter is one dead-lettered message.
type DeadLetter struct {
	// ID is the message ID: on Service Bus the ID it was sent with ("<run>/<index>/e<epoch>"),
	// on the Storage queue the poison queue's own message ID (the queue keeps no sender ID).
	ID string `json:"id"`
	// Body is the message body as sent (the Storage queue's base64 decoded).
	Body []byte `json:"body"`
	// Reason and Description are what the broker recorded when it dead-lettered the message
	// (Service Bus: MaxDeliveryCountExceeded, TTLExpiredException, ...); empty on the Storage
	// queue, which records none.
	Reason      string `json:"reason"`
	Description string `json:"description"`
	// DeliveryCount is how often the message was delivered before it was given up on (0 when
	// the service does not say).
	DeliveryCount int `json:"deliveryCount"`
	// Enqueued is when the message entered the queue it is in now (zero when unknown).
	Enqueued time.Time `json:"enqueued"`
}
