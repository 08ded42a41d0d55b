package cosmos_test

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

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/cosmos/cosmostest"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
)

// masterSig is the Cosmos master-key signature of a request on the
// database-account resource (empty resource type and link).
func masterSig(key, method, date string) string {
	raw, _ := base64.StdEncoding.DecodeString(key)
	mac := hmac.New(sha256.New, raw)
	mac.Write([]byte(strings.ToLower(method) + "\n\n\n" + strings.ToLower(date) + "\n\n"))
	return url.QueryEscape("type=master&ver=1.0&sig=" + base64.StdEncoding.EncodeToString(mac.Sum(nil)))
}

// Key auth signs every request; the adapter's own account read is signed
// exactly as the SDK signs its account read.
func TestKeyAuthentication(t *testing.T) {
	t.Parallel()
	srv := testenv.SharedCosmos(t, testenv.CosmosOptions{Consistency: "Strong"})
	db := srv.Database(t)
	for name, cfg := range map[string]cosmos.Config{
		"endpoint and key":  {Endpoint: srv.Endpoint, Key: srv.Key},
		"connection string": {ConnectionString: srv.ConnectionString()},
	} {
		t.Run(name, func(t *testing.T) {
			acct, rec := recordedAccount(t, cfg)
			exercise(t, acct, db, strings.ReplaceAll(name, " ", ""))
			adapterReads, sdkReads := 0, 0
			for _, x := range rec.Sent() {
				if !strings.HasPrefix(x.Auth, "type%3Dmaster%26ver%3D1.0%26sig%3D") || x.Date == "" {
					t.Fatalf("%s %s: Authorization %q, x-ms-date %q", x.Method, x.Path, x.Auth, x.Date)
				}
				if x.Method == http.MethodGet && x.Path == "/" {
					if x.Auth != masterSig(srv.Key, "GET", x.Date) {
						t.Fatalf("account read (adapter=%v) has a wrong signature", x.Adapter)
					}
					if x.Adapter {
						adapterReads++
					} else {
						sdkReads++
					}
				}
			}
			if adapterReads != 1 || sdkReads == 0 {
				t.Fatalf("account reads: adapter %d, SDK %d", adapterReads, sdkReads)
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
// recordedAccount opens an account for cfg whose requests rec records,
// without SDK retries; the client is closed when t ends.
func recordedAccount(t *testing.T, cfg cosmos.Config) (*cosmos.Account, *cosmostest.Recorder) {
	t.Helper()
	rec := cosmostest.NewRecorder()
	cfg.ClientOptions = cosmostest.ClientOptions(rec)
	cfg.Retry = cosmostest.NoRetry
	acct, err := cosmos.NewAccount(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(acct.Close)
	return acct, rec
}

// identityAsked fails t unless the identity endpoint was asked for a token
// for the local account, each time for the managed identity clientID ("" for
// the system-assigned one).
func identityAsked(t *testing.T, got []url.Values, clientID string) {
	t.Helper()
	if len(got) == 0 {
		t.Fatal("identity endpoint never asked")
	}
	for _, q := range got {
		if q.Get("client_id") != clientID || q.Get("resource") != "http://127.0.0.1" {
			t.Fatalf("identity request %v", q)
		}
	}
}

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
			// Two minutes: inside the five minutes before expiry in which
			// the process-wide managed identity token cache asks again, so
			// a second run of the test in one process (-count=2) reaches
			// this endpoint too.
			"expires_on": strconv.FormatInt(time.Now().Add(2*time.Minute).Unix(), 10),
			"resource":   r.URL.Query().Get("resource"),
			"token_type": "Bearer",
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
	srv := testenv.SharedCosmos(t, testenv.CosmosOptions{Consistency: "Strong"})
	db := srv.Database(t)
	cases := []struct {
		name      string
		setup     func(t *testing.T) (cosmos.Config, func(t *testing.T))
		wantToken string
	}{
		{"credential", func(t *testing.T) (cosmos.Config, func(*testing.T)) {
			cred := &fakeCredential{}
			return cosmos.Config{Endpoint: srv.Endpoint, Credential: cred}, func(t *testing.T) {
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
		{"user-assigned managed identity", func(t *testing.T) (cosmos.Config, func(*testing.T)) {
			got := identityEndpoint(t)
			return cosmos.Config{Endpoint: srv.Endpoint, ManagedIdentityClientID: "11111111-2222-3333-4444-555555555555"}, func(t *testing.T) {
				identityAsked(t, *got, "11111111-2222-3333-4444-555555555555")
			}
		}, "mi-token"},
		{"DefaultAzureCredential", func(t *testing.T) (cosmos.Config, func(*testing.T)) {
			got := identityEndpoint(t)
			t.Setenv("AZURE_TOKEN_CREDENTIALS", "ManagedIdentityCredential")
			return cosmos.Config{Endpoint: srv.Endpoint}, func(t *testing.T) {
				identityAsked(t, *got, "")
			}
		}, "mi-token"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, check := tc.setup(t)
			acct, rec := recordedAccount(t, cfg)
			exercise(t, acct, db, "entra"+string(rune('a'+i)))
			want := "type=aad&ver=1.0&sig=" + tc.wantToken
			reads := 0
			for _, x := range rec.Sent() {
				if x.Auth != want {
					t.Fatalf("%s %s: Authorization %q, want %q", x.Method, x.Path, x.Auth, want)
				}
				if cosmostest.IsAccountRead(x) {
					reads++
				}
			}
			if reads != 1 {
				t.Fatalf("%d adapter account reads", reads)
			}
			check(t)
		})
	}
}

func TestClientConfigValidation(t *testing.T) {
	t.Parallel()
	const key = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="
	cred := &fakeCredential{}
	good := []struct {
		name     string
		cfg      cosmos.Config
		endpoint string
	}{
		{"connection string", cosmos.Config{ConnectionString: "AccountEndpoint=https://acct.documents.azure.com:443/;AccountKey=" + key + ";"}, "https://acct.documents.azure.com:443/"},
		{"connection string, other order, lower-case, no trailing ;", cosmos.Config{ConnectionString: "accountkey=" + key + ";accountendpoint=https://acct.documents.azure.com:443/"}, "https://acct.documents.azure.com:443/"},
		{"connection string with extra entries", cosmos.Config{ConnectionString: "AccountEndpoint=http://127.0.0.1:1/;AccountKey=" + key + ";DisableServerCertificateValidation=True;"}, "http://127.0.0.1:1/"},
		{"endpoint and key", cosmos.Config{Endpoint: "https://acct.documents.azure.com:443/", Key: key}, "https://acct.documents.azure.com:443/"},
		{"endpoint and credential", cosmos.Config{Endpoint: "https://acct.documents.azure.com:443/", Credential: cred}, "https://acct.documents.azure.com:443/"},
		{"endpoint and managed identity", cosmos.Config{Endpoint: "https://acct.documents.azure.com:443/", ManagedIdentityClientID: "id"}, "https://acct.documents.azure.com:443/"},
		{"endpoint alone", cosmos.Config{Endpoint: "https://acct.documents.azure.com:443/"}, "https://acct.documents.azure.com:443/"},
	}
	for _, tc := range good {
		t.Run(tc.name, func(t *testing.T) {
			// Construction sends nothing, to Cosmos or to an identity endpoint.
			rec := cosmostest.NewRecorder()
			tc.cfg.ClientOptions = cosmostest.ClientOptions(rec)
			tc.cfg.CredentialOptions = &azcore.ClientOptions{Transport: rec}
			acct, err := cosmos.NewAccount(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer acct.Close()
			if acct.Endpoint() != tc.endpoint {
				t.Fatalf("endpoint %q", acct.Endpoint())
			}
			if _, err := acct.Container(cosmos.ContainerOptions{Spec: cosmos.ContainerSpec{DatabaseID: "db", ContainerID: "c", PartitionKeyPath: "/id"}}); err != nil {
				t.Fatal(err)
			}
			if n := len(rec.Sent()); n != 0 {
				t.Fatalf("%d requests at construction", n)
			}
		})
	}
	bad := map[string]cosmos.Config{
		"empty":                              {},
		"connection string without key":      {ConnectionString: "AccountEndpoint=https://acct.documents.azure.com:443/;"},
		"connection string without endpoint": {ConnectionString: "AccountKey=" + key},
		"connection string entry without =":  {ConnectionString: "AccountEndpoint=https://a/;" + key},
		"connection string plus endpoint":    {ConnectionString: "AccountEndpoint=https://a/;AccountKey=" + key, Endpoint: "https://a/"},
		// The settings refuse these strings too: one parser reads them.
		"connection string with AccountEndpoint twice": {ConnectionString: "AccountEndpoint=https://a/;accountendpoint=https://b/;AccountKey=" + key},
		"connection string with AccountKey twice":      {ConnectionString: "AccountEndpoint=https://a/;AccountKey=" + key + ";AccountKey=" + key},
		"connection string endpoint without a host":    {ConnectionString: "AccountEndpoint=https://:443/;AccountKey=" + key},
		"key not base64":                         {Endpoint: "https://a/", Key: "not*base64" + key[:10]},
		"key and credential":                     {Endpoint: "https://a/", Key: key, Credential: cred},
		"key and managed identity":               {Endpoint: "https://a/", Key: key, ManagedIdentityClientID: "id"},
		"managed identity and credential":        {Endpoint: "https://a/", ManagedIdentityClientID: "id", Credential: cred},
		"endpoint not a URL":                     {Endpoint: "acct.documents.azure.com", Key: key},
		"endpoint with another scheme":           {Endpoint: "ftp://acct/", Key: key},
		"Entra over plain HTTP to a remote host": {Endpoint: "http://acct.documents.azure.com/", Credential: cred},
		"retries in ClientOptions":               {Endpoint: "https://a/", Key: key, ClientOptions: &azcosmos.ClientOptions{ClientOptions: azcore.ClientOptions{Retry: policy.RetryOptions{MaxRetries: 2}}}},
	}
	for name, cfg := range bad {
		t.Run(name, func(t *testing.T) {
			_, err := cosmos.NewAccount(cfg)
			if !errors.Is(err, cosmos.ErrConfig) {
				t.Fatalf("err %v, want ErrConfig", err)
			}
			if strings.Contains(err.Error(), key[:20]) {
				t.Fatalf("error %q reveals the key", err)
			}
		})
	}
}
