package export

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"go.opentelemetry.io/otel"

	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
)

// The SDK's exporters parse their variables when Setup creates them and
// report what they cannot use through otel's global logger; those reports,
// and the error handler's, reach the process log without the header value
// or the endpoint's password, each line bounded.
func TestSDKReportsAreRedactedAndBounded(t *testing.T) {
	const secret = "SECRETVALUE"
	for _, c := range []struct {
		name string
		env  map[string]string
		want string // a part of one logged line
	}{
		{"malformed headers", map[string]string{
			EnvEndpoint:                  "http://127.0.0.1:1",
			"OTEL_EXPORTER_OTLP_HEADERS": "api-key " + secret + " %zz",
		}, "OpenTelemetry: parse headers"},
		{"bad header escape among good ones", map[string]string{
			EnvEndpoint:                         "http://127.0.0.1:1",
			"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "a=b,x-key=" + secret + "%zz",
		}, "OpenTelemetry: escape header value"},
		{"endpoint with a password", map[string]string{
			EnvEndpoint: "http://user:" + secret + "@127.0.0.1:1/%zz" + strings.Repeat("x", 4000),
		}, "OpenTelemetry: parse url"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			cfg, err := FromEnv(os.LookupEnv)
			if err != nil {
				t.Fatal(err)
			}
			logFile, err := os.Create(filepath.Join(t.TempDir(), "log"))
			if err != nil {
				t.Fatal(err)
			}
			defer logFile.Close()
			cfg.Log = logFile // safe for the SDK's concurrent writes
			tel, err := Setup(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			otel.Handle(errors.New(`failed to upload: Post "http://user:` + secret + `@127.0.0.1:1/v1/traces?api-key=` + secret + `": refused`))
			_ = tel.Shutdown(context.Background())
			b, err := os.ReadFile(logFile.Name())
			if err != nil {
				t.Fatal(err)
			}
			out := string(b)
			if !strings.Contains(out, c.want) || !strings.Contains(out, "OpenTelemetry export problem") {
				t.Fatalf("the SDK's reports did not reach the log:\n%s", out)
			}
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				if strings.Contains(line, secret) || !utf8.ValidString(line) || len(line) > 3*logsafe.MaxUnits {
					t.Errorf("line carries the secret or is unbounded (%d bytes): %s", len(line), line)
				}
			}
		})
	}
}
