package servicebus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"
	"github.com/batonfn/baton/internal/engine/transport"
	"github.com/batonfn/baton/internal/engine/transport/transporttest"
)

// cond is the *amqp.Error the broker sends for condition c, as go-amqp decodes it.
func cond(c amqp.ErrCond, desc string) *amqp.Error {
	return &amqp.Error{Condition: c, Description: desc}
}

// The translation of every error the broker and azservicebus return, built from the SDK's own
// types: *amqp.Error with the broker's condition strings (what azservicebus passes through
// when it has no Code for them, server-busy among them, after its own retries), the same
// inside the link, session and connection errors go-amqp wraps them in, *azservicebus.Error
// with each Code, network and context errors.
func TestTranslateSBError(t *testing.T) {
	const (
		throttled = transporttest.Throttled
		transient = transporttest.Transient
		permanent = transporttest.Permanent
		tooLarge  = transporttest.TooLarge
		closed    = transporttest.Closed
	)
	busy := cond("com.microsoft:server-busy", "The request was terminated because the namespace is being throttled. Please wait 10 seconds and try again.")
	tests := []struct {
		name string
		err  error
		want transporttest.Class
	}{
		{"nil", nil, ""},

		// Throttling and quotas: back off, then send again.
		{"server busy, raw after the SDK's retries", busy, throttled},
		{"server busy, wrapped by a caller", fmt.Errorf("send: %w", busy), throttled},
		{"server busy detaching the link", &amqp.LinkError{RemoteErr: busy}, throttled},
		{"entity full (quota exceeded)", cond(amqp.ErrCondResourceLimitExceeded, "The maximum entity size has been reached or exceeded for Queue: 'WORK'."), throttled},
		{"namespace connection quota", &amqp.ConnError{RemoteErr: cond(amqp.ErrCondResourceLimitExceeded, "cannot allocate more handles")}, throttled},

		// Blips.
		{"service timeout, raw", cond("com.microsoft:timeout", ""), transient},
		{"operation cancelled by the service", cond("com.microsoft:operation-cancelled", ""), transient},
		{"internal error", cond(amqp.ErrCondInternalError, ""), transient},
		{"connection forced closed", &amqp.ConnError{RemoteErr: cond(amqp.ErrCondConnectionForced, "")}, transient},
		{"link detach forced", &amqp.LinkError{RemoteErr: cond(amqp.ErrCondDetachForced, "idle link")}, transient},
		{"link stolen", &amqp.LinkError{RemoteErr: cond(amqp.ErrCondStolen, "")}, transient},
		{"transfer limit exceeded", cond(amqp.ErrCondTransferLimitExceeded, ""), transient},
		{"link closed without a condition", &amqp.LinkError{}, transient},
		{"session closed without a condition", &amqp.SessionError{}, transient},
		{"connection closed without a condition", &amqp.ConnError{}, transient},
		{"code connlost", &azservicebus.Error{Code: azservicebus.CodeConnectionLost}, transient},
		{"code timeout", &azservicebus.Error{Code: azservicebus.CodeTimeout}, transient},
		{"dial refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, transient},
		{"dns timeout", &net.DNSError{Err: "i/o timeout", Name: "ns.servicebus.windows.net", IsTimeout: true}, transient},
		{"eof", fmt.Errorf("read frame: %w", io.EOF), transient},

		// The message does not fit.
		{"SDK: message too large for the batch", azservicebus.ErrMessageTooLarge, tooLarge},
		{"broker: message size exceeded", &amqp.LinkError{RemoteErr: cond(amqp.ErrCondMessageSizeExceeded, "The received message exceeds the limit")}, tooLarge},

		// Permanent until someone changes the namespace.
		{"unauthorized, raw", cond(amqp.ErrCondUnauthorizedAccess, "Unauthorized access. 'Send' claim(s) are required"), permanent},
		{"code unauthorized", &azservicebus.Error{Code: azservicebus.CodeUnauthorizedAccess}, permanent},
		{"entity not found, raw", cond(amqp.ErrCondNotFound, "The messaging entity 'sb://ns/work' could not be found"), permanent},
		{"code notfound", &azservicebus.Error{Code: azservicebus.CodeNotFound}, permanent},
		{"not allowed", cond(amqp.ErrCondNotAllowed, ""), permanent},
		{"entity disabled", cond("com.microsoft:entity-disabled", "Messaging entity is currently disabled"), permanent},
		{"entity deleted", &amqp.LinkError{RemoteErr: cond(amqp.ErrCondResourceDeleted, "")}, permanent},
		{"decode error", cond(amqp.ErrCondDecodeError, ""), permanent},
		{"code locklost", &azservicebus.Error{Code: azservicebus.CodeLockLost}, permanent},
		{"token: authentication failed", fmt.Errorf("get token: %w", &azidentity.AuthenticationFailedError{}), permanent},
		{"unknown condition", cond("com.example:new-condition", ""), permanent},
		{"unknown error", errors.New("boom"), permanent},
		{"context cancelled", fmt.Errorf("send: %w", context.Canceled), permanent},
		{"context deadline", context.DeadlineExceeded, permanent},
		{"context deadline on a broken link", errors.Join(context.DeadlineExceeded, &amqp.LinkError{}), permanent},

		// Our own sender or connection closed.
		{"code closed", &azservicebus.Error{Code: azservicebus.CodeClosed}, closed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := translateSBError(tc.err)
			transporttest.CheckTranslated(t, tc.err, got, tc.want)
		})
	}
}

// A batch the namespace throttles after the SDK's own retries fails Send as throttled, with
// the count accepted before it, so the leader's pacer backs off and sends it again.
func TestServiceBusSender_Send_ServerBusyIsThrottled(t *testing.T) {
	busy := cond("com.microsoft:server-busy", "namespace throttled")
	f := &fakeBatches{budget: 350, failSend: 3, err: busy}
	s := newServiceBusSender(f, ServiceBusSenderOptions{Queue: "work"})
	err := s.Send(t.Context(), sbMessages(10))
	if !transport.IsThrottled(err) || !transport.IsTransient(err) {
		t.Fatalf("got %v want a throttled, transient error", err)
	}
	var amqpErr *amqp.Error
	if !errors.As(err, &amqpErr) || amqpErr.Condition != "com.microsoft:server-busy" {
		t.Errorf("errors.As *amqp.Error: got %v", amqpErr)
	}
	if !strings.Contains(err.Error(), "6 of 10 accepted") {
		t.Errorf("error %q does not say how many were accepted", err)
	}
}
