package config

import (
	"strings"
	"testing"
)

func TestSessionContainer(t *testing.T) {
	c, err := Load(FromMap(base()))
	if err != nil {
		t.Fatal(err)
	}
	if c.Inbox.Cosmos.SessionContainerID != DefaultSessionContainer || DefaultSessionContainer != "sessionstate" {
		t.Fatalf("default %q", c.Inbox.Cosmos.SessionContainerID)
	}
	for raw, want := range map[string]string{"states": "states", "  ": DefaultSessionContainer, "": DefaultSessionContainer, "a b": "a b"} {
		m := base()
		m[KeySessionContainer] = raw
		c, err := Load(FromMap(m))
		if err != nil || c.Inbox.Cosmos.SessionContainerID != want {
			t.Errorf("%q: %+v %v; want %q", raw, c, err, want)
		}
	}
	for _, raw := range []string{"a/b", `a\b`, "a?b", "a#b", "trailing ", strings.Repeat("x", 256)} {
		m := base()
		m[KeySessionContainer] = raw
		_, err := Load(FromMap(m))
		if err == nil || !strings.Contains(err.Error(), KeySessionContainer) || !strings.Contains(err.Error(), "Cosmos DB id") {
			t.Errorf("%q: %v; want start-up to fail naming the setting", raw, err)
		}
	}
	// The inbox's container, by default or as set, is refused; every
	// problem is listed at once.
	for _, m := range []map[string]string{
		{KeySessionContainer: DefaultCosmosContainer},
		{KeySessionContainer: "shared", KeyCosmosContainer: "shared"},
	} {
		in := base()
		for k, v := range m {
			in[k] = v
		}
		in[KeyLogLevel] = "loud"
		_, err := Load(FromMap(in))
		if err == nil || !strings.Contains(err.Error(), KeySessionContainer+"=") || !strings.Contains(err.Error(), "own container") || !strings.Contains(err.Error(), KeyLogLevel) {
			t.Errorf("%v: %v", m, err)
		}
	}
}
