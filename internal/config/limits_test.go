package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// load applies set over base() (a key mapped to "\x00unset" is removed).
func load(t *testing.T, set map[string]string) (*Config, error) {
	t.Helper()
	m := base()
	// Say where session state lives, so the warning about an unset store
	// (tested on its own) stays out of the way.
	m[KeySessionStore] = "InMemory"
	for k, v := range set {
		if v == "\x00unset" {
			delete(m, k)
			continue
		}
		m[k] = v
	}
	return Load(FromMap(m))
}

// problems returns the problems of a *Error (nil when err is nil).
func problems(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("error is %T, not *config.Error: %v", err, err)
	}
	return ce.Problems
}

// oneProblem fails t unless err lists exactly one problem, holding each
// of want and none of secrets.
func oneProblem(t *testing.T, err error, want []string, secrets ...string) {
	t.Helper()
	ps := problems(t, err)
	if len(ps) != 1 {
		t.Fatalf("want one problem, got %q", ps)
	}
	for _, w := range want {
		if !strings.Contains(ps[0], w) {
			t.Errorf("problem lacks %q: %s", w, ps[0])
		}
	}
	for _, s := range secrets {
		if strings.Contains(ps[0], s) {
			t.Errorf("problem echoes the key: %s", ps[0])
		}
	}
}

func TestParseDurationOverflowAndDotNetForms(t *testing.T) {
	const maxDur = time.Duration(1<<63 - 1)
	good := []struct {
		in   string
		want time.Duration
	}{
		{"7", 7 * day},
		{" 7 ", 7 * day},
		{"-7", -7 * day},
		{"0", 0},
		{"106751", 106751 * day},
		{"106751.00:00:00", 106751 * day},
		{"106751.23:47:16.8547758", maxDur - 7},
		{"6:12:14:45", 6*day + 12*time.Hour + 14*time.Minute + 45*time.Second},
		{"6:12:14:45.3448", 6*day + 12*time.Hour + 14*time.Minute + 45*time.Second + 344800*time.Microsecond},
		{"00:00:00.1234567", 123456700 * time.Nanosecond},
		{"00:00:00.80", 800 * time.Millisecond},
		{"01:30", 90 * time.Minute},
		{"1.02:03", 26*time.Hour + 3*time.Minute},
		{"23:59:59", 24*time.Hour - time.Second},
		{"2562047h", 2562047 * time.Hour},
		{"1.5h", 90 * time.Minute},
	}
	for _, c := range good {
		got, err := ParseDuration(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	bad := []struct {
		in, why string
	}{
		// Overflow in every branch: bare days, d.hh:mm:ss, d:hh:mm:ss,
		// fractional seconds, Go durations.
		{"271172170599402", "10675199"},
		{"213504", "292 years"},
		{"300000", "292 years"},
		{"1000000", "292 years"},
		{"106752", "292 years"},
		{"10675200", "10675199"},
		{"99999999999999999999999", "10675199"},
		{"106751.23:59:59", "292 years"},
		{"106752:00:00:00", "292 years"},
		{"106751.23:47:16.8547759", "292 years"},
		{"2562048h", "292 years"},
		{"9999999999999h", "292 years"},
		// Forms .NET refuses.
		{"24:00:00", "above 23"},
		{"1.24:00:00", "above 23"},
		{"6:34:14:45", "above 23"},
		{"00:60:00", "above 59"},
		{"00:00:60", "above 59"},
		{"00:00:00.12345678", "7 digits"},
		{"00:00:NaN", "seconds"},
		{"00:00:1e1", "seconds"},
		{"00:00:+1", "seconds"},
		{"00:+1:00", "minutes"},
		{"+7", "neither"},
		{"x.00:00:00", "days"},
		{"1:2:3:4:5", "TimeSpan"},
		{"00:00:01.", "fraction"},
		{"7 days", "neither"},
		{"", "empty"},
		{"-", "neither"},
	}
	for _, c := range bad {
		d, err := ParseDuration(c.in)
		if err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", c.in, d)
			continue
		}
		if !errors.Is(err, ErrDuration) || !strings.Contains(err.Error(), c.why) {
			t.Errorf("ParseDuration(%q) error %q: want ErrDuration and a reason with %q", c.in, err, c.why)
		}
	}
}

func TestDurationSettingsAreBounded(t *testing.T) {
	cases := []struct {
		key, value string
		want       time.Duration // when valid
		errHas     string        // when invalid, besides the key and value
		warn       bool
	}{
		// The adversarial values: each overflowed into a different duration.
		{KeyRetention, "271172170599402", 0, "10675199", false},
		{KeyRetention, "213504", 0, "292 years", false},
		{KeyRetention, "300000", 0, "292 years", false},
		{KeyRetention, "1000000", 0, "292 years", false},
		{KeyRetention, "3650", 3650 * day, "", false},
		{KeyRetention, "87600h", 3650 * day, "", false},
		{KeyRetention, "3651", 0, "3650.00:00:00", false},
		{KeyRetention, "3650.00:00:01", 0, "out of range", false},
		{KeyRetention, "00:00:01", time.Second, "", false},
		{KeyRetention, "00:00:00.9", 0, "out of range", false},
		{KeyRetention, "0", 0, "out of range", false},
		{KeyRetention, "-1.00:00:00", 0, "out of range", false},
		{KeyCleanupBudget, "01:00:00", time.Hour, "", true},
		{KeyCleanupBudget, "01:00:01", 0, "01:00:00", false},
		{KeyCleanupBudget, "00:10:00", 10 * time.Minute, "", true},
		{KeyCleanupBudget, "00:09:59", 10*time.Minute - time.Second, "", false},
		{KeyCleanupBudget, "0", 0, "out of range", false},
		{KeyCleanupBudget, "106752", 0, "292 years", false},
		{KeyRetryBaseDelay, "00:05:00", 5 * time.Minute, "", false},
		{KeyRetryBaseDelay, "00:05:01", 0, "00:05:00", false},
		{KeyRetryBaseDelay, "0", 0, "", false},
		{KeyRetryBaseDelay, "-1s", 0, "out of range", false},
		{KeyRetryBaseDelay, "2562048h", 0, "292 years", false},
		{KeyRetryMaxDelay, "5m", 5 * time.Minute, "", false},
		{KeyRetryMaxDelay, "5m1s", 0, "00:05:00", false},
		{KeyRetryMaxDelay, "213504", 0, "292 years", false},
	}
	for _, c := range cases {
		t.Run(c.key+"="+c.value, func(t *testing.T) {
			set := map[string]string{c.key: c.value}
			if c.key == KeyRetryBaseDelay {
				set[KeyRetryMaxDelay] = "00:05:00"
			}
			cfg, err := load(t, set)
			if c.errHas != "" {
				oneProblem(t, err, []string{c.key, `"` + c.value + `"`, c.errHas})
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]time.Duration{KeyRetention: cfg.Inbox.Retention, KeyCleanupBudget: cfg.Inbox.CleanupBudget,
				KeyRetryBaseDelay: cfg.Retry.BaseDelay, KeyRetryMaxDelay: cfg.Retry.MaxDelay}[c.key]
			if got != c.want {
				t.Errorf("%s = %v, want %v", c.key, got, c.want)
			}
			warned := false
			for _, w := range cfg.Warnings {
				warned = warned || strings.Contains(w, KeyCleanupBudget)
			}
			if warned != c.warn {
				t.Errorf("budget warning = %v, want %v: %q", warned, c.warn, cfg.Warnings)
			}
		})
	}
}

func TestCleanupSchedule(t *testing.T) {
	valid := []string{
		"0 */5 * * * *",
		"0 0 * * * *",
		"0 30 9 * * Mon-Fri",
		"0 0 0 1 Jan *",
		"0 0 0 1 january *",
		"0 0 9 * * Monday",
		"*/10 * * * * *",
		"0 0,30 8-18/2 * * 1-5",
		"5/15 * * * * *",
		"  0 0 * * * *  ",
		"00:05:00",     // TimeSpan interval (App Service plans)
		"1.00:00:00",   // one day
		"6:12:14:45.5", // d:hh:mm:ss
		"0 0 0 29 2 *", // leap days only
		"00:00:01",
	}
	for _, s := range valid {
		cfg, err := load(t, map[string]string{KeyCleanupSchedule: s})
		if err != nil {
			t.Errorf("schedule %q refused: %v", s, err)
			continue
		}
		if cfg.Inbox.CleanupSchedule != strings.TrimSpace(s) {
			t.Errorf("schedule %q read as %q", s, cfg.Inbox.CleanupSchedule)
		}
	}
	invalid := map[string]string{
		"x y z w v u":           "not a valid NCRONTAB",
		"0 * * * *":             "5 fields",
		"61 * * * * *":          "above maximum",
		"* * * 32 * *":          "above maximum",
		"* * * * 13 *":          "above maximum",
		"* * * * * 7":           "above maximum",
		"0 0 * * * * *":         "7 fields",
		"":                      "empty",
		"   ":                   "empty",
		", , , , , ,":           "second field",
		"1,,2 * * * * *":        "second field",
		"? * * * * *":           "second field",
		"0 0 0 ? * *":           "day field",
		"0 0 0 L * *":           "not a valid NCRONTAB",
		"0 0 0 * * 1#2":         "day-of-week field",
		"*-5 * * * * *":         "second field",
		"*/0 * * * * *":         "not a valid NCRONTAB",
		"0 0 * * * Xyz":         "not a valid NCRONTAB",
		"0\t0 * * * *":          "spaces",
		"CRON_TZ=UTC 0 * * * *": "second field",
		"@hourly":               "1 field;",
		"00:00:00":              "positive",
		"-00:05:00":             "positive",
		"25:00:00":              "above 23",
		"0 0 0 30 2 *":          "never fires",
		"0 0 0 31 Apr,Jun *":    "never fires",
		"00:00:00.0000001":      "under one second",
		"00:00:00.5":            "under one second",
	}
	for s, why := range invalid {
		_, err := load(t, map[string]string{KeyCleanupSchedule: s})
		ps := problems(t, err)
		if len(ps) != 1 {
			t.Errorf("schedule %q: want one problem, got %q", s, ps)
			continue
		}
		if !strings.Contains(ps[0], KeyCleanupSchedule) || !strings.Contains(ps[0], why) {
			t.Errorf("schedule %q: problem lacks %s or %q: %s", s, KeyCleanupSchedule, why, ps[0])
		}
	}
	// Unset means the default.
	cfg, err := load(t, nil)
	if err != nil || cfg.Inbox.CleanupSchedule != DefaultCleanupSchedule {
		t.Fatalf("unset schedule: %v %v", cfg, err)
	}
}

func TestLengthsCountUTF16Units(t *testing.T) {
	ids := []struct {
		v  string
		ok bool
	}{
		{strings.Repeat("a", 255), true},
		{strings.Repeat("é", 200), true}, // 200 units, 400 bytes
		{strings.Repeat("😀", 127) + "a", true},
		{strings.Repeat("a", 256), false},
		{strings.Repeat("😀", 128), false}, // 128 runes, 256 units
		{"in/box", false},
		{`in\box`, false},
		{"in?box", false},
		{"in#box", false},
		{"inbox ", false},
		{" inbox", true},
	}
	for _, c := range ids {
		for _, key := range []string{KeyCosmosDatabase, KeyCosmosContainer} {
			cfg, err := load(t, map[string]string{key: c.v})
			if c.ok {
				if err != nil {
					t.Errorf("%s of %d units refused: %v", key, utf16Len(c.v), err)
				} else if got := map[string]string{KeyCosmosDatabase: cfg.Inbox.Cosmos.DatabaseID, KeyCosmosContainer: cfg.Inbox.Cosmos.ContainerID}[key]; got != c.v {
					t.Errorf("%s = %q, want %q", key, got, c.v)
				}
				continue
			}
			ps := problems(t, err)
			if len(ps) != 1 || !strings.Contains(ps[0], key) {
				t.Errorf("%s=%q: problems %q", key, c.v, ps)
			}
		}
	}
	// Blank ids are the rule's business; the setting treats blank as unset.
	for _, id := range []string{"", " ", "\t"} {
		if checkCosmosID(id) == nil {
			t.Errorf("checkCosmosID(%q) accepted a blank id", id)
		}
	}
	if err := checkCosmosID(strings.Repeat("😀", 128)); err == nil || !strings.Contains(err.Error(), "256") {
		t.Errorf("checkCosmosID counts a rune above U+FFFF as one unit: %v", err)
	}
	if n := utf16Len("a\xffé😀"); n != 5 {
		t.Errorf("utf16Len = %d, want 5 (invalid byte 1, é 1, 😀 2)", n)
	}
}

func TestLogLevels(t *testing.T) {
	for in, want := range map[string]zerolog.Level{
		"debug": zerolog.DebugLevel, "INFO": zerolog.InfoLevel, "Warn": zerolog.WarnLevel,
		"warning": zerolog.WarnLevel, "error": zerolog.ErrorLevel, "": zerolog.InfoLevel,
	} {
		cfg, err := load(t, map[string]string{KeyLogLevel: in})
		if err != nil || cfg.LogLevel != want {
			t.Errorf("%s=%q: %v, %v; want %v", KeyLogLevel, in, cfg, err, want)
		}
	}
	for _, in := range []string{"disabled", "panic", "fatal", "trace", "off", "-1", "0", "5", "verbose"} {
		ps := problems(t, func() error { _, err := load(t, map[string]string{KeyLogLevel: in}); return err }())
		if len(ps) != 1 || !strings.Contains(ps[0], KeyLogLevel) || !strings.Contains(ps[0], `"`+in+`"`) {
			t.Errorf("%s=%q: problems %q", KeyLogLevel, in, ps)
		}
	}
}

func TestServiceBusSettings(t *testing.T) {
	const secret = "S3cr3tK3y+/="
	cases := []struct {
		name, conn, ns string
		errHas         []string // nil: valid
	}{
		{"key", "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=" + secret, "", nil},
		{"no trailing slash, any case", "endpoint=sb://x.servicebus.windows.net;sharedaccesskeyname=k;sharedaccesskey=" + secret + ";", "", nil},
		{"SAS", "Endpoint=sb://x/;SharedAccessSignature=SharedAccessSignature sr=a&sig=" + secret, "", nil},
		{"emulator", "Endpoint=sb://127.0.0.1:5672;SharedAccessKeyName=k;SharedAccessKey=" + secret + ";UseDevelopmentEmulator=true", "", nil},
		{"entity path and unknown keys", "Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=" + secret + ";EntityPath=BillingEndpoint;TransportType=Amqp", "", nil},
		{"empty parts", "Endpoint=;;;", "", []string{KeyServiceBus, "Endpoint"}},
		{"no endpoint", "SharedAccessKeyName=k;SharedAccessKey=" + secret, "", []string{KeyServiceBus, "Endpoint"}},
		{"https endpoint", "Endpoint=https://x/;SharedAccessKeyName=k;SharedAccessKey=" + secret, "", []string{KeyServiceBus, "sb://"}},
		{"no host", "Endpoint=sb://;SharedAccessKeyName=k;SharedAccessKey=" + secret, "", []string{KeyServiceBus, "sb://"}},
		{"path", "Endpoint=sb://x/queue;SharedAccessKeyName=k;SharedAccessKey=" + secret, "", []string{KeyServiceBus, "path"}},
		{"no key", "Endpoint=sb://x/;SharedAccessKeyName=k", "", []string{KeyServiceBus, "SharedAccessKey"}},
		{"empty key", "Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=", "", []string{KeyServiceBus, "SharedAccessKey"}},
		{"no key name", "Endpoint=sb://x/;SharedAccessKey=" + secret, "", []string{KeyServiceBus, "SharedAccessKeyName"}},
		{"spaced names", "Endpoint=sb://x/; SharedAccessKeyName=k; SharedAccessKey=" + secret, "", []string{KeyServiceBus, "spaces"}},
		{"duplicate key", "Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=" + secret + ";SharedAccessKey=" + secret, "", []string{KeyServiceBus, "SharedAccessKey more than once"}},
		{"bad emulator flag", "Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=" + secret + ";UseDevelopmentEmulator=yes", "", []string{KeyServiceBus, "UseDevelopmentEmulator"}},
		{"entry without =", "Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=v;S3cr3tK3y", "", []string{KeyServiceBus, "'='"}},
		{"namespace", "", "ns.servicebus.windows.net", nil},
		{"namespace with port", "", "localhost:5672", nil},
		{"namespace with scheme", "", "sb://ns.servicebus.windows.net", []string{KeyServiceBusNamespace, "scheme"}},
		{"namespace with path", "", "ns.servicebus.windows.net/x", []string{KeyServiceBusNamespace, "path"}},
		{"namespace not a host", "", "ns_1.servicebus.windows.net", []string{KeyServiceBusNamespace, "host name"}},
		{"namespace placeholder", "", "<namespace>.servicebus.windows.net", []string{KeyServiceBusNamespace, "host name"}},
		{"namespace empty label", "", "ns..windows.net", []string{KeyServiceBusNamespace, "host name"}},
		{"namespace bad port", "", "ns.servicebus.windows.net:0", []string{KeyServiceBusNamespace, "port"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			set := map[string]string{KeyServiceBus: c.conn}
			if c.ns != "" {
				set[KeyServiceBusNamespace] = c.ns
			}
			cfg, err := load(t, set)
			if c.errHas == nil {
				if err != nil {
					t.Fatal(err)
				}
				if c.conn != "" && cfg.Resolver.Connection.Host == "" {
					t.Errorf("connection not parsed: %+v", cfg.Resolver.Connection)
				}
				return
			}
			oneProblem(t, err, c.errHas, secret, "S3cr3t")
		})
	}
	// The trigger reads ServiceBusConnection whatever the sink.
	_, err := load(t, map[string]string{KeyResolverSink: "InMemory", KeyServiceBus: "Endpoint=;;;"})
	if ps := problems(t, err); len(ps) != 1 || !strings.Contains(ps[0], KeyServiceBus) {
		t.Errorf("in-memory sink with a bad connection string: %q", ps)
	}
	cfg, err := load(t, map[string]string{KeyServiceBus: "Endpoint=sb://x.servicebus.windows.net:5671/;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=TRUE;EntityPath=E"})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Resolver.Connection; got.Host != "x.servicebus.windows.net:5671" || got.SharedAccessKeyName != "k" || got.SharedAccessKey != "v" || !got.UseDevelopmentEmulator || got.EntityPath != "E" {
		t.Errorf("parsed connection = %+v", got)
	}
}

func TestCosmosSettings(t *testing.T) {
	const key = "C2FtcGxlLWtleS1ub3QtcmVhbA==" // base64
	cosmos := func(set map[string]string) map[string]string {
		set[KeyInboxEnabled], set[KeyInboxStore] = "true", "Cosmos"
		return set
	}
	cases := []struct {
		name   string
		set    map[string]string
		errHas []string
	}{
		{"connection string", map[string]string{KeyCosmosConnectionString: "AccountEndpoint=https://a.documents.azure.com:443/;AccountKey=" + key + ";"}, nil},
		{"key first, spaces, extra entries", map[string]string{KeyCosmosConnectionString: " AccountKey = " + key + " ; accountendpoint=http://127.0.0.1:8081/;DisableServerCertificateValidation=True"}, nil},
		{"no key", map[string]string{KeyCosmosConnectionString: "AccountEndpoint=https://a/;"}, []string{KeyCosmosConnectionString, "AccountKey"}},
		{"empty key", map[string]string{KeyCosmosConnectionString: "AccountEndpoint=https://a/;AccountKey=;"}, []string{KeyCosmosConnectionString, "AccountKey"}},
		{"key not base64", map[string]string{KeyCosmosConnectionString: "AccountEndpoint=https://a/;AccountKey=not*base64"}, []string{KeyCosmosConnectionString, "base64"}},
		{"endpoint not a URL", map[string]string{KeyCosmosConnectionString: "AccountEndpoint=a.documents.azure.com;AccountKey=" + key}, []string{KeyCosmosConnectionString, "http(s) URL"}},
		{"endpoint without host", map[string]string{KeyCosmosConnectionString: "AccountEndpoint=https://:443/;AccountKey=" + key}, []string{KeyCosmosConnectionString, "http(s) URL"}},
		{"duplicate endpoint", map[string]string{KeyCosmosConnectionString: "AccountEndpoint=https://a/;AccountEndpoint=https://b/;AccountKey=" + key}, []string{KeyCosmosConnectionString, "more than once"}},
		{"entry without =", map[string]string{KeyCosmosConnectionString: "AccountEndpoint=https://a/;AccountKey=" + key + ";C2FtcGxlLWtleS1ub3Q"}, []string{KeyCosmosConnectionString, "'='"}},
		{"connection string and managed identity", map[string]string{KeyCosmosConnectionString: "AccountEndpoint=https://a/;AccountKey=" + key, KeyCosmosClientID: "cid"}, []string{KeyCosmosClientID, KeyCosmosConnectionString}},
		{"endpoint", map[string]string{KeyCosmosEndpoint: "https://a.documents.azure.com:443/", KeyCosmosClientID: "cid"}, nil},
		{"endpoint http loopback", map[string]string{KeyCosmosEndpoint: "http://127.0.0.1:8081/"}, nil},
		{"endpoint http remote", map[string]string{KeyCosmosEndpoint: "http://a.documents.azure.com/"}, []string{KeyCosmosEndpoint, "https"}},
		{"endpoint ftp", map[string]string{KeyCosmosEndpoint: "ftp://a/"}, []string{KeyCosmosEndpoint, "scheme"}},
		{"endpoint without host", map[string]string{KeyCosmosEndpoint: "https:///x"}, []string{KeyCosmosEndpoint, "host"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := load(t, cosmos(c.set))
			if c.errHas == nil {
				if err != nil {
					t.Fatal(err)
				}
				if c.set[KeyCosmosConnectionString] != "" && (cfg.Inbox.Cosmos.Connection.AccountKey != key || cfg.Inbox.Cosmos.Connection.AccountEndpoint == "") {
					t.Errorf("connection not parsed: endpoint %q", cfg.Inbox.Cosmos.Connection.AccountEndpoint)
				}
				return
			}
			oneProblem(t, err, c.errHas, key, "not*base64")
		})
	}
}

func TestMaxBodyBytesInFlight(t *testing.T) {
	cfg, err := load(t, nil)
	if err != nil || cfg.Host.MaxBodyBytesInFlight != 67108864 {
		t.Fatalf("default: %v %v", cfg, err)
	}
	for in, want := range map[string]int64{"1048576": 1 << 20, "17179869184": 16 << 30, "268435456": 256 << 20} {
		cfg, err := load(t, map[string]string{KeyMaxBodyBytesInFlight: in})
		if err != nil || cfg.Host.MaxBodyBytesInFlight != want {
			t.Errorf("%s=%s: %v %v", KeyMaxBodyBytesInFlight, in, cfg, err)
		}
	}
	for _, in := range []string{"1048575", "17179869185", "0", "-1", "256MiB", "1e9", "1.5", "99999999999999999999"} {
		_, err := load(t, map[string]string{KeyMaxBodyBytesInFlight: in})
		ps := problems(t, err)
		if len(ps) != 1 || !strings.Contains(ps[0], KeyMaxBodyBytesInFlight) || !strings.Contains(ps[0], `"`+in+`"`) || !strings.Contains(ps[0], "17179869184") {
			t.Errorf("%s=%s: problems %q", KeyMaxBodyBytesInFlight, in, ps)
		}
	}
}

// Every problem names its setting and quotes a bounded part of the value.
func TestProblemsNameTheSettingAndBoundTheValue(t *testing.T) {
	long := strings.Repeat("x", 10000)
	keys := []string{KeyPort, KeyEndpoint, KeyInboxEnabled, KeyInboxStore, KeyRetention, KeyCleanupSchedule, KeyPurgeBatchSize,
		KeyCleanupBudget, KeyCleanupConcurrency, KeyCosmosDatabase, KeyCosmosContainer, KeyCosmosAutoCreate, KeyCosmosRelaxed,
		KeyServiceBusNamespace, KeyResolverSink, KeyLogLevel, KeyRetryBaseDelay, KeyRetryMaxDelay, KeyMaxBodyBytesInFlight,
		KeyOutboxSweepSchedule, KeyOutboxMinimumAge, KeyPublishMaxMessageBytes}
	for _, k := range keys {
		set := map[string]string{k: long + "/", KeyInboxEnabled: "true", KeyInboxStore: "InMemory"}
		_, err := load(t, set)
		ps := problems(t, err)
		if len(ps) != 1 {
			t.Errorf("%s: want one problem, got %d", k, len(ps))
			continue
		}
		if !strings.Contains(ps[0], k) || !strings.Contains(ps[0], `"`+strings.Repeat("x", 100)+`"…`) {
			t.Errorf("%s: problem does not name the setting with a cut value: %.300s", k, ps[0])
		}
		if len(ps[0]) > 800 {
			t.Errorf("%s: problem is %d bytes long: %.300s", k, len(ps[0]), ps[0])
		}
	}
	// Connection strings are never quoted at all.
	for _, k := range []string{KeyServiceBus, KeyCosmosConnectionString} {
		_, err := load(t, map[string]string{k: "Endpoint=;AccountKey=" + long, KeyInboxEnabled: "true", KeyInboxStore: "Cosmos"})
		for _, p := range problems(t, err) {
			if strings.Contains(p, "xxx") {
				t.Errorf("%s: a problem quotes the connection string: %.200s", k, p)
			}
		}
	}
}

func TestFormatTimeSpan(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "00:00:00", time.Second: "00:00:01", 5 * time.Minute: "00:05:00", 3650 * day: "3650.00:00:00",
		-90 * time.Second: "-00:01:30", 1500 * time.Millisecond: "00:00:01.5000000",
		time.Duration(1<<63 - 1): "106751.23:47:16.8547758", time.Duration(-1 << 63): "-106751.23:47:16.8547758",
	} {
		if got := formatTimeSpan(d); got != want {
			t.Errorf("formatTimeSpan(%d) = %q, want %q", int64(d), got, want)
		}
		if d > -1<<63 {
			if back, err := ParseDuration(formatTimeSpan(d)); err != nil || back != d-d%100 {
				t.Errorf("ParseDuration(formatTimeSpan(%v)) = %v, %v", d, back, err)
			}
		}
	}
}
