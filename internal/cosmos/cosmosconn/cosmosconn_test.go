package cosmosconn_test

import (
	"strings"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos/cosmosconn"
)

func TestParse(t *testing.T) {
	const key = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="
	good := map[string]cosmosconn.Connection{
		"AccountEndpoint=https://a.documents.azure.com:443/;AccountKey=" + key + ";":                                 {AccountEndpoint: "https://a.documents.azure.com:443/", AccountKey: key},
		" accountkey = " + key + " ; ACCOUNTENDPOINT=http://127.0.0.1:8081/;DisableServerCertificateValidation=True": {AccountEndpoint: "http://127.0.0.1:8081/", AccountKey: key},
	}
	for s, want := range good {
		got, err := cosmosconn.Parse(s)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", s, got, err, want)
		}
	}
	bad := map[string]string{
		"":                            "no AccountEndpoint",
		"AccountKey=" + key:           "no AccountEndpoint",
		"AccountEndpoint=https://a/;": "no AccountKey",
		"AccountEndpoint=https://a/;AccountKey=;":                                 "no AccountKey",
		"AccountEndpoint=https://a/;AccountKey=not*base64":                        "base64",
		"AccountEndpoint=a.documents.azure.com;AccountKey=" + key:                 "http(s) URL",
		"AccountEndpoint=https://:443/;AccountKey=" + key:                         "http(s) URL",
		"AccountEndpoint=https://a/;AccountEndpoint=https://b/;AccountKey=" + key: "AccountEndpoint more than once",
		"AccountEndpoint=https://a/;accountkey=" + key + ";AccountKey=" + key:     "AccountKey more than once",
		"AccountEndpoint=https://a/;AccountKey=" + key + ";C2FtcGxlLWtleS1ub3Q":   "'='",
	}
	for s, want := range bad {
		_, err := cosmosconn.Parse(s)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q): %v, want an error saying %q", s, err, want)
			continue
		}
		// The reason never quotes the string, which holds the key.
		if strings.Contains(err.Error(), key[:8]) || strings.Contains(err.Error(), "C2FtcGxl") || strings.Contains(err.Error(), "not*base64") {
			t.Errorf("Parse(%q): the error %q quotes the connection string", s, err)
		}
	}
}

func TestEndpoints(t *testing.T) {
	for s, want := range map[string]bool{"https://a.documents.azure.com:443/": true, "http://127.0.0.1:8081/": true, "http://localhost/": true,
		"ftp://a/": false, "a.documents.azure.com": false, "https://:443/": false} {
		if got := cosmosconn.CheckEndpoint(s) == nil; got != want {
			t.Errorf("CheckEndpoint(%q) accepts: %t, want %t", s, got, want)
		}
	}
	for s, want := range map[string]bool{"http://a.documents.azure.com/": true, "http://127.0.0.1:8081/": false, "http://[::1]:8081/": false,
		"http://localhost/": false, "https://a.documents.azure.com/": false} {
		if got := cosmosconn.PlainHTTPToAnotherMachine(s); got != want {
			t.Errorf("PlainHTTPToAnotherMachine(%q) = %t, want %t", s, got, want)
		}
	}
}
