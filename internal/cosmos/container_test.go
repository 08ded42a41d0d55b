package cosmos_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/cosmos/cosmostest"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
)

func readProps(t *testing.T, acct *cosmos.Account, db, container string) *azcosmos.ContainerProperties {
	t.Helper()
	c, err := acct.Client().NewContainer(db, container)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Read(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp.ContainerProperties
}

// Get-or-create: a missing container is created from the spec (partition
// key, indexing policy, default TTL); an existing matching one is only read.
func TestEnsureContainerCreatesFromSpec(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Session")
	ctx := context.Background()
	excluded := &azcosmos.IndexingPolicy{
		Automatic:     true,
		IndexingMode:  azcosmos.IndexingModeConsistent,
		IncludedPaths: []azcosmos.IncludedPath{{Path: "/*"}},
		ExcludedPaths: []azcosmos.ExcludedPath{{Path: "/payload/?"}},
	}
	cases := []struct {
		name    string
		spec    cosmos.ContainerSpec
		wantTTL *int32
	}{
		{"no TTL", cosmos.ContainerSpec{ContainerID: "plain", PartitionKeyPath: "/id"}, nil},
		{"TTL on without default", cosmos.ContainerSpec{ContainerID: "ttlon", PartitionKeyPath: "/pk", DefaultTTL: cosmos.TTLOnNoDefault}, ptr(int32(-1))},
		{"TTL one day, indexing policy", cosmos.ContainerSpec{ContainerID: "ttlday", PartitionKeyPath: "/endpointId", DefaultTTL: cosmos.TTLSeconds(24 * 60 * 60 * 1e9), IndexingPolicy: excluded}, ptr(int32(86400))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec
			spec.DatabaseID, spec.AutoCreate = e.DB, true
			if err := e.Account.EnsureContainer(ctx, spec); err != nil {
				t.Fatal(err)
			}
			p := readProps(t, e.Account, e.DB, spec.ContainerID)
			if got := p.PartitionKeyDefinition.Paths; len(got) != 1 || got[0] != spec.PartitionKeyPath {
				t.Errorf("partition key paths %v", got)
			}
			if (p.DefaultTimeToLive == nil) != (tc.wantTTL == nil) || (tc.wantTTL != nil && *p.DefaultTimeToLive != *tc.wantTTL) {
				t.Errorf("default TTL %v, want %v", deref(p.DefaultTimeToLive), deref(tc.wantTTL))
			}
			if spec.IndexingPolicy != nil {
				if p.IndexingPolicy == nil || len(p.IndexingPolicy.ExcludedPaths) == 0 || p.IndexingPolicy.ExcludedPaths[0].Path != "/payload/?" {
					t.Errorf("indexing policy %+v", p.IndexingPolicy)
				}
			}
			// A second ensure reads and creates nothing.
			before := e.Rec.Count(func(s cosmostest.Sent) bool { return s.Method == http.MethodPost })
			if err := e.Account.EnsureContainer(ctx, spec); err != nil {
				t.Fatal(err)
			}
			if n := e.Rec.Count(func(s cosmostest.Sent) bool { return s.Method == http.MethodPost }); n != before {
				t.Errorf("%d creates on an existing container", n-before)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func deref(p *int32) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprint(*p)
}

// Existing containers that do not fit the spec, and missing ones with
// AutoCreate off, are operator errors naming what to fix.
func TestEnsureContainerRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Session")
	ctx := context.Background()
	if _, err := e.Account.Client().CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: e.DB}, nil); err != nil {
		t.Fatal(err)
	}
	db, _ := e.Account.Client().NewDatabase(e.DB)
	for id, path := range map[string]string{"byendpoint": "/endpointId", "byid": "/id"} {
		if _, err := db.CreateContainer(ctx, azcosmos.ContainerProperties{ID: id, PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{path}}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	isPost := func(s cosmostest.Sent) bool { return s.Method == http.MethodPost }
	setupPosts := e.Rec.Count(isPost)
	cases := []struct {
		name  string
		spec  cosmos.ContainerSpec
		wants []string
	}{
		{"other partition key", cosmos.ContainerSpec{ContainerID: "byendpoint", PartitionKeyPath: "/id", AutoCreate: true}, []string{`"byendpoint"`, "/endpointId", "want [/id]"}},
		{"missing, AutoCreate off", cosmos.ContainerSpec{ContainerID: "absent", PartitionKeyPath: "/id", DefaultTTL: cosmos.TTLOnNoDefault}, []string{`"absent"`, strconv.Quote(e.DB), "AutoCreateContainer is false", "partition key /id", "TTL on without a default"}},
		{"TTL wanted, container has none", cosmos.ContainerSpec{ContainerID: "byid", PartitionKeyPath: "/id", DefaultTTL: cosmos.TTLOnNoDefault}, []string{`"byid"`, "TTL off"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec
			spec.DatabaseID = e.DB
			err := e.Account.EnsureContainer(ctx, spec)
			var oe subscriber.OperatorError
			if !errors.Is(err, cosmos.ErrContainer) || !errors.As(err, &oe) {
				t.Fatalf("err %v, want an operator error wrapping ErrContainer", err)
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	if n := e.Rec.Count(isPost) - setupPosts; n != 0 {
		t.Fatalf("%d creates while refusing", n)
	}
	// The TTL check applies only when the spec wants TTL.
	if err := e.Account.EnsureContainer(ctx, cosmos.ContainerSpec{DatabaseID: e.DB, ContainerID: "byid", PartitionKeyPath: "/id"}); err != nil {
		t.Fatal(err)
	}
}

func TestContainerSpecValidation(t *testing.T) {
	t.Parallel()
	acct, err := cosmos.NewAccount(cosmos.Config{Endpoint: "http://127.0.0.1:1/", Key: testenvKey})
	if err != nil {
		t.Fatal(err)
	}
	defer acct.Close()
	good := cosmos.ContainerSpec{DatabaseID: "db", ContainerID: "c", PartitionKeyPath: "/id"}
	cases := []struct {
		name  string
		mod   func(*cosmos.ContainerOptions)
		wants []string
	}{
		{"valid", func(*cosmos.ContainerOptions) {}, nil},
		{"bad database", func(o *cosmos.ContainerOptions) { o.Spec.DatabaseID = "a/b" }, []string{"DatabaseID"}},
		{"bad container", func(o *cosmos.ContainerOptions) { o.Spec.ContainerID = "" }, []string{"ContainerID"}},
		{"path without slash", func(o *cosmos.ContainerOptions) { o.Spec.PartitionKeyPath = "id" }, []string{"PartitionKeyPath"}},
		{"bare slash", func(o *cosmos.ContainerOptions) { o.Spec.PartitionKeyPath = "/" }, []string{"PartitionKeyPath"}},
		{"TTL below -1", func(o *cosmos.ContainerOptions) { o.Spec.DefaultTTL = -2 }, []string{"DefaultTTL"}},
		{"negative init timeout", func(o *cosmos.ContainerOptions) { o.InitTimeout = -1 }, []string{"InitTimeout"}},
		{"all at once", func(o *cosmos.ContainerOptions) { o.Spec = cosmos.ContainerSpec{DatabaseID: "x#", ContainerID: "y?"} },
			[]string{"DatabaseID", "ContainerID", "PartitionKeyPath"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := cosmos.ContainerOptions{Spec: good}
			tc.mod(&o)
			_, err := acct.Container(o)
			if len(tc.wants) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, cosmos.ErrInvalidSpec) {
				t.Fatalf("err %v, want ErrInvalidSpec", err)
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
			// An invalid spec is refused before any request (the account's
			// address has no server behind it); InitTimeout is not
			// EnsureContainer's to check.
			if o.InitTimeout == 0 {
				if errEnsure := acct.EnsureContainer(context.Background(), o.Spec); !errors.Is(errEnsure, cosmos.ErrInvalidSpec) {
					t.Errorf("EnsureContainer: %v, want ErrInvalidSpec", errEnsure)
				}
			}
		})
	}
	var nilAcct *cosmos.Account
	if _, err := nilAcct.Container(cosmos.ContainerOptions{Spec: good}); err == nil {
		t.Fatal("Container on a nil account succeeded")
	}
}

const testenvKey = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="

// Container.Ready: Strong check then ensure, once; a relaxed account is
// refused before any container request, on every use, with the operator
// error naming the level, Strong and the option.
func TestContainerReady(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		account string
		relaxed bool
		wantErr bool
	}{
		{"Strong", false, false},
		{"Session", false, true},
		{"Eventual", false, true},
		{"Session", true, false},
	} {
		t.Run(fmt.Sprintf("%s relaxed=%v", tc.account, tc.relaxed), func(t *testing.T) {
			e := newEnv(t, tc.account)
			c, err := e.Account.Container(cosmos.ContainerOptions{
				Spec:                    cosmos.ContainerSpec{DatabaseID: e.DB, ContainerID: "c", PartitionKeyPath: "/id", AutoCreate: true},
				AllowRelaxedConsistency: tc.relaxed,
				Strong:                  cosmos.StrongReason{Store: "the test store", Why: "tests need it", Accepting: "flaky tests"},
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			var wg sync.WaitGroup
			errs := make([]error, 8)
			for i := range errs {
				wg.Add(1)
				go func() { defer wg.Done(); errs[i] = c.Ready(ctx) }()
			}
			wg.Wait()
			errs = append(errs, c.Ready(ctx))
			containerTouches := e.Rec.Count(func(s cosmostest.Sent) bool { return strings.HasPrefix(s.Path, "/dbs") })
			reads := e.Rec.Count(cosmostest.IsAccountRead)
			if !tc.wantErr {
				if err := errors.Join(errs...); err != nil {
					t.Fatal(err)
				}
				want := 1
				if tc.relaxed {
					want = 0
				}
				if reads != want {
					t.Fatalf("%d account reads, want %d", reads, want)
				}
				if containerTouches == 0 {
					t.Fatal("container never ensured")
				}
				return
			}
			for _, err := range errs {
				var oe subscriber.OperatorError
				if !errors.Is(err, cosmos.ErrRelaxedConsistency) || !errors.As(err, &oe) {
					t.Fatalf("err %v", err)
				}
				for _, w := range []string{"Strong", tc.account, "AllowRelaxedConsistency=true", "the test store", "tests need it", "flaky tests"} {
					if !strings.Contains(oe.OperatorMessage(), w) {
						t.Fatalf("message %q lacks %q", oe.OperatorMessage(), w)
					}
				}
			}
			if containerTouches != 0 {
				t.Fatalf("%d container requests despite the rejection", containerTouches)
			}
			if reads < 2 || reads > len(errs) {
				t.Fatalf("%d account reads: a failed check must be retried by later uses", reads)
			}
		})
	}
}
