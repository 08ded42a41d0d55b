package tracking_test

import (
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/tracking"
	"github.com/nimbus-go/functions-subscriber/internal/tracking/trackingtest"
)

func TestMemoryConformance(t *testing.T) {
	s := &tracking.Memory{}
	trackingtest.Run(t, func(*testing.T) tracking.Store { return s })
}
