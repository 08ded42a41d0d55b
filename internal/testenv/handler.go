package testenv

import (
	"net"
	"os"
	"strings"
	"testing"
)

// FreePort returns a free TCP port on 127.0.0.1.
func FreePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// HandlerEnv is this process's environment without the NimBus, Service Bus
// and Functions settings of the machine, plus extra ("KEY=value"): the
// environment to start the handler binary with, so a test controls every
// setting it reads.
func HandlerEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NimBus__") && !strings.HasPrefix(kv, "ServiceBusConnection") && !strings.HasPrefix(kv, "FUNCTIONS_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}
