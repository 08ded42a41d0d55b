package cosmos_test

import (
	"context"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// Every request sent with a context carrying a telemetry.Charge adds its
// x-ms-request-charge to it, failed ones included (the local server charges
// 1 RU per request); requests without one are not counted anywhere.
func TestRequestChargeIsSummedOnTheContext(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Strong")
	c, err := e.Account.Container(cosmos.ContainerOptions{Spec: cosmos.ContainerSpec{
		DatabaseID: e.DB, ContainerID: "charged", PartitionKeyPath: "/id", AutoCreate: true,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := len(e.Rec.Sent())
	ctx, charge := telemetry.WithCharge(context.Background())
	pk := azcosmos.NewPartitionKeyString("doc")
	if _, err := c.Client().CreateItem(ctx, pk, []byte(`{"id":"doc"}`), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client().CreateItem(ctx, pk, []byte(`{"id":"doc"}`), nil); cosmos.StatusCode(err) != 409 {
		t.Fatalf("second create: %v", err)
	}
	if _, err := c.Client().ReadItem(ctx, azcosmos.NewPartitionKeyString("missing"), "missing", nil); !cosmos.IsNotFound(err) {
		t.Fatalf("read of a missing item: %v", err)
	}
	sent := len(e.Rec.Sent()) - before
	if sent < 3 || charge.Requests() != int64(sent) || charge.RequestUnits() != float64(sent) {
		t.Fatalf("charge %v RU over %d requests; %d requests were sent", charge.RequestUnits(), charge.Requests(), sent)
	}
	if _, err := c.Client().ReadItem(context.Background(), pk, "doc", nil); err != nil {
		t.Fatal(err)
	}
	if charge.Requests() != int64(sent) {
		t.Fatal("a request without the charge on its context was counted")
	}
}
