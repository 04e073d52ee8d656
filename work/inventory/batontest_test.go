package inventory_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/batonfn/baton/batontest"
	"github.com/batonfn/baton/internal/engine/azclient"
	"github.com/batonfn/baton/internal/tools/azurite"
	"github.com/batonfn/baton/work/inventory"
)

// The inventory job keeps its side of the exactly-once contract over a seeded container in
// Azurite, as Baton's app configures it at start-up (ConfigureStorage), and its report is the
// expected audit.
func TestInventory_Batontest(t *testing.T) {
	_, client, cont, spec := seededContainer(t)
	job := inventory.New(nil, inventory.Options{})
	job.ConfigureStorage(client, nil, nil)

	rep := batontest.Check(t, job, fmt.Sprintf(`{"container":%q,"prefix":"data/","partitionSize":40}`, cont))
	var got inventory.Summary
	if err := json.Unmarshal(rep.Aggregate, &got); err != nil {
		t.Fatalf("aggregate %s: %v", rep.Aggregate, err)
	}
	if want := expected(spec, 8); rep.Partitions != 8 || !reflect.DeepEqual(got, want) {
		t.Errorf("report: %d partitions, aggregate %+v; want 8 and %+v", rep.Partitions, got, want)
	}
}

// seededContainer is a fresh container in the shared Azurite holding seedSpec, and the client to read it.
func seededContainer(t *testing.T) (context.Context, *azblob.Client, string, []seedBlob) {
	t.Helper()
	ctx := testContext(t)
	client, err := azclient.Blob(azurite.Shared(t).Storage(), nil)
	if err != nil {
		t.Fatal(err)
	}
	cont := azurite.UniqueName(t, "inv")
	spec := seedSpec()
	seed(t, ctx, client, cont, spec)
	return ctx, client, cont, spec
}
