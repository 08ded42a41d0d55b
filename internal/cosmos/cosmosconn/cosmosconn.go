// Package cosmosconn reads a Cosmos DB account's key-based connection string
// and checks an account endpoint, without the SDK, so the configuration
// layer and the Cosmos adapter accept exactly the same strings.
//
// No error of this package contains any part of a connection string: it
// holds the account key.
package cosmosconn

import (
	"encoding/base64"
	"errors"
	"net"
	"net/url"
	"strings"
)

// Connection is a parsed connection string.
type Connection struct {
	AccountEndpoint string
	AccountKey      string
}

// Form is how a connection string is written, for error messages.
const Form = "AccountEndpoint=https://<account>.documents.azure.com:443/;AccountKey=<base64 key>;"

// Parse reads AccountEndpoint=<http(s) URL>;AccountKey=<base64> (entries
// separated by ';' and trimmed, names matched without regard to case,
// other entries ignored), refusing an entry without '=', a known entry
// given twice, an endpoint that is not an http(s) URL with a host, and a
// key that is empty or not base64.
func Parse(s string) (Connection, error) {
	var c Connection
	seen := map[string]bool{}
	for part := range strings.SplitSeq(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, value, ok := strings.Cut(part, "=")
		if !ok {
			return Connection{}, errors.New("an entry has no '=' (entries are Name=value, separated by ';')")
		}
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		var dst *string
		switch {
		case strings.EqualFold(name, "AccountEndpoint"):
			dst, name = &c.AccountEndpoint, "AccountEndpoint"
		case strings.EqualFold(name, "AccountKey"):
			dst, name = &c.AccountKey, "AccountKey"
		default:
			continue
		}
		if seen[name] {
			return Connection{}, errors.New("it sets " + name + " more than once")
		}
		seen[name] = true
		*dst = value
	}
	switch {
	case c.AccountEndpoint == "":
		return Connection{}, errors.New("it has no AccountEndpoint")
	case CheckEndpoint(c.AccountEndpoint) != nil:
		return Connection{}, errors.New("its AccountEndpoint is not an http(s) URL with a host")
	case c.AccountKey == "":
		return Connection{}, errors.New("it has no AccountKey, or an empty one")
	}
	if _, err := base64.StdEncoding.DecodeString(c.AccountKey); err != nil {
		return Connection{}, errors.New("its AccountKey is not valid base64")
	}
	return c, nil
}

// CheckEndpoint reports why s is not an account endpoint: an http(s) URL
// with a host.
func CheckEndpoint(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return errors.New("it is not a URL")
	case u.Scheme != "https" && u.Scheme != "http":
		return errors.New("its scheme is not https (or http)")
	case u.Hostname() == "":
		return errors.New("it has no host")
	}
	return nil
}

// PlainHTTPToAnotherMachine reports whether the endpoint, which
// CheckEndpoint accepts, is plain http to a host other than this machine:
// Entra ID tokens must not cross a network in the clear, so plain http is
// for local stand-ins only.
func PlainHTTPToAnotherMachine(endpoint string) bool {
	u, err := url.Parse(endpoint)
	return err == nil && u.Scheme == "http" && !IsLoopback(u.Hostname())
}

// IsLoopback reports whether host names this machine.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
