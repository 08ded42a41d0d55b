package cosmosstore_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
	"github.com/nimbus-go/functions-subscriber/internal/inbox/cosmosstore"
	"github.com/nimbus-go/functions-subscriber/internal/testenv"
)

// exercise runs every store operation once on a Strong account.
func exercise(t *testing.T, s *cosmosstore.Store) {
	t.Helper()
	ctx := context.Background()
	k := inbox.NewKey("billing", "auth")
	if ok, err := s.HasProcessed(ctx, k); err != nil || ok {
		t.Fatalf("HasProcessed = %v, %v", ok, err)
	}
	if err := s.RecordProcessed(ctx, k); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.HasProcessed(ctx, k); err != nil || !ok {
		t.Fatalf("HasProcessed = %v, %v", ok, err)
	}
	if _, err := s.PurgeExpired(ctx, "billing", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
}

// masterSig is the Cosmos master-key signature of a request on the
// database-account resource (empty resource type and link).
func masterSig(key, method, date string) string {
	raw, _ := base64.StdEncoding.DecodeString(key)
	mac := hmac.New(sha256.New, raw)
	mac.Write([]byte(strings.ToLower(method) + "\n\n\n" + strings.ToLower(date) + "\n\n"))
	return url.QueryEscape("type=master&ver=1.0&sig=" + base64.StdEncoding.EncodeToString(mac.Sum(nil)))
}

// Key auth signs every request; the store's own account read is signed
// exactly as the SDK signs its account read.
func TestKeyAuthentication(t *testing.T) {
	srv := testenv.StartCosmos(t, testenv.CosmosOptions{Consistency: "Strong"})
	for name, cfg := range map[string]cosmosstore.ClientConfig{
		"endpoint and key":  {Endpoint: srv.Endpoint, Key: srv.Key},
		"connection string": {ConnectionString: srv.ConnectionString()},
	} {
		t.Run(name, func(t *testing.T) {
			rec := newRecorder()
			cfg.ClientOptions = clientOptions(rec)
			acct, err := cosmosstore.NewAccount(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer acct.Client.Close()
			s, err := cosmosstore.New(acct, cosmosstore.Options{ContainerID: strings.ReplaceAll(name, " ", "")})
			if err != nil {
				t.Fatal(err)
			}
			exercise(t, s)
			storeReads, sdkReads := 0, 0
			for _, x := range rec.sent() {
				if !strings.HasPrefix(x.Auth, "type%3Dmaster%26ver%3D1.0%26sig%3D") || x.Date == "" {
					t.Fatalf("%s %s: Authorization %q, x-ms-date %q", x.Method, x.Path, x.Auth, x.Date)
				}
				if x.Method == http.MethodGet && x.Path == "/" {
					if x.Auth != masterSig(srv.Key, "GET", x.Date) {
						t.Fatalf("account read (store=%v) has a wrong signature", x.Store)
					}
					if x.Store {
						storeReads++
					} else {
						sdkReads++
					}
				}
			}
			if storeReads != 1 || sdkReads == 0 {
				t.Fatalf("account reads: store %d, SDK %d", storeReads, sdkReads)
			}
		})
	}
}

// fakeCredential hands out a fixed token and records the scopes asked for.
type fakeCredential struct {
	mu     sync.Mutex
	scopes []string
	calls  int
}

func (f *fakeCredential) GetToken(_ context.Context, o policy.TokenRequestOptions) (azcore.AccessToken, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.scopes = append(f.scopes, o.Scopes...)
	return azcore.AccessToken{Token: "fake-token", ExpiresOn: time.Now().Add(time.Hour)}, nil
}

// identityEndpoint fakes the App Service managed-identity endpoint
// (IDENTITY_ENDPOINT/IDENTITY_HEADER) and records the queries it gets.
func identityEndpoint(t *testing.T) *[]url.Values {
	t.Helper()
	var mu sync.Mutex
	var got []url.Values
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-IDENTITY-HEADER") != "identity-secret" {
			http.Error(w, "missing identity header", http.StatusUnauthorized)
			return
		}
		mu.Lock()
		got = append(got, r.URL.Query())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{
			"access_token": "mi-token",
			"expires_on":   strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10),
			"resource":     r.URL.Query().Get("resource"),
			"token_type":   "Bearer",
		})
	}))
	t.Cleanup(srv.Close)
	t.Setenv("IDENTITY_ENDPOINT", srv.URL+"/msi/token")
	t.Setenv("IDENTITY_HEADER", "identity-secret")
	return &got
}

// Entra ID paths: every request carries the token in the Cosmos format
// (azcosmos's bearer policy, unlike azcore's, also sends it over plain
// HTTP, so the local server suffices), for a given credential, a
// user-assigned managed identity and DefaultAzureCredential.
func TestEntraAuthentication(t *testing.T) {
	srv := testenv.StartCosmos(t, testenv.CosmosOptions{Consistency: "Strong"})
	cases := []struct {
		name      string
		setup     func(t *testing.T) (cosmosstore.ClientConfig, func(t *testing.T))
		wantToken string
	}{
		{"credential", func(t *testing.T) (cosmosstore.ClientConfig, func(*testing.T)) {
			cred := &fakeCredential{}
			return cosmosstore.ClientConfig{Endpoint: srv.Endpoint, Credential: cred}, func(t *testing.T) {
				for _, s := range cred.scopes {
					if s != "http://127.0.0.1/.default" {
						t.Fatalf("scope %q", s)
					}
				}
				if cred.calls == 0 {
					t.Fatal("credential never asked")
				}
			}
		}, "fake-token"},
		{"user-assigned managed identity", func(t *testing.T) (cosmosstore.ClientConfig, func(*testing.T)) {
			got := identityEndpoint(t)
			return cosmosstore.ClientConfig{Endpoint: srv.Endpoint, ManagedIdentityClientID: "11111111-2222-3333-4444-555555555555"}, func(t *testing.T) {
				if len(*got) == 0 {
					t.Fatal("identity endpoint never asked")
				}
				for _, q := range *got {
					if q.Get("client_id") != "11111111-2222-3333-4444-555555555555" || q.Get("resource") != "http://127.0.0.1" {
						t.Fatalf("identity request %v", q)
					}
				}
			}
		}, "mi-token"},
		{"DefaultAzureCredential", func(t *testing.T) (cosmosstore.ClientConfig, func(*testing.T)) {
			got := identityEndpoint(t)
			t.Setenv("AZURE_TOKEN_CREDENTIALS", "ManagedIdentityCredential")
			return cosmosstore.ClientConfig{Endpoint: srv.Endpoint}, func(t *testing.T) {
				if len(*got) == 0 {
					t.Fatal("identity endpoint never asked")
				}
				for _, q := range *got {
					if q.Get("client_id") != "" || q.Get("resource") != "http://127.0.0.1" {
						t.Fatalf("identity request %v", q)
					}
				}
			}
		}, "mi-token"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, check := tc.setup(t)
			rec := newRecorder()
			cfg.ClientOptions = clientOptions(rec)
			acct, err := cosmosstore.NewAccount(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer acct.Client.Close()
			s, err := cosmosstore.New(acct, cosmosstore.Options{ContainerID: "entra" + string(rune('a'+i))})
			if err != nil {
				t.Fatal(err)
			}
			exercise(t, s)
			want := "type=aad&ver=1.0&sig=" + tc.wantToken
			reads := 0
			for _, x := range rec.sent() {
				if x.Auth != want {
					t.Fatalf("%s %s: Authorization %q, want %q", x.Method, x.Path, x.Auth, want)
				}
				if isAccountRead(x) {
					reads++
				}
			}
			if reads != 1 {
				t.Fatalf("%d store account reads", reads)
			}
			check(t)
		})
	}
}

func TestClientConfigValidation(t *testing.T) {
	const key = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="
	cred := &fakeCredential{}
	good := []struct {
		name     string
		cfg      cosmosstore.ClientConfig
		endpoint string
	}{
		{"connection string", cosmosstore.ClientConfig{ConnectionString: "AccountEndpoint=https://acct.documents.azure.com:443/;AccountKey=" + key + ";"}, "https://acct.documents.azure.com:443/"},
		{"connection string, other order, lower-case, no trailing ;", cosmosstore.ClientConfig{ConnectionString: "accountkey=" + key + ";accountendpoint=https://acct.documents.azure.com:443/"}, "https://acct.documents.azure.com:443/"},
		{"connection string with extra entries", cosmosstore.ClientConfig{ConnectionString: "AccountEndpoint=http://127.0.0.1:1/;AccountKey=" + key + ";DisableServerCertificateValidation=True;"}, "http://127.0.0.1:1/"},
		{"endpoint and key", cosmosstore.ClientConfig{Endpoint: "https://acct.documents.azure.com:443/", Key: key}, "https://acct.documents.azure.com:443/"},
		{"endpoint and credential", cosmosstore.ClientConfig{Endpoint: "https://acct.documents.azure.com:443/", Credential: cred}, "https://acct.documents.azure.com:443/"},
		{"endpoint and managed identity", cosmosstore.ClientConfig{Endpoint: "https://acct.documents.azure.com:443/", ManagedIdentityClientID: "id"}, "https://acct.documents.azure.com:443/"},
		{"endpoint alone", cosmosstore.ClientConfig{Endpoint: "https://acct.documents.azure.com:443/"}, "https://acct.documents.azure.com:443/"},
	}
	for _, tc := range good {
		t.Run(tc.name, func(t *testing.T) {
			// Construction sends nothing, to Cosmos or to an identity endpoint.
			rec := newRecorder()
			tc.cfg.ClientOptions = clientOptions(rec)
			tc.cfg.CredentialOptions = &azcore.ClientOptions{Transport: rec}
			acct, err := cosmosstore.NewAccount(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer acct.Client.Close()
			if acct.Endpoint() != tc.endpoint {
				t.Fatalf("endpoint %q", acct.Endpoint())
			}
			if _, err := cosmosstore.New(acct, cosmosstore.Options{}); err != nil {
				t.Fatal(err)
			}
			if n := len(rec.sent()); n != 0 {
				t.Fatalf("%d requests at construction", n)
			}
		})
	}
	bad := map[string]cosmosstore.ClientConfig{
		"empty":                                  {},
		"connection string without key":          {ConnectionString: "AccountEndpoint=https://acct.documents.azure.com:443/;"},
		"connection string without endpoint":     {ConnectionString: "AccountKey=" + key},
		"connection string entry without =":      {ConnectionString: "AccountEndpoint=https://a/;" + key},
		"connection string plus endpoint":        {ConnectionString: "AccountEndpoint=https://a/;AccountKey=" + key, Endpoint: "https://a/"},
		"key not base64":                         {Endpoint: "https://a/", Key: "not*base64" + key[:10]},
		"key and credential":                     {Endpoint: "https://a/", Key: key, Credential: cred},
		"key and managed identity":               {Endpoint: "https://a/", Key: key, ManagedIdentityClientID: "id"},
		"managed identity and credential":        {Endpoint: "https://a/", ManagedIdentityClientID: "id", Credential: cred},
		"endpoint not a URL":                     {Endpoint: "acct.documents.azure.com", Key: key},
		"endpoint with another scheme":           {Endpoint: "ftp://acct/", Key: key},
		"Entra over plain HTTP to a remote host": {Endpoint: "http://acct.documents.azure.com/", Credential: cred},
	}
	for name, cfg := range bad {
		t.Run(name, func(t *testing.T) {
			_, err := cosmosstore.NewAccount(cfg)
			if !errors.Is(err, cosmosstore.ErrClientConfig) {
				t.Fatalf("err %v, want ErrClientConfig", err)
			}
			if strings.Contains(err.Error(), key[:20]) {
				t.Fatalf("error %q reveals the key", err)
			}
		})
	}
	if _, err := cosmosstore.NewClient(cosmosstore.ClientConfig{Endpoint: "https://acct.documents.azure.com:443/", Key: key}); err != nil {
		t.Fatal(err)
	}
}

func TestOptionsValidation(t *testing.T) {
	acct, err := cosmosstore.NewAccount(cosmosstore.ClientConfig{Endpoint: "http://127.0.0.1:1/", Credential: &fakeCredential{}, ClientOptions: &azcosmos.ClientOptions{}})
	if err != nil {
		t.Fatal(err)
	}
	defer acct.Client.Close()
	cases := []struct {
		name  string
		opts  cosmosstore.Options
		wants []string // settings the error names; none: valid
	}{
		{"defaults", cosmosstore.Options{}, nil},
		{"bounds", cosmosstore.Options{PurgeBatchSize: 1000, PurgeDeleteConcurrency: 64, DatabaseID: strings.Repeat("d", 255)}, nil},
		{"batch 1001", cosmosstore.Options{PurgeBatchSize: 1001}, []string{cosmosstore.SettingPurgeBatchSize}},
		{"batch -1", cosmosstore.Options{PurgeBatchSize: -1}, []string{cosmosstore.SettingPurgeBatchSize}},
		{"concurrency 65", cosmosstore.Options{PurgeDeleteConcurrency: 65}, []string{cosmosstore.SettingPurgeDeleteConcurrency}},
		{"database with /", cosmosstore.Options{DatabaseID: "a/b"}, []string{cosmosstore.SettingDatabaseID}},
		{"database too long", cosmosstore.Options{DatabaseID: strings.Repeat("d", 256)}, []string{cosmosstore.SettingDatabaseID}},
		{"container ending in a space", cosmosstore.Options{ContainerID: "inbox "}, []string{cosmosstore.SettingContainerID}},
		{"container blank", cosmosstore.Options{ContainerID: "   "}, []string{cosmosstore.SettingContainerID}},
		{"container with #", cosmosstore.Options{ContainerID: "in#box"}, []string{cosmosstore.SettingContainerID}},
		{"every problem at once", cosmosstore.Options{DatabaseID: `a\b`, ContainerID: "x?", PurgeBatchSize: 5000, PurgeDeleteConcurrency: -2},
			[]string{cosmosstore.SettingDatabaseID, cosmosstore.SettingContainerID, cosmosstore.SettingPurgeBatchSize, cosmosstore.SettingPurgeDeleteConcurrency}},
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
		})
	}
	if _, err := cosmosstore.New(nil, cosmosstore.Options{}); err == nil {
		t.Fatal("New(nil) succeeded")
	}
}
