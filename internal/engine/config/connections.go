package config

import (
	"fmt"
	"net/url"
	"strings"
)

// AzuriteAccountKey is the well-known, public key of Azurite's devstoreaccount1.
const AzuriteAccountKey = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

// AzuriteConnectionString is what UseDevelopmentStorage=true means: the Go storage SDKs do not
// understand the shorthand, so Baton expands it.
const AzuriteConnectionString = "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=" + AzuriteAccountKey +
	";BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;QueueEndpoint=http://127.0.0.1:10001/devstoreaccount1;TableEndpoint=http://127.0.0.1:10002/devstoreaccount1;"

// Credential settings (NAME__credential).
const credentialManagedIdentity = "managedidentity"

// CredentialSpec is how an identity-based connection authenticates.
type CredentialSpec struct {
	// ManagedIdentity is true when NAME__credential=managedidentity.
	ManagedIdentity bool
	// ClientID selects a user-assigned identity (NAME__clientId).
	ClientID string
	// ResourceID selects a user-assigned identity by resource ID (NAME__managedIdentityResourceId).
	ResourceID string
}

// StorageConnection is a storage account reached by connection string or by identity.
type StorageConnection struct {
	// Name is the connection name (the setting prefix), e.g. AzureWebJobsStorage.
	Name string
	// ConnectionString is set for key-based connections (always locally with Azurite).
	ConnectionString string
	// BlobServiceURL and QueueServiceURL are set for identity-based connections.
	BlobServiceURL  string
	QueueServiceURL string
	Credential      CredentialSpec
}

// ServiceBusConnection is a Service Bus namespace reached by connection string or by identity.
type ServiceBusConnection struct {
	Name             string
	ConnectionString string
	// Namespace is the fully qualified namespace, e.g. myns.servicebus.windows.net.
	Namespace  string
	Credential CredentialSpec
}

// ParseStorageConnection reads the storage connection NAME from the Functions settings:
// NAME (connection string, UseDevelopmentStorage=true allowed), else NAME__blobServiceUri /
// NAME__queueServiceUri / NAME__accountName with NAME__credential and NAME__clientId.
func ParseStorageConnection(name string, getenv Getenv) (StorageConnection, error) {
	c := StorageConnection{Name: name}
	if cs := strings.TrimSpace(getenv(name)); cs != "" {
		cs, err := ExpandStorageConnectionString(cs)
		if err != nil {
			return c, fmt.Errorf("%s: %w", name, err)
		}
		c.ConnectionString = cs
		return c, nil
	}
	c.BlobServiceURL = strings.TrimSpace(getenv(name + "__blobServiceUri"))
	if c.BlobServiceURL == "" {
		c.BlobServiceURL = strings.TrimSpace(getenv(name + "__serviceUri"))
	}
	c.QueueServiceURL = strings.TrimSpace(getenv(name + "__queueServiceUri"))
	if acct := strings.TrimSpace(getenv(name + "__accountName")); acct != "" {
		if c.BlobServiceURL == "" {
			c.BlobServiceURL = "https://" + acct + ".blob.core.windows.net"
		}
		if c.QueueServiceURL == "" {
			c.QueueServiceURL = "https://" + acct + ".queue.core.windows.net"
		}
	}
	if c.BlobServiceURL == "" {
		return c, fmt.Errorf("%s is not set: give a connection string in %s, or %s__blobServiceUri (or %s__accountName) for an identity-based connection",
			name, name, name, name)
	}
	for setting, v := range map[string]string{name + "__blobServiceUri": c.BlobServiceURL, name + "__queueServiceUri": c.QueueServiceURL} {
		if v == "" {
			continue
		}
		if err := checkServiceURL(v); err != nil {
			return c, fmt.Errorf("%s=%q: %w", setting, v, err)
		}
	}
	cred, err := parseCredential(name, getenv)
	c.Credential = cred
	return c, err
}

// ParseServiceBusConnection reads the Service Bus connection NAME: a connection string in NAME,
// or NAME__fullyQualifiedNamespace with NAME__credential and NAME__clientId.
func ParseServiceBusConnection(name string, getenv Getenv) (ServiceBusConnection, error) {
	c := ServiceBusConnection{Name: name}
	if cs := strings.TrimSpace(getenv(name)); cs != "" {
		if !strings.Contains(cs, "Endpoint=") {
			return c, fmt.Errorf("%s is not a Service Bus connection string: it needs Endpoint=sb://<namespace>.servicebus.windows.net/;SharedAccessKeyName=<policy>;SharedAccessKey=<key>", name)
		}
		c.ConnectionString = cs
		return c, nil
	}
	ns := strings.TrimSpace(getenv(name + "__fullyQualifiedNamespace"))
	if ns == "" {
		return c, fmt.Errorf("%s is not set: give a connection string in %s or the namespace in %s__fullyQualifiedNamespace (or set %s=queue to use a Storage queue)",
			name, name, name, SettingTransport)
	}
	if strings.Contains(ns, "://") || strings.Contains(ns, "/") {
		return c, fmt.Errorf("%s__fullyQualifiedNamespace=%q must be a host name like myns.servicebus.windows.net, without scheme or path", name, ns)
	}
	c.Namespace = ns
	cred, err := parseCredential(name, getenv)
	c.Credential = cred
	return c, err
}

func parseCredential(name string, getenv Getenv) (CredentialSpec, error) {
	var spec CredentialSpec
	kind := strings.ToLower(strings.TrimSpace(getenv(name + "__credential")))
	spec.ClientID = strings.TrimSpace(getenv(name + "__clientId"))
	spec.ResourceID = strings.TrimSpace(getenv(name + "__managedIdentityResourceId"))
	switch kind {
	case "":
		if spec.ClientID != "" || spec.ResourceID != "" {
			return spec, fmt.Errorf("%s__clientId or __managedIdentityResourceId is set but %s__credential is not: set %s__credential=managedidentity",
				name, name, name)
		}
	case credentialManagedIdentity:
		spec.ManagedIdentity = true
		if spec.ClientID != "" && spec.ResourceID != "" {
			return spec, fmt.Errorf("%s__clientId and %s__managedIdentityResourceId are both set: choose one", name, name)
		}
	default:
		return spec, fmt.Errorf("%s__credential=%q is not supported: the only value is managedidentity (leave it unset to use the developer's Azure CLI/azd login)", name, kind)
	}
	return spec, nil
}

func checkServiceURL(v string) error {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("not an http(s) service URL")
	}
	return nil
}

// ExpandStorageConnectionString turns UseDevelopmentStorage=true into the explicit Azurite
// account string (honouring DevelopmentStorageProxyUri's host) and checks that any other
// string names an account or an endpoint, which the Go SDKs need.
func ExpandStorageConnectionString(cs string) (string, error) {
	parts := map[string]string{}
	for _, kv := range strings.Split(cs, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if ok {
			parts[strings.ToLower(k)] = v
		}
	}
	if strings.EqualFold(parts["usedevelopmentstorage"], "true") {
		if proxy := parts["developmentstorageproxyuri"]; proxy != "" {
			u, err := url.Parse(proxy)
			if err != nil || u.Hostname() == "" {
				return "", fmt.Errorf("DevelopmentStorageProxyUri %q is not a URL", proxy)
			}
			return strings.ReplaceAll(AzuriteConnectionString, "127.0.0.1", u.Hostname()), nil
		}
		return AzuriteConnectionString, nil
	}
	if parts["accountname"] == "" && parts["blobendpoint"] == "" && parts["sharedaccesssignature"] == "" {
		return "", fmt.Errorf("connection string needs AccountName or BlobEndpoint (or UseDevelopmentStorage=true)")
	}
	return cs, nil
}

// ValidateContainerName checks Azure's container rules: 3–63 characters of lowercase letters,
// digits and single hyphens, starting and ending with a letter or digit.
func ValidateContainerName(name string) error { return validateDNSName("container", name) }

// ValidateQueueName checks Azure's queue name rules (the same as for containers).
func ValidateQueueName(name string) error { return validateDNSName("queue", name) }

func validateDNSName(kind, name string) error {
	if len(name) < 3 || len(name) > 63 {
		return fmt.Errorf("%s names are 3-63 characters", kind)
	}
	for i, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-'
		if !ok {
			return fmt.Errorf("%s names use only lowercase letters, digits and hyphens", kind)
		}
		if r == '-' && (i == 0 || i == len(name)-1 || name[i-1] == '-') {
			return fmt.Errorf("%s names cannot start or end with a hyphen or hold two in a row", kind)
		}
	}
	return nil
}

// ValidateBlobName accepts a single path segment of safe characters (the lease blob name).
func ValidateBlobName(name string) error {
	if name == "" || len(name) > 200 {
		return fmt.Errorf("blob name must be 1-200 characters")
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.'
		if !ok {
			return fmt.Errorf("blob name uses only letters, digits, '-', '_' and '.'")
		}
	}
	if name == "." || name == ".." {
		return fmt.Errorf(`blob name cannot be "." or ".."`)
	}
	return nil
}
