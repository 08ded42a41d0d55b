package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeCert writes a self-signed certificate and its key as PEM files.
func writeCert(t *testing.T) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func TestOpenTelemetrySettingsAreValidated(t *testing.T) {
	cert, key := writeCert(t)
	const secret = "SECRET"
	for _, c := range []struct {
		name string
		set  map[string]string
		want string // "" when valid; else a part of the one problem
	}{
		{"endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, ""},
		{"https endpoint with path", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://c.example/v1/traces"}, ""},
		{"not a url", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "not a url"}, "OTEL_EXPORTER_OTLP_ENDPOINT is not an OTLP/HTTP endpoint"},
		{"ftp", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://c:21/x"}, "scheme must be http or https"},
		{"bad escape", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/%zz"}, "does not parse"},
		{"user info", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://user:" + secret + "@127.0.0.1:1/"}, "user info"},
		{"user info, bad escape", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://user:" + secret + "@127.0.0.1:1/%zz"}, "does not parse"},
		{"query", map[string]string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://c:4318/v1/metrics?code=" + secret}, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT is not"},
		{"no host", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http:///v1/traces"}, "names no host"},
		{"headers", map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "api-key=" + secret + ",x-b=a%20b"}, ""},
		{"malformed headers", map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "api-key " + secret + " %zz"}, "OTEL_EXPORTER_OTLP_HEADERS is not a list of name=value headers (values not shown): entry 1 of 1 has no '='"},
		{"bad header escape", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "a=b,api-key=" + secret + "%zz"}, "OTEL_EXPORTER_OTLP_TRACES_HEADERS is not a list of name=value headers (values not shown): entry 2 of 2 has a value"},
		{"bad header name", map[string]string{"OTEL_EXPORTER_OTLP_METRICS_HEADERS": "a b=" + secret}, "OTEL_EXPORTER_OTLP_METRICS_HEADERS is not a list of name=value headers (values not shown): entry 1 of 1 has a name"},
		{"trailing comma", map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "a=" + secret + ","}, "entry 2 of 2 has no '='"},
		{"timeout", map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "5000"}, ""},
		{"bad timeout", map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "abc"}, `OTEL_EXPORTER_OTLP_TIMEOUT="abc" must be a whole number`},
		{"bad traces timeout", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "10s"}, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT="},
		{"sampler", map[string]string{"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"}, ""},
		{"bogus sampler", map[string]string{"OTEL_TRACES_SAMPLER": "bogus"}, `OTEL_TRACES_SAMPLER="bogus" is not supported`},
		{"bad ratio", map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, "OTEL_TRACES_SAMPLER_ARG"},
		{"grpc", map[string]string{"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL=\"grpc\" is not supported"},
		{"compression", map[string]string{"OTEL_EXPORTER_OTLP_COMPRESSION": "brotli"}, "OTEL_EXPORTER_OTLP_COMPRESSION"},
		{"insecure", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_INSECURE": "yes"}, "OTEL_EXPORTER_OTLP_TRACES_INSECURE"},
		{"interval", map[string]string{"OTEL_METRIC_EXPORT_INTERVAL": "0"}, "OTEL_METRIC_EXPORT_INTERVAL"},
		{"batch size", map[string]string{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "many"}, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"},
		{"temporality", map[string]string{"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "Delta"}, ""},
		{"bad temporality", map[string]string{"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "sometimes"}, "TEMPORALITY_PREFERENCE"},
		{"resource attributes", map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod,team=a%20b"}, ""},
		{"bad resource attributes", map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment"}, "OTEL_RESOURCE_ATTRIBUTES is not a list"},
		{"certificate", map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": cert}, ""},
		{"missing certificate", map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": cert + ".missing"}, "OTEL_EXPORTER_OTLP_CERTIFICATE=" + show(cert+".missing") + " cannot be read: no such file"},
		{"not a certificate", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": key}, "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE=" + show(key) + " holds no PEM certificate"},
		{"client pair", map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": cert, "OTEL_EXPORTER_OTLP_CLIENT_KEY": key}, ""},
		{"client cert alone", map[string]string{"OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE": cert}, "set OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY together"},
		{"client pair swapped", map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": key, "OTEL_EXPORTER_OTLP_CLIENT_KEY": cert}, "are not a usable certificate and key"},
		{"bad disabled", map[string]string{"OTEL_SDK_DISABLED": "yes"}, "OTEL_SDK_DISABLED"},
		{"disabled skips the rest", map[string]string{"OTEL_SDK_DISABLED": "TRUE", "OTEL_EXPORTER_OTLP_ENDPOINT": "not a url"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := load(t, c.set)
			got := problems(t, err)
			if c.want == "" {
				if len(got) != 0 {
					t.Fatalf("problems = %q", got)
				}
				return
			}
			if len(got) != 1 || !strings.Contains(got[0], c.want) {
				t.Fatalf("problems = %q, want one containing %q", got, c.want)
			}
			if strings.Contains(got[0], secret) {
				t.Fatalf("the problem quotes the secret: %q", got[0])
			}
		})
	}
}

// Every problem lands in the one list with the other settings'.
func TestOpenTelemetryProblemsJoinTheOthers(t *testing.T) {
	_, err := load(t, map[string]string{
		KeyLogLevel:                   "loud",
		"OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://c/x",
		"OTEL_TRACES_SAMPLER":         "bogus",
		"OTEL_EXPORTER_OTLP_TIMEOUT":  "abc",
	})
	if got := problems(t, err); len(got) != 4 {
		t.Fatalf("problems = %q", got)
	}
}
