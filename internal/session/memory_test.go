package session_test

import (
	"errors"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/session"
	"github.com/nimbus-go/functions-subscriber/internal/session/sessiontest"
)

func TestMemoryConformance(t *testing.T) {
	m := session.NewMemory(session.MemoryOptions{})
	sessiontest.Run(t, func(*testing.T) sessiontest.Target {
		return sessiontest.Target{
			Store: m,
			Break: func(*testing.T) func() {
				m.FailWith(func(string) error { return errors.New("injected outage") })
				return func() { m.FailWith(nil) }
			},
		}
	})
}
