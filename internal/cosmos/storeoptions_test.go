package cosmos_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
)

func TestStoreOptionsDefaults(t *testing.T) {
	t.Parallel()
	var o cosmos.StoreOptions
	if errs := o.ApplyDefaults("db"); len(errs) > 0 {
		t.Fatalf("defaults: %v", errs)
	}
	if o.DatabaseID != "db" || o.InitTimeout != cosmos.DefaultInitTimeout || o.Now == nil ||
		o.AutoCreateContainer == nil || !*o.AutoCreateContainer || o.AllowRelaxedConsistency || o.RelaxAs != "" {
		t.Fatalf("defaults applied as %+v", o)
	}

	off := false
	clock := func() time.Time { return time.Unix(7, 0) }
	o = cosmos.StoreOptions{DatabaseID: "mine", AutoCreateContainer: &off, InitTimeout: time.Second, Now: clock}
	if errs := o.ApplyDefaults("db"); len(errs) > 0 {
		t.Fatalf("set options: %v", errs)
	}
	if o.DatabaseID != "mine" || o.InitTimeout != time.Second || !o.Now().Equal(time.Unix(7, 0)) || *o.AutoCreateContainer {
		t.Fatalf("set options changed: %+v", o)
	}
	// The options keep their own copy: the caller's bool no longer counts.
	off = true
	if *o.AutoCreateContainer {
		t.Fatal("AutoCreateContainer follows the caller's variable after ApplyDefaults")
	}
}

func TestStoreOptionsProblems(t *testing.T) {
	t.Parallel()
	o := cosmos.StoreOptions{DatabaseID: "a/b", InitTimeout: -time.Second}
	errs := o.ApplyDefaults("db")
	if len(errs) != 2 {
		t.Fatalf("problems %v, want DatabaseID and InitTimeout", errs)
	}
	for i, field := range []string{"DatabaseID", "InitTimeout"} {
		if !strings.HasPrefix(errs[i].Error(), field) {
			t.Errorf("problem %d %q does not name %s", i, errs[i], field)
		}
	}
	if err := cosmos.CheckContainerID("c#"); err == nil || !strings.HasPrefix(err.Error(), "ContainerID") {
		t.Errorf("CheckContainerID(c#) = %v, want an error naming ContainerID", err)
	}
	if err := cosmos.CheckContainerID("inbox"); err != nil {
		t.Errorf("CheckContainerID(inbox) = %v", err)
	}
}

func TestStoreOptionsContainerOptions(t *testing.T) {
	t.Parallel()
	off := false
	o := cosmos.StoreOptions{DatabaseID: "db", AutoCreateContainer: &off, AllowRelaxedConsistency: true,
		RelaxAs: "Setting__Relaxed", InitTimeout: 5 * time.Second}
	got := o.ContainerOptions(cosmos.ContainerSpec{DatabaseID: "ignored", ContainerID: "c", PartitionKeyPath: "/pk",
		DefaultTTL: cosmos.TTLOnNoDefault, AutoCreate: true}, cosmos.StrongReason{Store: "the store", Why: "w", Accepting: "a"})
	want := cosmos.ContainerOptions{
		Spec: cosmos.ContainerSpec{DatabaseID: "db", ContainerID: "c", PartitionKeyPath: "/pk",
			DefaultTTL: cosmos.TTLOnNoDefault, AutoCreate: false},
		AllowRelaxedConsistency: true,
		Strong:                  cosmos.StrongReason{Store: "the store", Why: "w", Accepting: "a", RelaxAs: "Setting__Relaxed"},
		InitTimeout:             5 * time.Second,
	}
	if got != want {
		t.Fatalf("ContainerOptions\n got  %+v\n want %+v", got, want)
	}
	var d cosmos.StoreOptions
	if !d.ContainerOptions(cosmos.ContainerSpec{}, cosmos.StrongReason{}).Spec.AutoCreate {
		t.Error("nil AutoCreateContainer does not mean true")
	}
}
