package main

import (
	"encoding/base64"

	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
)

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func newRegistryForTest() *subscriber.Registry {
	r := subscriber.NewRegistry()
	registerHandlers(r)
	return r
}
