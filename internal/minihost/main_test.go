package minihost

import (
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
