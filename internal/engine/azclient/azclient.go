// Package azclient builds the Azure SDK clients from Baton's connection settings (package
// config): a connection string, or identity-based settings with a managed identity or the
// default credential chain. It is the one place that turns settings into SDK clients, so the
// settings stay plain values and the domain packages never link an SDK.
package azclient

import (
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/batonfn/baton/internal/engine/config"
)

// Credential builds the credential an identity-based connection uses: a managed identity
// (user-assigned when a client or resource ID is given) when NAME__credential=managedidentity,
// else the default chain (environment, workload identity, managed identity, Azure CLI, azd).
// The Go DefaultAzureCredential takes no client ID, which is why the managed-identity case is
// built explicitly.
func Credential(s config.CredentialSpec) (azcore.TokenCredential, error) {
	if s.ManagedIdentity {
		opts := &azidentity.ManagedIdentityCredentialOptions{}
		switch {
		case s.ClientID != "":
			opts.ID = azidentity.ClientID(s.ClientID)
		case s.ResourceID != "":
			opts.ID = azidentity.ResourceID(s.ResourceID)
		}
		return azidentity.NewManagedIdentityCredential(opts)
	}
	return azidentity.NewDefaultAzureCredential(nil)
}

// NewBlobClient builds the blob service client of the connection. No network I/O happens here.
func Blob(c config.StorageConnection, opts *azblob.ClientOptions) (*azblob.Client, error) {
	if c.ConnectionString != "" {
		cl, err := azblob.NewClientFromConnectionString(c.ConnectionString, opts)
		if err != nil {
			return nil, fmt.Errorf("%s: blob client: %w", c.Name, err)
		}
		return cl, nil
	}
	cred, err := Credential(c.Credential)
	if err != nil {
		return nil, fmt.Errorf("%s: credential: %w", c.Name, err)
	}
	cl, err := azblob.NewClient(c.BlobServiceURL, cred, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: blob client: %w", c.Name, err)
	}
	return cl, nil
}

// NewQueueClient builds the queue service client of the connection.
func Queue(c config.StorageConnection, opts *azqueue.ClientOptions) (*azqueue.ServiceClient, error) {
	if c.ConnectionString != "" {
		cl, err := azqueue.NewServiceClientFromConnectionString(c.ConnectionString, opts)
		if err != nil {
			return nil, fmt.Errorf("%s: queue client: %w", c.Name, err)
		}
		return cl, nil
	}
	if c.QueueServiceURL == "" {
		return nil, fmt.Errorf("%s__queueServiceUri is not set: the Storage-queue transport needs it", c.Name)
	}
	cred, err := Credential(c.Credential)
	if err != nil {
		return nil, fmt.Errorf("%s: credential: %w", c.Name, err)
	}
	cl, err := azqueue.NewServiceClient(c.QueueServiceURL, cred, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: queue client: %w", c.Name, err)
	}
	return cl, nil
}

// NewClient builds the Service Bus client of the connection.
func ServiceBus(c config.ServiceBusConnection, opts *azservicebus.ClientOptions) (*azservicebus.Client, error) {
	if c.ConnectionString != "" {
		cl, err := azservicebus.NewClientFromConnectionString(c.ConnectionString, opts)
		if err != nil {
			return nil, fmt.Errorf("%s: service bus client: %w", c.Name, err)
		}
		return cl, nil
	}
	cred, err := Credential(c.Credential)
	if err != nil {
		return nil, fmt.Errorf("%s: credential: %w", c.Name, err)
	}
	cl, err := azservicebus.NewClient(c.Namespace, cred, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: service bus client: %w", c.Name, err)
	}
	return cl, nil
}
