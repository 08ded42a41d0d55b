package message

import (
	"encoding/json"
	"time"
)

// heartbeatJSON returns the heartbeat event JSON NimBus's subscriber sends
// back: the inbound fields kept, ForwardReceivedTime and BackwardSendTime set
// to now, Endpoint and SdkVersion filled in. Unknown inbound fields are
// carried through; an unreadable inbound heartbeat starts from empty.
func heartbeatJSON(prior string, now time.Time, endpoint, version string) string {
	fields := map[string]any{}
	if prior != "" {
		_ = json.Unmarshal([]byte(prior), &fields)
		if fields == nil {
			fields = map[string]any{}
		}
	}
	ts := FormatRoundTrip(now)
	fields["ForwardReceivedTime"] = ts
	fields["BackwardSendTime"] = ts
	fields["Endpoint"] = endpoint
	fields["SdkVersion"] = version
	b, err := json.Marshal(fields)
	if err != nil {
		return "{}"
	}
	return string(b)
}
