package hostsim

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// fixture reads one of the host replay fixtures (copied from the research
// notes into internal/funchost/testdata/host).
func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "host", name))
	if err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSpace(b)
}

func fixtureMessage(stringData bool) ServiceBusMessage {
	return ServiceBusMessage{
		FunctionName:       "OrderEvents",
		StringData:         stringData,
		Body:               []byte(`{"orderId":"A-1001","amount":42.5,"customer":{"id":7},"lines":[1,2]}`),
		MessageID:          "7c9e6679-7425-40de-944b-e07fc1f90ae7",
		SessionID:          S("order-A-1001"),
		CorrelationID:      S("corr-77"),
		ContentType:        S("application/json"),
		Subject:            S("OrderCreated"),
		LockToken:          "5e3d6a39-8f6c-4f55-9c0e-0d2a1f4b7c11",
		DeliveryCount:      1,
		SequenceNumber:     41,
		EnqueuedTime:       time.Date(2025, 1, 15, 10, 20, 5, 0, time.UTC),
		ExpiresAt:          time.Date(2025, 1, 29, 10, 20, 5, 0, time.UTC),
		SessionLockedUntil: time.Date(2025, 1, 15, 10, 21, 5, 123e6, time.UTC),
		Properties:         Props("eventType", "OrderCreated", "schemaVersion", 2),
		Namespace:          "sb-demo.servicebus.windows.net",
		UtcNow:             time.Date(2025, 1, 15, 10, 20, 5, 456789100, time.UTC),
		RandGUID:           "0f8fad5b-d9cb-469f-a165-70867728950e",
	}
}

func TestServiceBusMatchesHostFixtures(t *testing.T) {
	for name, stringData := range map[string]bool{"sb_session_binary.json": false, "sb_session_string.json": true} {
		t.Run(name, func(t *testing.T) {
			got := ServiceBus(fixtureMessage(stringData))
			want := fixture(t, name)
			if !bytes.Equal(got, want) {
				t.Fatalf("envelope differs from the host fixture\n got: %s\nwant: %s", got, want)
			}
		})
	}
}

func TestTimerMatchesHostFixture(t *testing.T) {
	got := TimerEnvelope(Timer{
		FunctionName: "Reconcile",
		Binding:      "myTimer",
		Last:         time.Date(2025, 1, 15, 10, 15, 0, 6123400, time.UTC),
		Next:         time.Date(2025, 1, 15, 10, 20, 0, 0, time.UTC),
		LastUpdated:  time.Date(2025, 1, 15, 10, 15, 0, 6123400, time.UTC),
		UtcNow:       time.Date(2025, 1, 15, 10, 20, 0, 15678900, time.UTC),
		RandGUID:     "b3c2a1d4-5e6f-4a7b-8c9d-0e1f2a3b4c5d",
	})
	if want := fixture(t, "timer.json"); !bytes.Equal(got, want) {
		t.Fatalf("timer envelope differs from the host fixture\n got: %s\nwant: %s", got, want)
	}
}
