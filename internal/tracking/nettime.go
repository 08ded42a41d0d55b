package tracking

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// Documents written by NimBus's .NET code carry DateTime values as
// Newtonsoft writes them: ISO 8601 with "Z" for UTC values, an offset for
// local ones, and no zone at all for values of unspecified kind (such as a
// DateTime never set, "0001-01-01T00:00:00"). encoding/json's time.Time
// accepts only the first two, so the types below read times leniently: a
// time without a zone is taken as UTC.

// zonelessLayout is ISO 8601 without a zone, up to .NET's 7 fraction
// digits (more are accepted too).
const zonelessLayout = "2006-01-02T15:04:05.999999999"

func parseNetTime(b []byte) (time.Time, bool, error) {
	if bytes.Equal(b, []byte("null")) {
		return time.Time{}, false, nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return time.Time{}, false, fmt.Errorf("tracking: time %s is not a JSON string", b)
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), true, nil
	}
	t, err := time.ParseInLocation(zonelessLayout, s, time.UTC)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("tracking: %q is not an ISO 8601 time", s)
	}
	return t, true, nil
}

// netTime decodes into *t; null leaves it unchanged.
type netTime struct{ t *time.Time }

func (n netTime) UnmarshalJSON(b []byte) error {
	t, ok, err := parseNetTime(b)
	if ok {
		*n.t = t
	}
	return err
}

// netTimePtr decodes into *p; null sets it to nil.
type netTimePtr struct{ p **time.Time }

func (n netTimePtr) UnmarshalJSON(b []byte) error {
	t, ok, err := parseNetTime(b)
	if err != nil {
		return err
	}
	if ok {
		*n.p = &t
	} else {
		*n.p = nil
	}
	return nil
}

// UnmarshalJSON reads a tracking row, accepting .NET's zoneless times.
func (e *UnresolvedEvent) UnmarshalJSON(b []byte) error {
	type plain UnresolvedEvent
	aux := struct {
		*plain
		UpdatedAt       netTime    `json:"UpdatedAt"`
		EnqueuedTimeUtc netTime    `json:"EnqueuedTimeUtc"`
		ExpectedBy      netTimePtr `json:"ExpectedBy"`
	}{(*plain)(e), netTime{&e.UpdatedAt}, netTime{&e.EnqueuedTimeUtc}, netTimePtr{&e.ExpectedBy}}
	return json.Unmarshal(b, &aux)
}

// UnmarshalJSON reads a history message, accepting .NET's zoneless times.
func (m *MessageEntity) UnmarshalJSON(b []byte) error {
	type plain MessageEntity
	aux := struct {
		*plain
		EnqueuedTimeUtc netTime    `json:"EnqueuedTimeUtc"`
		ExpectedBy      netTimePtr `json:"ExpectedBy"`
	}{(*plain)(m), netTime{&m.EnqueuedTimeUtc}, netTimePtr{&m.ExpectedBy}}
	return json.Unmarshal(b, &aux)
}

// UnmarshalJSON reads an audit, accepting .NET's zoneless times.
func (a *MessageAudit) UnmarshalJSON(b []byte) error {
	type plain MessageAudit
	aux := struct {
		*plain
		AuditTimestamp netTime `json:"AuditTimestamp"`
	}{(*plain)(a), netTime{&a.AuditTimestamp}}
	return json.Unmarshal(b, &aux)
}
