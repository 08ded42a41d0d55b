package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
)

// The standard OpenTelemetry variables the SDK's OTLP/HTTP exporters,
// tracer provider and metric reader read when they are created. The SDK
// drops a value it cannot use (it logs the problem and goes on with its
// default), so a typo would leave export silently broken: Load checks them
// with every other setting. Values are never quoted in a problem: headers
// and endpoints may carry credentials.
const (
	keyOTelSDKDisabled        = "OTEL_SDK_DISABLED"
	keyOTelTracesSampler      = "OTEL_TRACES_SAMPLER"
	keyOTelTracesSamplerArg   = "OTEL_TRACES_SAMPLER_ARG"
	keyOTelResourceAttributes = "OTEL_RESOURCE_ATTRIBUTES"
	otlpPrefix                = "OTEL_EXPORTER_OTLP_"
)

// OTelSignals are the infixes of the OTLP exporter variables: the shared
// OTEL_EXPORTER_OTLP_* ones and the per-signal TRACES_ and METRICS_ ones.
var OTelSignals = []string{"", "TRACES_", "METRICS_"}

// otelPositiveInts are the SDK's duration and size variables: whole
// numbers above zero (the SDK ignores anything else).
var otelPositiveInts = []string{
	"OTEL_BSP_SCHEDULE_DELAY", "OTEL_BSP_EXPORT_TIMEOUT", "OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
	"OTEL_METRIC_EXPORT_INTERVAL", "OTEL_METRIC_EXPORT_TIMEOUT",
}

// otelSamplers are the OTEL_TRACES_SAMPLER values the Go SDK knows.
var otelSamplers = []string{"always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"}

func (l *loader) otel() {
	switch raw := l.str(keyOTelSDKDisabled); {
	case strings.EqualFold(raw, "true"):
		return // nothing is read
	case raw != "" && !strings.EqualFold(raw, "false"):
		l.problem("%s=%s must be true or false", keyOTelSDKDisabled, show(raw))
	}
	for _, sig := range OTelSignals {
		p := otlpPrefix + sig
		l.otelEndpoint(p + "ENDPOINT")
		l.otelHeaders(p + "HEADERS")
		l.otelMillis(p+"TIMEOUT", 0)
		l.otelEnum(p+"PROTOCOL", "this handler exports OTLP over HTTP (the Collector's port 4318)", "http/protobuf")
		l.otelEnum(p+"COMPRESSION", "", "gzip", "none")
		l.otelEnum(p+"INSECURE", "", "true", "false")
		l.otelCertificates(p)
	}
	l.otelEnum(otlpPrefix+"METRICS_TEMPORALITY_PREFERENCE", "", "cumulative", "delta", "lowmemory")
	l.otelEnum(otlpPrefix+"METRICS_DEFAULT_HISTOGRAM_AGGREGATION", "", "explicit_bucket_histogram", "base2_exponential_bucket_histogram")
	l.otelEnum("OTEL_METRICS_EXEMPLAR_FILTER", "", "always_on", "always_off", "trace_based")
	for _, k := range otelPositiveInts {
		l.otelMillis(k, 1)
	}
	sampler := strings.ToLower(l.str(keyOTelTracesSampler))
	l.otelEnum(keyOTelTracesSampler, "", otelSamplers...)
	if arg := l.str(keyOTelTracesSamplerArg); arg != "" && strings.HasSuffix(sampler, "traceidratio") {
		if f, err := strconv.ParseFloat(arg, 64); err != nil || f < 0 || f > 1 {
			l.problem("%s=%s must be a sampling ratio from 0 to 1 for %s=%s", keyOTelTracesSamplerArg, show(arg), keyOTelTracesSampler, sampler)
		}
	}
	if raw := l.str(keyOTelResourceAttributes); raw != "" {
		if why := checkKeyValueList(raw, false); why != "" {
			l.problem("%s is not a list of key=value pairs: %s", keyOTelResourceAttributes, why)
		}
	}
}

// otelEnum checks a variable against its values (case-insensitively).
func (l *loader) otelEnum(key, why string, values ...string) {
	raw := l.str(key)
	if raw == "" {
		return
	}
	for _, v := range values {
		if strings.EqualFold(raw, v) {
			return
		}
	}
	if why != "" {
		why = ": " + why
	}
	l.problem("%s=%s is not supported (use %s)%s", key, show(raw), strings.Join(values, ", "), why)
}

// otelMillis checks a whole number of milliseconds (or items) of at least lo.
func (l *loader) otelMillis(key string, lo int64) {
	raw := l.str(key)
	if raw == "" {
		return
	}
	if n, err := strconv.ParseInt(raw, 10, 64); err != nil || n < lo || n > 1<<31-1 {
		l.problem("%s=%s must be a whole number from %d to %d", key, show(raw), lo, 1<<31-1)
	}
}

// otelEndpoint checks an OTLP/HTTP endpoint: an absolute http or https
// URL. The exporter sends to its host and path only, so user info, a query
// or a fragment would be dropped silently: each is refused.
func (l *loader) otelEndpoint(key string) {
	raw := l.str(key)
	if raw == "" {
		return
	}
	u, err := url.Parse(raw)
	var why string
	switch {
	case err != nil:
		why = "it does not parse as a URL"
	case !strings.EqualFold(u.Scheme, "http") && !strings.EqualFold(u.Scheme, "https"):
		why = "its scheme must be http or https"
	case u.Host == "" || u.Hostname() == "":
		why = "it names no host"
	case u.User != nil:
		why = "it carries user info, which the exporter ignores (send credentials in " + otlpPrefix + "HEADERS)"
	case u.RawQuery != "" || u.ForceQuery:
		why = "it has a query, which the exporter drops"
	case u.Fragment != "":
		why = "it has a fragment, which the exporter drops"
	default:
		if _, err := strconv.Atoi(u.Port()); u.Port() != "" && err != nil {
			why = "its port is not a number"
		}
	}
	if why != "" {
		l.problem("%s is not an OTLP/HTTP endpoint such as http://localhost:4318 (value not shown): %s", key, why)
	}
}

// otelHeaders checks a header list: comma-separated name=value pairs,
// names HTTP tokens, values percent-encoded. Only entry positions are
// named: values are credentials.
func (l *loader) otelHeaders(key string) {
	if raw := l.str(key); raw != "" {
		if why := checkKeyValueList(raw, true); why != "" {
			l.problem("%s is not a list of name=value headers (values not shown): %s", key, why)
		}
	}
}

// checkKeyValueList checks a comma-separated list of key=value pairs with
// percent-encoded values; tokens requires keys to be HTTP header tokens.
func checkKeyValueList(raw string, tokens bool) string {
	entries := strings.Split(raw, ",")
	for i, e := range entries {
		k, v, ok := strings.Cut(e, "=")
		k = strings.TrimSpace(k)
		at := fmt.Sprintf("entry %d of %d", i+1, len(entries))
		switch {
		case !ok:
			return at + " has no '='"
		case k == "":
			return at + " has no name"
		case tokens && !isToken(k):
			return at + " has a name that is not an HTTP token"
		}
		if _, err := url.PathUnescape(v); err != nil {
			return at + " has a value with an invalid %-escape"
		}
	}
	return ""
}

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x7f || c <= ' ' || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// otelCertificates checks the TLS files: a CA file of PEM certificates,
// and a client certificate and key that are set together and match.
func (l *loader) otelCertificates(prefix string) {
	ca, cert, key := prefix+"CERTIFICATE", prefix+"CLIENT_CERTIFICATE", prefix+"CLIENT_KEY"
	if path := l.str(ca); path != "" {
		b, err := os.ReadFile(path)
		switch {
		case err != nil:
			l.problem("%s=%s cannot be read: %s", ca, show(path), fileError(err))
		case !x509.NewCertPool().AppendCertsFromPEM(b):
			l.problem("%s=%s holds no PEM certificate", ca, show(path))
		}
	}
	cp, kp := l.str(cert), l.str(key)
	switch {
	case cp == "" && kp == "":
	case cp == "" || kp == "":
		l.problem("set %s and %s together: the exporter ignores one without the other", cert, key)
	default:
		if _, err := tls.LoadX509KeyPair(cp, kp); err != nil {
			l.problem("%s=%s and %s=%s are not a usable certificate and key: %s", cert, show(cp), key, show(kp), fileError(err))
		}
	}
}

// fileError describes a file error without quoting file content.
func fileError(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return "not a PEM certificate and matching private key"
}
