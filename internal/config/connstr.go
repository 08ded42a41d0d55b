package config

import (
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos/cosmosconn"
)

// The reasons below never contain any part of a connection string: it holds
// a key.

// ServiceBusConnection is a parsed Service Bus connection string.
type ServiceBusConnection struct {
	// Host is the namespace host of Endpoint, with its port if it has one.
	Host string
	// SharedAccessKeyName and SharedAccessKey, or SharedAccessSignature.
	SharedAccessKeyName   string
	SharedAccessKey       string
	SharedAccessSignature string
	// EntityPath is the optional EntityPath entry.
	EntityPath string
	// UseDevelopmentEmulator is the optional UseDevelopmentEmulator entry.
	UseDevelopmentEmulator bool
}

// parseServiceBusConnection reads a Service Bus connection string as the
// azservicebus SDK does (entries separated by ';', names matched without
// regard to case and without trimming, unknown entries ignored) and is
// stricter about the parts it needs: Endpoint=sb://<host>[/] with a host,
// SharedAccessKeyName and SharedAccessKey both non-empty or a non-empty
// SharedAccessSignature, UseDevelopmentEmulator true or false, and no
// known entry twice. The reason is "" when s is usable.
func parseServiceBusConnection(s string) (ServiceBusConnection, string) {
	var c ServiceBusConnection
	seen := map[string]bool{}
	spaced := false
	var endpoint, emulator string
	for _, part := range strings.Split(s, ";") {
		if part == "" {
			continue
		}
		name, value, ok := strings.Cut(part, "=")
		if !ok {
			if strings.TrimSpace(part) == "" {
				continue
			}
			return c, "an entry has no '=' (entries are Name=value, separated by ';')"
		}
		var dst *string
		switch {
		case strings.EqualFold(name, "Endpoint"):
			dst = &endpoint
		case strings.EqualFold(name, "SharedAccessKeyName"):
			dst = &c.SharedAccessKeyName
		case strings.EqualFold(name, "SharedAccessKey"):
			dst = &c.SharedAccessKey
		case strings.EqualFold(name, "SharedAccessSignature"):
			dst = &c.SharedAccessSignature
		case strings.EqualFold(name, "EntityPath"):
			dst = &c.EntityPath
		case strings.EqualFold(name, "UseDevelopmentEmulator"):
			dst = &emulator
		default:
			if n := strings.TrimSpace(name); n != name && isServiceBusEntry(n) {
				spaced = true
			}
			continue // unknown entries are ignored, as the SDK does
		}
		key := strings.ToLower(name)
		if seen[key] {
			return c, "it sets " + canonicalEntry(name) + " more than once"
		}
		seen[key] = true
		*dst = value
	}
	hint := ""
	if spaced {
		hint = " (an entry name has spaces around it: the SDK does not trim them)"
	}
	if endpoint == "" {
		return c, "it has no Endpoint=sb://<namespace>.servicebus.windows.net/" + hint
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "sb" || u.Host == "" || u.Hostname() == "" || (u.Path != "" && u.Path != "/") ||
		u.RawQuery != "" || u.Fragment != "" || u.User != nil || u.Opaque != "" {
		return c, "its Endpoint is not sb://<host>/ (an sb:// address with a host and no path)"
	}
	c.Host = u.Host
	if c.SharedAccessSignature == "" && (c.SharedAccessKeyName == "" || c.SharedAccessKey == "") {
		return c, "it needs SharedAccessKeyName and SharedAccessKey, both non-empty, or SharedAccessSignature" + hint
	}
	switch {
	case emulator == "" || strings.EqualFold(emulator, "false"):
	case strings.EqualFold(emulator, "true"):
		c.UseDevelopmentEmulator = true
	default:
		return c, "its UseDevelopmentEmulator is neither true nor false"
	}
	return c, ""
}

func isServiceBusEntry(name string) bool {
	for _, k := range []string{"Endpoint", "SharedAccessKeyName", "SharedAccessKey", "SharedAccessSignature", "EntityPath", "UseDevelopmentEmulator"} {
		if strings.EqualFold(name, k) {
			return true
		}
	}
	return false
}

func canonicalEntry(name string) string {
	for _, k := range []string{"Endpoint", "SharedAccessKeyName", "SharedAccessKey", "SharedAccessSignature", "EntityPath", "UseDevelopmentEmulator", "AccountEndpoint", "AccountKey"} {
		if strings.EqualFold(strings.TrimSpace(name), k) {
			return k
		}
	}
	return "an entry"
}

// CosmosConnection is a parsed Cosmos DB connection string.
type CosmosConnection = cosmosconn.Connection

// checkNamespace reports why ns is not a host name, such as
// <ns>.servicebus.windows.net, with an optional port. It takes no scheme,
// path, query or spaces.
func checkNamespace(ns string) string {
	if strings.Contains(ns, "://") {
		return "it has a scheme: give the host name only"
	}
	if strings.ContainsAny(ns, "/;?# \t") {
		return "it has a path, ';', '?', '#' or spaces: give the host name only"
	}
	host := ns
	if h, port, err := net.SplitHostPort(ns); err == nil {
		p, perr := strconv.Atoi(port)
		if perr != nil || p < 1 || p > 65535 {
			return "its port is not 1-65535"
		}
		host = h
	}
	if len(host) > 253 {
		return "it is longer than 253 characters"
	}
	labels := strings.Split(strings.TrimSuffix(host, "."), ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return "it is not a host name (labels of 1-63 letters, digits or '-', separated by '.')"
		}
		for i := 0; i < len(l); i++ {
			ch := l[i]
			if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '-') {
				return "it is not a host name (labels of 1-63 letters, digits or '-', separated by '.')"
			}
		}
	}
	return ""
}
