package servicebus

import (
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/batonfn/baton/internal/engine/transport"
)

// ContentTypeJSON is the ContentType of every Service Bus message: bodies are JSON envelopes.
const ContentTypeJSON = "application/json"

// toServiceBusMessage maps message i to an azservicebus message. Pure; validates the rules
// every transport shares. MessageID = ID (duplicate detection), ContentType
// application/json, ApplicationProperties = Properties (nil when empty),
// ScheduledEnqueueTime = NotBefore in UTC (nil when zero), TimeToLive = TTL, else
// defaultTTL, else nil (the entity's DefaultMessageTimeToLive, which also caps any TTL).
func toServiceBusMessage(i int, m transport.Message, defaultTTL time.Duration) (*azservicebus.Message, error) {
	if err := transport.Validate(i, m); err != nil {
		return nil, err
	}
	id, ct := m.ID, ContentTypeJSON
	out := &azservicebus.Message{
		MessageID:   &id,
		ContentType: &ct,
		Body:        m.Body,
	}
	if len(m.Properties) > 0 {
		out.ApplicationProperties = make(map[string]any, len(m.Properties))
		for k, v := range m.Properties {
			out.ApplicationProperties[k] = v
		}
	}
	if !m.NotBefore.IsZero() {
		t := m.NotBefore.UTC()
		out.ScheduledEnqueueTime = &t
	}
	ttl := m.TTL
	if ttl == 0 {
		ttl = defaultTTL
	}
	if ttl > 0 {
		out.TimeToLive = &ttl
	}
	return out, nil
}
