package testenv

import (
	"encoding/json"
	"strings"
	"testing"
)

// SendFaults makes the Service Bus stand-in refuse a seeded share of the
// messages clients send (SEND_FAULTS of scripts/testenv/sbfake.js): a
// refused transfer is rejected with a condition the SDK does not retry, a
// refused schedule request is answered 404, and nothing of either is
// stored.
type SendFaults struct {
	// Rate is the share, 0..1, of eligible messages refused.
	Rate float64 `json:"rate"`
	// Seed seeds the stand-in's random stream (drawn once per eligible
	// message, in arrival order).
	Seed uint32 `json:"seed"`
	// Entities are the topics or queues whose incoming messages are
	// eligible.
	Entities []string `json:"entities"`
	// Match limits the eligible messages to those any rule matches (the
	// topology's rule syntax; Set is ignored); none means every message.
	Match []Rule `json:"match,omitempty"`
	// Condition is the AMQP error condition of a refused transfer; default
	// amqp:not-allowed.
	Condition string `json:"condition,omitempty"`
}

// StartServiceBusWithSendFaults is StartServiceBus with send faults.
func StartServiceBusWithSendFaults(tb testing.TB, topo Topology, f SendFaults) *ServiceBus {
	tb.Helper()
	js, err := json.Marshal(f)
	if err != nil {
		tb.Fatalf("testenv: encoding send faults: %v", err)
	}
	return startServiceBus(tb, topo, "SEND_FAULTS="+string(js))
}

// SetSendFaults replaces the send faults of the running stand-in (nil: no
// more faults); the refusals start again from the new seed. It needs a
// stand-in of the package's shared host (its TestMain calls Main): a
// stand-in process of its own cannot be reconfigured, and the test fails.
func (sb *ServiceBus) SetSendFaults(tb testing.TB, f *SendFaults) {
	tb.Helper()
	h, ok := sb.proc.(*hostedInstance)
	if !ok {
		tb.Fatal("testenv: changing send faults needs the package's shared stand-in host (TestMain calls testenv.Main)")
	}
	value := ""
	if f != nil {
		js, err := json.Marshal(f)
		if err != nil {
			tb.Fatalf("testenv: encoding send faults: %v", err)
		}
		value = string(js)
	}
	if err := h.configure(map[string]string{"SEND_FAULTS": value}); err != nil {
		tb.Fatalf("testenv: changing send faults: %v", err)
	}
}

// injectedSendFault starts the line the stand-in prints per refused send.
const injectedSendFault = "sbfake: injected send fault ("

// InjectedSendFaults counts the sends the stand-in refused so far, by
// the value of their To property ("" when absent).
func (sb *ServiceBus) InjectedSendFaults() map[string]int {
	out := map[string]int{}
	for _, line := range strings.Split(sb.Logs(), "\n") {
		rest, ok := strings.CutPrefix(line, injectedSendFault)
		if !ok {
			continue
		}
		to := ""
		if i := strings.Index(rest, ", To="); i >= 0 {
			to = strings.TrimSuffix(rest[i+len(", To="):], ")")
		}
		if to == "null" {
			to = ""
		}
		out[to]++
	}
	return out
}
