package cosmosstore_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/inbox/cosmosstore"
)

// testKey is a well-formed account key (the public emulator key).
const testKey = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="

func TestOptionsValidation(t *testing.T) {
	t.Parallel()
	acct, err := cosmos.NewAccount(cosmos.Config{Endpoint: "http://127.0.0.1:1/", Key: testKey})
	if err != nil {
		t.Fatal(err)
	}
	defer acct.Close()
	cases := []struct {
		name  string
		opts  cosmosstore.Options
		wants []string // option fields the error names; none: valid
	}{
		{"defaults", cosmosstore.Options{}, nil},
		{"bounds", cosmosstore.Options{StoreOptions: cosmos.StoreOptions{DatabaseID: strings.Repeat("d", 255)}, PurgeBatchSize: 1000, PurgeDeleteConcurrency: 64}, nil},
		{"batch 1001", cosmosstore.Options{PurgeBatchSize: 1001}, []string{"PurgeBatchSize"}},
		{"batch -1", cosmosstore.Options{PurgeBatchSize: -1}, []string{"PurgeBatchSize"}},
		{"concurrency 65", cosmosstore.Options{PurgeDeleteConcurrency: 65}, []string{"PurgeDeleteConcurrency"}},
		{"database with /", cosmosstore.Options{StoreOptions: cosmos.StoreOptions{DatabaseID: "a/b"}}, []string{"DatabaseID"}},
		{"database too long", cosmosstore.Options{StoreOptions: cosmos.StoreOptions{DatabaseID: strings.Repeat("d", 256)}}, []string{"DatabaseID"}},
		{"container ending in a space", cosmosstore.Options{ContainerID: "inbox "}, []string{"ContainerID"}},
		{"container blank", cosmosstore.Options{ContainerID: "   "}, []string{"ContainerID"}},
		{"container with #", cosmosstore.Options{ContainerID: "in#box"}, []string{"ContainerID"}},
		{"every problem at once", cosmosstore.Options{StoreOptions: cosmos.StoreOptions{DatabaseID: `a\b`}, ContainerID: "x?", PurgeBatchSize: 5000, PurgeDeleteConcurrency: -2},
			[]string{"DatabaseID", "ContainerID", "PurgeBatchSize", "PurgeDeleteConcurrency"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cosmosstore.New(acct, tc.opts)
			if len(tc.wants) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, cosmosstore.ErrInvalidOptions) {
				t.Fatalf("err %v, want ErrInvalidOptions", err)
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
			// Adapters name option fields, never app settings.
			if strings.Contains(err.Error(), "NimBus__") {
				t.Errorf("error %q names an app setting", err)
			}
		})
	}
	if _, err := cosmosstore.New(nil, cosmosstore.Options{}); err == nil {
		t.Fatal("New(nil) succeeded")
	}
}
