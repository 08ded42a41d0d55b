package cosmosstore_test

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/inbox/cosmosstore"
)

// The inbox container indexes only the paths its queries filter on: every
// property a purge or oldest-record query's WHERE clause names is in
// IndexedPaths, and an auto-created container gets the policy.
func TestQueriesFilterOnlyOnIndexedPaths(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Strong")
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	s := e.store(t, cosmosstore.Options{StoreOptions: cosmos.StoreOptions{DatabaseID: e.DB, Now: fixedClock(now.Add(-time.Hour))}, ContainerID: "idx"})
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if err := s.RecordProcessed(ctx, inbox.NewKey("ep", id)); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.OldestExpired(ctx, "ep", now); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PurgeExpired(ctx, "ep", now); err != nil || n != 2 {
		t.Fatalf("purged %d, %v", n, err)
	}
	prop := regexp.MustCompile(`\bc\.([A-Za-z_]+)`)
	queries := 0
	for _, q := range e.Rec.Sent() {
		if q.Query == "" {
			continue
		}
		queries++
		_, where, ok := strings.Cut(q.Query, " WHERE ")
		if !ok {
			t.Errorf("query without a filter: %s", q.Query)
			continue
		}
		for _, m := range prop.FindAllStringSubmatch(where, -1) {
			if !slices.Contains(cosmosstore.IndexedPaths, "/"+m[1]+"/?") {
				t.Errorf("query filters on %s, which the inbox indexing policy leaves out: %s", m[1], q.Query)
			}
		}
	}
	if queries < 2 {
		t.Fatalf("%d queries seen", queries)
	}

	resp, err := e.raw(t, e.DB, "idx").Read(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := resp.ContainerProperties.IndexingPolicy
	if p == nil || len(p.IncludedPaths) != len(cosmosstore.IndexedPaths) || len(p.ExcludedPaths) == 0 || p.ExcludedPaths[0].Path != "/*" {
		t.Fatalf("auto-created container's indexing policy %+v", p)
	}
	for i, ip := range p.IncludedPaths {
		if ip.Path != cosmosstore.IndexedPaths[i] {
			t.Errorf("included path %d = %s, want %s", i, ip.Path, cosmosstore.IndexedPaths[i])
		}
	}
}
