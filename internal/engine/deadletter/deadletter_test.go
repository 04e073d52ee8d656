package deadletter

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/batonfn/baton/internal/engine/config"
)

// Open picks the dead-letter reader of the configured transport for the work and the control
// queue, in that order, without touching the network; Find names the queues it knows.
func TestOpen(t *testing.T) {
	storage := config.StorageConnection{Name: "AzureWebJobsStorage", ConnectionString: "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;" +
		"AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;QueueEndpoint=http://127.0.0.1:1/devstoreaccount1;"}
	sb := config.ServiceBusConnection{Name: config.SettingServiceBus,
		ConnectionString: "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"}
	tests := []struct {
		name     string
		cfg      config.Config
		wantType string
	}{
		{"storage queue", config.Config{Transport: config.TransportQueue, Storage: storage, WorkQueue: "w-q", ControlQueue: "c-q"}, "*storagequeue.PoisonQueue"},
		{"service bus", config.Config{Transport: config.TransportServiceBus, ServiceBus: sb, WorkQueue: "w-q", ControlQueue: "c-q"}, "*servicebus.DeadLetterQueue"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q, err := Open(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if len(q.List) != 2 || q.List[0].Queue() != "w-q" || q.List[1].Queue() != "c-q" {
				t.Fatalf("queues %v, want w-q then c-q", q.List)
			}
			for _, d := range q.List {
				if got := fmt.Sprintf("%T", d); got != tc.wantType {
					t.Errorf("reader of type %s, want %s", got, tc.wantType)
				}
			}
			if d, err := q.Find("c-q"); err != nil || d != q.List[1] {
				t.Errorf("Find(c-q): %v, %v", d, err)
			}
			if _, err := q.Find("other"); err == nil || !strings.Contains(err.Error(), `"other"`) || !strings.Contains(err.Error(), "w-q") {
				t.Errorf("Find(other): got %v, want an error naming it and the known queues", err)
			}
			if err := q.Close(context.Background()); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	if _, err := Open(config.Config{Transport: "kafka"}); err == nil || !strings.Contains(err.Error(), config.SettingTransport) {
		t.Errorf("unknown transport: got %v, want an error naming %s", err, config.SettingTransport)
	}
}
