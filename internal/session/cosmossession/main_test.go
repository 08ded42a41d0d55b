package cosmossession_test

import (
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
)

// The package's tests share one local Cosmos server per consistency level.
func TestMain(m *testing.M) { testenv.Main(m) }
