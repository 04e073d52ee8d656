package servicebus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"
	"github.com/batonfn/baton/internal/engine/transport"
)

// AMQP error conditions Service Bus sends that go-amqp has no constant for.
const (
	condServerBusy         amqp.ErrCond = "com.microsoft:server-busy"
	condTimeout            amqp.ErrCond = "com.microsoft:timeout"
	condOperationCancelled amqp.ErrCond = "com.microsoft:operation-cancelled"
	condEntityDisabled     amqp.ErrCond = "com.microsoft:entity-disabled"
	condLockLost           amqp.ErrCond = "com.microsoft:message-lock-lost"
)

// conditionClass classifies the AMQP conditions the broker answers with. azservicebus turns
// only some of them into an *azservicebus.Error with a Code; the rest (server-busy above all,
// which the SDK retries itself and then returns as it came) reach the caller as a raw
// *amqp.Error, alone or inside an *amqp.LinkError, *amqp.SessionError or *amqp.ConnError.
var conditionClass = map[amqp.ErrCond]error{
	// The namespace throttles (a Standard namespace past its credits per second), or the
	// entity or namespace is full (resource-limit-exceeded: the queue's MaxSizeInMegabytes,
	// dead letters included, or the connection/link quota). Both pass once the load drops or
	// the queue drains: back off, then send again.
	condServerBusy:                    transport.ErrThrottled,
	amqp.ErrCondResourceLimitExceeded: transport.ErrThrottled,

	// Blips: the service timed out or cancelled the operation, the link or connection was
	// forced closed or moved; the SDK reconnects on the next call.
	condTimeout:                       transport.ErrTransient,
	condOperationCancelled:            transport.ErrTransient,
	amqp.ErrCondInternalError:         transport.ErrTransient,
	amqp.ErrCondConnectionForced:      transport.ErrTransient,
	amqp.ErrCondConnectionRedirect:    transport.ErrTransient,
	amqp.ErrCondFramingError:          transport.ErrTransient,
	amqp.ErrCondDetachForced:          transport.ErrTransient,
	amqp.ErrCondLinkRedirect:          transport.ErrTransient,
	amqp.ErrCondStolen:                transport.ErrTransient,
	amqp.ErrCondTransferLimitExceeded: transport.ErrTransient,
	amqp.ErrCondResourceLocked:        transport.ErrTransient,

	// The message itself is over the entity's limit.
	amqp.ErrCondMessageSizeExceeded: transport.ErrTooLarge,

	// Permanent until someone changes the namespace: no right to send, no such entity, the
	// entity disabled or deleted, a request the broker will never accept.
	amqp.ErrCondUnauthorizedAccess: nil,
	amqp.ErrCondNotFound:           nil,
	amqp.ErrCondNotAllowed:         nil,
	amqp.ErrCondResourceDeleted:    nil,
	amqp.ErrCondNotImplemented:     nil,
	amqp.ErrCondPreconditionFailed: nil,
	amqp.ErrCondInvalidField:       nil,
	amqp.ErrCondDecodeError:        nil,
	amqp.ErrCondIllegalState:       nil,
	condEntityDisabled:             nil,
	condLockLost:                   nil,
}

// translateSBError is the one place azservicebus errors are classified, most specific first,
// keeping the SDK's error in the chain: cancellation and deadlines as is; a message too large
// → ErrTooLarge; an AMQP condition → its class in conditionClass; an *azservicebus.Error by
// Code → transient (connlost, timeout), ErrClosed (closed) or permanent; a link, session or
// connection closed without a condition, a network error or unexpected EOF → transient;
// anything else (an azidentity token failure among them) → permanent.
func translateSBError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if errors.Is(err, azservicebus.ErrMessageTooLarge) {
		return fmt.Errorf("%w: %w", transport.ErrTooLarge, err)
	}
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) {
		if class, known := conditionClass[amqpErr.Condition]; known {
			return mark(err, class)
		}
	}
	var sbErr *azservicebus.Error
	if errors.As(err, &sbErr) {
		switch sbErr.Code {
		case azservicebus.CodeConnectionLost, azservicebus.CodeTimeout:
			return transport.MarkTransient(err)
		case azservicebus.CodeClosed:
			return fmt.Errorf("%w: %w", transport.ErrClosed, err)
		}
		return err
	}
	var (
		linkErr *amqp.LinkError
		sessErr *amqp.SessionError
		connErr *amqp.ConnError
		netErr  net.Error
	)
	if errors.As(err, &linkErr) || errors.As(err, &sessErr) || errors.As(err, &connErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return transport.MarkTransient(err)
	}
	return err
}

// mark applies one class of conditionClass to err.
func mark(err, class error) error {
	switch class {
	case transport.ErrThrottled:
		return transport.MarkThrottled(err)
	case transport.ErrTransient:
		return transport.MarkTransient(err)
	case transport.ErrTooLarge:
		return fmt.Errorf("%w: %w", transport.ErrTooLarge, err)
	}
	return err
}
