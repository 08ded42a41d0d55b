package main

import (
	"encoding/base64"
	"errors"

	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
)

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func errorsAs(err error, target any) bool { return errors.As(err, target) }

func newRegistryForTest() *subscriber.Registry {
	r := subscriber.NewRegistry()
	registerHandlers(r)
	return r
}
