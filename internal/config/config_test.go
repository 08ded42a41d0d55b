package config

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func base() map[string]string {
	return map[string]string{KeyEndpoint: "BillingEndpoint", KeyServiceBus: "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=v"}
}

func TestDefaults(t *testing.T) {
	c, err := Load(FromMap(base()))
	if err != nil {
		t.Fatal(err)
	}
	if c.Port != 8080 || c.Inbox.Enabled || c.Inbox.Retention != 7*24*time.Hour || c.Inbox.PurgeBatchSize != 100 ||
		c.Inbox.CleanupSchedule != "0 0 * * * *" || c.Inbox.Cosmos.DatabaseID != "MessageDatabase" ||
		c.Inbox.Cosmos.ContainerID != "inbox" || !c.Inbox.Cosmos.AutoCreateContainer || c.Inbox.Cosmos.AllowRelaxedConsistency ||
		c.Resolver.Sink != SinkServiceBus || c.Inbox.CleanupBudget != 4*time.Minute {
		t.Fatalf("defaults = %+v", c)
	}
}

func TestEveryProblemIsReportedAtOnce(t *testing.T) {
	_, err := Load(FromMap(map[string]string{
		KeyPort:            "0",
		KeyInboxEnabled:    "yes please",
		KeyRetention:       "-1.00:00:00",
		KeyPurgeBatchSize:  "1001",
		KeyCleanupSchedule: "every hour",
		KeyResolverSink:    "Kafka",
		KeyLogLevel:        "loud",
	}))
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{KeyPort, KeyEndpoint, KeyInboxEnabled, KeyRetention, KeyPurgeBatchSize, KeyCleanupSchedule, KeyResolverSink, KeyLogLevel} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s:\n%v", want, err)
		}
	}
	if len(ce.Problems) < 8 {
		t.Errorf("%d problems reported: %q", len(ce.Problems), ce.Problems)
	}
}

func TestInboxStoreSelection(t *testing.T) {
	cases := []struct {
		name    string
		set     map[string]string
		wantErr []string
		store   Store
	}{
		{"store required", map[string]string{KeyInboxEnabled: "true"}, []string{KeyInboxStore, "Cosmos", "InMemory"}, ""},
		{"unknown store", map[string]string{KeyInboxEnabled: "true", KeyInboxStore: "SqlServer"}, []string{"SqlServer"}, ""},
		{"cosmos unconfigured", map[string]string{KeyInboxEnabled: "true", KeyInboxStore: "Cosmos"}, []string{KeyCosmosEndpoint, KeyCosmosConnectionString}, ""},
		{"cosmos both", map[string]string{KeyInboxEnabled: "true", KeyInboxStore: "Cosmos", KeyCosmosEndpoint: "https://a.documents.azure.com:443/", KeyCosmosConnectionString: "AccountEndpoint=https://a/;AccountKey=k;"}, []string{"only one"}, ""},
		{"cosmos bad conn", map[string]string{KeyInboxEnabled: "true", KeyInboxStore: "Cosmos", KeyCosmosConnectionString: "secret"}, []string{"AccountEndpoint="}, ""},
		{"cosmos sample placeholder beside a connection string", map[string]string{KeyInboxEnabled: "true", KeyInboxStore: "Cosmos", KeyCosmosEndpoint: "https://<account>.documents.azure.com:443/", KeyCosmosConnectionString: "AccountEndpoint=https://a/;AccountKey=k;"},
			[]string{KeyCosmosEndpoint + `="https://<account>.documents.azure.com:443/" is still the sample's placeholder`, "leave it empty and set " + KeyCosmosConnectionString}, ""},
		{"cosmos sample placeholder alone", map[string]string{KeyInboxEnabled: "true", KeyInboxStore: "Cosmos", KeyCosmosEndpoint: "https://<account>.documents.azure.com:443/"},
			[]string{"is still the sample's placeholder"}, ""},
		{"cosmos ok", map[string]string{KeyInboxEnabled: "true", KeyInboxStore: "cosmos", KeyCosmosEndpoint: "https://a.documents.azure.com:443/"}, nil, StoreCosmos},
		{"memory ok", map[string]string{KeyInboxEnabled: "true", KeyInboxStore: "InMemory"}, nil, StoreInMemory},
		{"off ignores store", map[string]string{KeyInboxStore: "Nonsense"}, nil, ""},
		{"bad cosmos id", map[string]string{KeyCosmosContainer: "in/box"}, []string{KeyCosmosContainer}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := base()
			for k, v := range c.set {
				m[k] = v
			}
			cfg, err := Load(FromMap(m))
			if len(c.wantErr) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if cfg.Inbox.Store != c.store {
					t.Fatalf("store = %q, want %q", cfg.Inbox.Store, c.store)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
			if strings.Contains(err.Error(), "secret") && c.name == "cosmos bad conn" {
				t.Errorf("error echoes a connection string: %v", err)
			}
		})
	}
}

func TestResolverSink(t *testing.T) {
	_, err := Load(FromMap(map[string]string{KeyEndpoint: "E"}))
	if err == nil || !strings.Contains(err.Error(), KeyServiceBus) || !strings.Contains(err.Error(), KeyServiceBusNamespace) {
		t.Fatalf("missing connection: %v", err)
	}
	c, err := Load(FromMap(map[string]string{KeyEndpoint: "E", KeyServiceBusNamespace: "ns.servicebus.windows.net", KeyServiceBusClientID: "cid"}))
	if err != nil || c.Resolver.FullyQualifiedNamespace != "ns.servicebus.windows.net" || c.Resolver.ClientID != "cid" {
		t.Fatalf("identity connection: %+v %v", c, err)
	}
	c, err = Load(FromMap(map[string]string{KeyEndpoint: "E", KeyResolverSink: "inmemory"}))
	if err != nil || c.Resolver.Sink != SinkInMemory || len(c.Warnings) == 0 {
		t.Fatalf("in-memory sink: %+v %v", c, err)
	}
}

func TestParseDuration(t *testing.T) {
	cases := map[string]time.Duration{
		"7.00:00:00": 7 * 24 * time.Hour,
		"00:04:00":   4 * time.Minute,
		"1:30:00":    90 * time.Minute,
		"00:00:00.5": 500 * time.Millisecond,
		"2":          48 * time.Hour,
		"168h":       168 * time.Hour,
		"4m30s":      270 * time.Second,
		"-00:01:00":  -time.Minute,
		"1.02:03:04": 26*time.Hour + 3*time.Minute + 4*time.Second,
	}
	for in, want := range cases {
		got, err := ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "7 days", "25:00:00", "00:61:00", "00:00:75", "x.00:00:00"} {
		if _, err := ParseDuration(bad); err == nil {
			t.Errorf("ParseDuration(%q) accepted", bad)
		}
	}
}

func TestRetryDelay(t *testing.T) {
	c, err := Load(FromMap(base()))
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute}
	for i, w := range want {
		if got := c.Retry.Delay(i + 1); got != w {
			t.Errorf("Delay(%d) = %v, want %v", i+1, got, w)
		}
	}
	if got := (Retry{}).Delay(3); got != 0 {
		t.Errorf("off: %v", got)
	}
	m := base()
	m[KeyRetryBaseDelay] = "00:00:10"
	m[KeyRetryMaxDelay] = "5s"
	if _, err := Load(FromMap(m)); err == nil || !strings.Contains(err.Error(), KeyRetryMaxDelay) {
		t.Errorf("max below base accepted: %v", err)
	}
	m[KeyRetryBaseDelay] = "0"
	if c, err := Load(FromMap(m)); err != nil || c.Retry.Delay(5) != 0 {
		t.Errorf("zero base: %v %v", c, err)
	}
}

// The pause is Delay jittered into its upper half, [Delay/2, Delay], by
// the random number; a zero Delay stays zero whatever the number.
func TestRetryPauseIsJittered(t *testing.T) {
	r := Retry{BaseDelay: time.Second, MaxDelay: time.Minute}
	cases := []struct {
		count int
		rnd   float64
		want  time.Duration
	}{
		{1, 0, 500 * time.Millisecond},
		{1, 0.5, 750 * time.Millisecond},
		{1, 0.999, 999500 * time.Microsecond},
		{1, 1, time.Second},
		{3, 0.25, 2500 * time.Millisecond},
		{9, 0.5, 45 * time.Second},
		{1, -1, 500 * time.Millisecond},
		{1, math.NaN(), 500 * time.Millisecond},
		{1, 7, time.Second},
	}
	for _, c := range cases {
		if got := r.Pause(c.count, c.rnd); got != c.want {
			t.Errorf("Pause(%d, %v) = %v, want %v", c.count, c.rnd, got, c.want)
		}
	}
	for _, rnd := range []float64{0, 0.5, 0.99} {
		if got := (Retry{}).Pause(4, rnd); got != 0 {
			t.Errorf("zero BaseDelay: Pause(4, %v) = %v, want 0", rnd, got)
		}
	}
}

func TestAppSelection(t *testing.T) {
	sb := "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=v"
	cases := []struct {
		name     string
		set      map[string]string
		wantErr  []string
		notInErr []string
		app      App
		store    TrackingStore
	}{
		{"default is the endpoint", map[string]string{KeyEndpoint: "E", KeyServiceBus: sb}, nil, nil, AppEndpoint, ""},
		{"endpoint needs its endpoint id", map[string]string{KeyApp: "endpoint", KeyServiceBus: sb}, []string{KeyEndpoint}, nil, "", ""},
		{"unknown app", map[string]string{KeyApp: "Webapp", KeyEndpoint: "E", KeyServiceBus: sb}, []string{KeyApp, "Webapp", "Resolver"}, nil, "", ""},
		// The Resolver needs no endpoint, no inbox and no sink; it needs
		// Service Bus and the tracking store.
		{"resolver needs service bus and cosmos", map[string]string{KeyApp: "Resolver", KeyInboxEnabled: "true", KeyResolverSink: "Kafka"},
			[]string{KeyServiceBus, KeyTrackingEndpoint, KeyTrackingConnectionString}, []string{KeyEndpoint, KeyInboxStore, KeyResolverSink}, "", ""},
		{"resolver cosmos by identity", map[string]string{KeyApp: "resolver", KeyServiceBusNamespace: "ns.servicebus.windows.net", KeyTrackingEndpoint: "https://a.documents.azure.com:443/"},
			nil, nil, AppResolver, TrackingCosmos},
		{"resolver cosmos both", map[string]string{KeyApp: "Resolver", KeyServiceBus: sb, KeyTrackingEndpoint: "https://a.documents.azure.com:443/", KeyTrackingConnectionString: "AccountEndpoint=https://a/;AccountKey=a2V5;"},
			[]string{"only one", KeyTrackingEndpoint}, nil, "", ""},
		{"resolver bad connection string", map[string]string{KeyApp: "Resolver", KeyServiceBus: sb, KeyTrackingConnectionString: "secret-value"},
			[]string{KeyTrackingConnectionString}, []string{"secret-value"}, "", ""},
		{"resolver in memory", map[string]string{KeyApp: "Resolver", KeyServiceBus: sb, KeyTrackingStore: "inmemory"}, nil, nil, AppResolver, TrackingInMemory},
		{"resolver unknown store", map[string]string{KeyApp: "Resolver", KeyServiceBus: sb, KeyTrackingStore: "SqlServer"}, []string{KeyTrackingStore, "SqlServer"}, nil, "", ""},
		{"resolver bad database id", map[string]string{KeyApp: "Resolver", KeyServiceBus: sb, KeyTrackingStore: "InMemory", KeyTrackingDatabase: "a/b"}, []string{KeyTrackingDatabase}, nil, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Load(FromMap(c.set))
			if len(c.wantErr) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if cfg.App != c.app || cfg.Tracking.Store != c.store {
					t.Fatalf("app %q store %q, want %q %q", cfg.App, cfg.Tracking.Store, c.app, c.store)
				}
				if cfg.App == AppResolver && cfg.Inbox.Enabled {
					t.Fatal("the Resolver app enabled the inbox")
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q:\n%v", w, err)
				}
			}
			for _, w := range c.notInErr {
				if strings.Contains(err.Error(), w) {
					t.Errorf("error mentions %q:\n%v", w, err)
				}
			}
		})
	}
	cfg, err := Load(FromMap(map[string]string{KeyApp: "Resolver", KeyServiceBus: sb, KeyTrackingConnectionString: "AccountEndpoint=http://127.0.0.1:8081/;AccountKey=a2V5;"}))
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Tracking.Cosmos; c.DatabaseID != "MessageDatabase" || !c.AutoCreateContainer || c.AllowRelaxedConsistency || c.Connection.AccountEndpoint != "http://127.0.0.1:8081/" {
		t.Fatalf("tracking defaults = %+v", c)
	}
}

func TestResolverCarriesTheRetention(t *testing.T) {
	cfg, err := Load(FromMap(map[string]string{KeyApp: "Resolver", KeyServiceBus: "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=v",
		KeyTrackingStore: "InMemory", KeyUnresolvedRetentionDays: "180"}))
	if err != nil || cfg.Tracking.UnresolvedRetentionDays != 180 {
		t.Fatalf("%+v %v", cfg, err)
	}
	if _, err := Load(FromMap(map[string]string{KeyApp: "Resolver", KeyServiceBus: "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=v",
		KeyTrackingStore: "InMemory", KeyUnresolvedRetentionDays: "0"})); err == nil || !strings.Contains(err.Error(), KeyUnresolvedRetentionDays) {
		t.Fatalf("0 days accepted: %v", err)
	}
}

// A sample placeholder left in a setting is named as one, whatever else is
// set; a value with angle brackets that is no placeholder is judged as
// before.
func TestSamplePlaceholdersAreNamed(t *testing.T) {
	m := base()
	m[KeyServiceBusNamespace] = "<namespace>.servicebus.windows.net"
	_, err := Load(FromMap(m))
	if err == nil || !strings.Contains(err.Error(), KeyServiceBusNamespace+`="<namespace>.servicebus.windows.net" is still the sample's placeholder`) ||
		!strings.Contains(err.Error(), "leave it empty when "+KeyServiceBus) {
		t.Fatalf("err = %v", err)
	}
	for v, want := range map[string]bool{
		"https://<account>.documents.azure.com:443/": true,
		"<namespace>.servicebus.windows.net":         true,
		"https://a.documents.azure.com:443/":         false,
		"a<>b":                                       false,
		"a>b<c":                                      false,
	} {
		if placeholder(v) != want {
			t.Errorf("placeholder(%q) = %v, want %v", v, !want, want)
		}
	}
}
