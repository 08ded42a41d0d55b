package minihost

import (
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
