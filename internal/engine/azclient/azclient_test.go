package azclient

import (
	"testing"

	"github.com/batonfn/baton/internal/engine/config"
)

// Identity-based settings become SDK clients without any network I/O: a user-assigned managed
// identity by client or resource ID, or the default chain; a connection string is used as is.
func TestClientsFromSettings(t *testing.T) {
	for _, spec := range []config.CredentialSpec{
		{ManagedIdentity: true, ClientID: "00000000-0000-0000-0000-000000000001"},
		{ManagedIdentity: true, ResourceID: "/subscriptions/s/resourceGroups/g/providers/Microsoft.ManagedIdentity/userAssignedIdentities/id"},
		{ManagedIdentity: true},
	} {
		if _, err := Credential(spec); err != nil {
			t.Errorf("credential %+v: %v", spec, err)
		}
	}
	sc := config.StorageConnection{Name: "AzureWebJobsStorage", BlobServiceURL: "https://acct.blob.core.windows.net",
		QueueServiceURL: "https://acct.queue.core.windows.net", Credential: config.CredentialSpec{ManagedIdentity: true, ClientID: "c"}}
	if _, err := Blob(sc, nil); err != nil {
		t.Errorf("blob client: %v", err)
	}
	if _, err := Queue(sc, nil); err != nil {
		t.Errorf("queue client: %v", err)
	}
	bad := config.StorageConnection{Name: "X", ConnectionString: "nonsense"}
	if _, err := Blob(bad, nil); err == nil {
		t.Error("a broken connection string gave a client")
	}
}
