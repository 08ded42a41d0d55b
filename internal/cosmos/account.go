package cosmos

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos/cosmosconn"
)

// Config says how to reach and authenticate to a Cosmos DB account, and how
// the SDK retries. Exactly one way of authenticating applies:
//
//   - ConnectionString ("AccountEndpoint=...;AccountKey=...;"): key auth;
//   - Endpoint + Key: key auth;
//   - Endpoint + Credential: that Entra ID credential;
//   - Endpoint + ManagedIdentityClientID: that user-assigned managed identity;
//   - Endpoint alone: azidentity.DefaultAzureCredential.
type Config struct {
	// ConnectionString is a key-based connection string. Set it alone.
	ConnectionString string
	// Endpoint is the account endpoint, e.g. "https://acct.documents.azure.com:443/".
	Endpoint string
	// Key is the account key (base64).
	Key string
	// ManagedIdentityClientID selects a user-assigned managed identity.
	ManagedIdentityClientID string
	// Credential is an Entra ID credential to use instead of the default
	// chain (tests, custom chains).
	Credential azcore.TokenCredential
	// Retry is the SDK retry policy of every request the account sends:
	// the client's and the account reads. Set it explicitly; DefaultRetry
	// is the recommended value (see it for the worst-case time one
	// operation spends in retries). The zero value means azcore's defaults
	// (3 retries, 800 ms doubling to at most 60 s, no per-try timeout).
	Retry policy.RetryOptions
	// ClientOptions configures the Cosmos client and the account reads
	// (transport, logging, telemetry); nil means defaults, with the
	// process's shared connection pool as transport (IdleConnsPerHost).
	// Its Retry must be left zero: retries are set in Retry.
	ClientOptions *azcosmos.ClientOptions
	// CredentialOptions configures the azidentity credential's own HTTP
	// pipeline; nil means defaults.
	CredentialOptions *azcore.ClientOptions
}

// Account is a connection to one Cosmos DB account (hold one per process):
// the SDK client, rebuilt when it is stuck on a failed first read of the
// account's metadata (see RebuildInterval), and a reader of the account's
// properties, which the SDK does not expose but the Strong-consistency
// check needs. Both share the configured credential and transport.
type Account struct {
	endpoint string
	pipeline runtime.Pipeline
	clients  *clients
}

// ErrConfig reports an unusable Config.
var ErrConfig = errors.New("cosmos: invalid Cosmos account configuration")

// accountReaderModule names the account reader's pipeline; it appears in
// the User-Agent of the requests it sends ("azsdk-go-nimbus-cosmos/…"),
// which tells them apart from the SDK's own account reads.
const accountReaderModule = "nimbus-cosmos"

// NewAccount builds the client and account reader for cfg. It does no
// network I/O (credentials fetch tokens on first use).
func NewAccount(cfg Config) (*Account, error) {
	endpoint, key, err := resolveAuth(cfg)
	if err != nil {
		return nil, err
	}
	var opts azcosmos.ClientOptions
	if cfg.ClientOptions != nil {
		opts = *cfg.ClientOptions
	}
	if !isZeroRetry(opts.Retry) {
		return nil, fmt.Errorf("%w: set SDK retries in Config.Retry, not in ClientOptions.Retry", ErrConfig)
	}
	opts.Retry = cfg.Retry
	withSharedTransport(&opts)
	// Each invocation's request charge is summed from every try's response.
	opts.PerRetryPolicies = append(append([]policy.Policy(nil), opts.PerRetryPolicies...), chargePolicy{})
	// Every partition key header goes out as ASCII-only JSON.
	opts.PerCallPolicies = append(append([]policy.Policy(nil), opts.PerCallPolicies...), partitionKeyHeader{})
	var credOpts azcore.ClientOptions
	if cfg.CredentialOptions != nil {
		credOpts = *cfg.CredentialOptions
	}

	var (
		build func(*azcosmos.ClientOptions) (*azcosmos.Client, error)
		auth  policy.Policy
	)
	switch {
	case key != "":
		kc, err := azcosmos.NewKeyCredential(key)
		if err != nil {
			return nil, fmt.Errorf("%w: account key is not valid base64", ErrConfig)
		}
		keyBytes, _ := base64.StdEncoding.DecodeString(key)
		build = func(o *azcosmos.ClientOptions) (*azcosmos.Client, error) {
			return azcosmos.NewClientWithKey(endpoint, kc, o)
		}
		auth = &keyAuthPolicy{key: keyBytes}
	default:
		cred := cfg.Credential
		if cred == nil && cfg.ManagedIdentityClientID != "" {
			cred, err = azidentity.NewManagedIdentityCredential(&azidentity.ManagedIdentityCredentialOptions{
				ClientOptions: credOpts,
				ID:            azidentity.ClientID(cfg.ManagedIdentityClientID),
			})
		} else if cred == nil {
			cred, err = azidentity.NewDefaultAzureCredential(&azidentity.DefaultAzureCredentialOptions{ClientOptions: credOpts})
		}
		if err != nil {
			return nil, fmt.Errorf("cosmos: creating Entra ID credential: %w", err)
		}
		build = func(o *azcosmos.ClientOptions) (*azcosmos.Client, error) {
			return azcosmos.NewClient(endpoint, cred, o)
		}
		auth = &tokenAuthPolicy{cred: cred, scopes: []string{tokenScope(endpoint, &opts)}}
	}
	cs, err := newClients(opts, build)
	if err != nil {
		return nil, fmt.Errorf("cosmos: creating Cosmos client: %w", err)
	}
	pl := runtime.NewPipeline(accountReaderModule, "v1.0.0", runtime.PipelineOptions{PerRetry: []policy.Policy{auth}}, &opts.ClientOptions)
	return &Account{endpoint: endpoint, pipeline: pl, clients: cs}, nil
}

// Client returns the SDK client to use now. Take it for each operation
// rather than keeping it: after a failed first read of the account's
// metadata, a later call returns a fresh client (see RebuildInterval).
func (a *Account) Client() *azcosmos.Client { return a.clients.current().client }

// Rebuilds returns how many times the account replaced a client stuck on a
// failed metadata read.
func (a *Account) Rebuilds() int64 { return a.clients.rebuilds.Load() }

// Close releases the current client's share of the SDK's caches. The
// account must not be used afterwards.
func (a *Account) Close() { a.clients.cur.Load().client.Close() }

// Endpoint returns the account endpoint.
func (a *Account) Endpoint() string { return a.endpoint }

// DefaultConsistency reads the account's properties (GET on the account
// endpoint) and returns its default consistency level. The SDK sets no
// client-level override, so this is the effective level of every request
// the account's client makes.
func (a *Account) DefaultConsistency(ctx context.Context) (azcosmos.ConsistencyLevel, error) {
	req, err := runtime.NewRequest(ctx, http.MethodGet, a.endpoint)
	if err != nil {
		return "", fmt.Errorf("cosmos: reading account properties: %w", err)
	}
	req.Raw().Header.Set("x-ms-version", "2020-11-05")
	req.Raw().Header.Set("Accept", "application/json")
	resp, err := a.pipeline.Do(req)
	if err != nil {
		return "", fmt.Errorf("cosmos: reading account properties: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("cosmos: reading account properties: %w", runtime.NewResponseError(resp))
	}
	var props struct {
		UserConsistencyPolicy struct {
			DefaultConsistencyLevel azcosmos.ConsistencyLevel `json:"defaultConsistencyLevel"`
		} `json:"userConsistencyPolicy"`
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("cosmos: reading account properties: %w", err)
	}
	if err := json.Unmarshal(body, &props); err != nil {
		return "", fmt.Errorf("cosmos: decoding account properties: %w", err)
	}
	if props.UserConsistencyPolicy.DefaultConsistencyLevel == "" {
		return "", errors.New("cosmos: account properties name no default consistency level")
	}
	return props.UserConsistencyPolicy.DefaultConsistencyLevel, nil
}

// resolveAuth validates cfg and returns the endpoint and, for key auth, the
// key. Errors never contain the key.
func resolveAuth(cfg Config) (endpoint, key string, err error) {
	entra := cfg.ManagedIdentityClientID != "" || cfg.Credential != nil
	switch {
	case cfg.ConnectionString != "":
		if cfg.Endpoint != "" || cfg.Key != "" || entra {
			return "", "", fmt.Errorf("%w: a connection string excludes an endpoint, key, managed identity or credential", ErrConfig)
		}
		c, perr := cosmosconn.Parse(cfg.ConnectionString)
		if perr != nil {
			return "", "", fmt.Errorf("%w: the connection string is not usable: %v (the form is %s)", ErrConfig, perr, cosmosconn.Form)
		}
		endpoint, key = c.AccountEndpoint, c.AccountKey
	case cfg.Endpoint == "":
		return "", "", fmt.Errorf("%w: an account endpoint or a connection string is required", ErrConfig)
	case cfg.Key != "" && entra:
		return "", "", fmt.Errorf("%w: an account key excludes a managed identity or credential", ErrConfig)
	case cfg.ManagedIdentityClientID != "" && cfg.Credential != nil:
		return "", "", fmt.Errorf("%w: set a managed identity client id or a credential, not both", ErrConfig)
	default:
		endpoint, key = cfg.Endpoint, cfg.Key
	}
	if err := cosmosconn.CheckEndpoint(endpoint); err != nil {
		return "", "", fmt.Errorf("%w: account endpoint %q is not an http(s) URL: %v", ErrConfig, endpoint, err)
	}
	// azcosmos sends Entra tokens over plain HTTP too; allow that only to
	// this machine (local stand-ins), never across a network.
	if key == "" && cosmosconn.PlainHTTPToAnotherMachine(endpoint) {
		return "", "", fmt.Errorf("%w: Entra ID authentication needs an https endpoint (got %q)", ErrConfig, endpoint)
	}
	return endpoint, key, nil
}

// tokenScope is the scope the SDK requests tokens for: the configured
// Cosmos audience, else the account's scheme and host.
func tokenScope(endpoint string, opts *azcosmos.ClientOptions) string {
	if svc, ok := opts.Cloud.Services[azcosmos.ServiceName]; ok && svc.Audience != "" {
		return svc.Audience + "/.default"
	}
	u, _ := url.Parse(endpoint)
	return u.Scheme + "://" + u.Hostname() + "/.default"
}

// isZeroRetry reports retry options left entirely unset.
func isZeroRetry(r policy.RetryOptions) bool {
	return r.MaxRetries == 0 && r.TryTimeout == 0 && r.RetryDelay == 0 && r.MaxRetryDelay == 0 &&
		r.StatusCodes == nil && r.ShouldRetry == nil
}

// keyAuthPolicy signs an account-properties read with the account key, as
// the Cosmos REST API specifies for the database-account resource (empty
// resource type and link).
type keyAuthPolicy struct{ key []byte }

func (p *keyAuthPolicy) Do(req *policy.Request) (*http.Response, error) {
	date := time.Now().UTC().Format(http.TimeFormat)
	req.Raw().Header.Set("x-ms-date", date)
	mac := hmac.New(sha256.New, p.key)
	_, _ = io.WriteString(mac, strings.ToLower(req.Raw().Method)+"\n\n\n"+strings.ToLower(date)+"\n\n")
	sig := base64.StdEncoding.EncodeToString(mac.Sum(nil))
	req.Raw().Header.Set("Authorization", url.QueryEscape("type=master&ver=1.0&sig="+sig))
	return req.Next()
}

// tokenAuthPolicy authorizes an account-properties read with an Entra ID
// token in the Cosmos header format. Credentials cache tokens themselves.
type tokenAuthPolicy struct {
	cred   azcore.TokenCredential
	scopes []string
}

func (p *tokenAuthPolicy) Do(req *policy.Request) (*http.Response, error) {
	tk, err := p.cred.GetToken(req.Raw().Context(), policy.TokenRequestOptions{Scopes: p.scopes})
	if err != nil {
		return nil, err
	}
	req.Raw().Header.Set("x-ms-date", time.Now().UTC().Format(http.TimeFormat))
	req.Raw().Header.Set("Authorization", "type=aad&ver=1.0&sig="+tk.Token)
	return req.Next()
}
