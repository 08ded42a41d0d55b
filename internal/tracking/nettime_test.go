package tracking

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/message"
)

// A row as NimBus's .NET Resolver writes it: 7 fraction digits with "Z",
// a DateTime of unspecified kind without a zone, enums as names.
const netRow = `{"UpdatedAt":"2026-11-30T12:55:02.1234567Z","EnqueuedTimeUtc":"0001-01-01T00:00:00","EventId":"e1","SessionId":"s1",
"CorrelationId":null,"ResolutionStatus":"Pending","EndpointRole":"Subscriber","EndpointId":"billing","RetryCount":null,"RetryLimit":null,
"MessageType":"PendingHandoffResponse","DeadLetterReason":null,"DeadLetterErrorDescription":"","LastMessageId":"m1","OriginatingMessageId":"self",
"ParentMessageId":"self","Reason":null,"OriginatingFrom":null,"EventTypeId":"OrderPlaced","To":"billing","From":"publisher",
"MessageContent":{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{}"},"ErrorContent":null},"QueueTimeMs":12,"ProcessingTimeMs":null,
"PendingSubStatus":"Handoff","HandoffReason":"x","ExternalJobId":"J","ExpectedBy":"2026-12-01T09:00:00+01:00","CloudEventId":null,
"CloudEventSource":null,"CloudEventType":null,"CloudEventSubject":null}`

func TestRowsWrittenByNimBusDecode(t *testing.T) {
	var e UnresolvedEvent
	if err := json.Unmarshal([]byte(netRow), &e); err != nil {
		t.Fatal(err)
	}
	if !e.UpdatedAt.Equal(time.Date(2026, 11, 30, 12, 55, 2, 123456700, time.UTC)) || !e.EnqueuedTimeUtc.IsZero() {
		t.Errorf("times %v %v", e.UpdatedAt, e.EnqueuedTimeUtc)
	}
	if e.ExpectedBy == nil || !e.ExpectedBy.Equal(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)) {
		t.Errorf("ExpectedBy %v", e.ExpectedBy)
	}
	if e.MessageType != message.PendingHandoffResponse || e.EndpointRole != Subscriber || e.CorrelationID != nil ||
		e.DeadLetterErrorDescription == nil || *e.DeadLetterErrorDescription != "" || *e.QueueTimeMs != 12 || *e.EventTypeID != "OrderPlaced" {
		t.Errorf("row %+v", e)
	}
	// Written back, the row keeps NimBus's field names and values.
	b, err := json.Marshal(&e)
	if err != nil {
		t.Fatal(err)
	}
	var back UnresolvedEvent
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	b2, _ := json.Marshal(&back)
	if string(b) != string(b2) {
		t.Errorf("not stable:\n%s\n%s", b, b2)
	}
	var m MessageEntity
	if err := json.Unmarshal([]byte(`{"EventId":"e","MessageId":"m","EnqueuedTimeUtc":"2026-05-01T08:30:00","ExpectedBy":null,"MessageType":"3"}`), &m); err != nil {
		t.Fatal(err)
	}
	if !m.EnqueuedTimeUtc.Equal(time.Date(2026, 5, 1, 8, 30, 0, 0, time.UTC)) || m.ExpectedBy != nil || m.MessageType != message.ResolutionResponse {
		t.Errorf("message %+v", m)
	}
	var a MessageAudit
	if err := json.Unmarshal([]byte(`{"AuditorName":"Manager","AuditTimestamp":"2026-05-01T08:30:00.5","AuditType":3,"AccessDenied":false}`), &a); err != nil {
		t.Fatal(err)
	}
	if a.AuditType != AuditRetry || a.AuditTimestamp.Nanosecond() != 500000000 {
		t.Errorf("audit %+v", a)
	}
	for _, bad := range []string{`{"UpdatedAt":"yesterday"}`, `{"UpdatedAt":5}`, `{"MessageType":"Nope"}`, `{"ResolutionStatus":"Nope"}`} {
		if err := json.Unmarshal([]byte(bad), &e); err == nil {
			t.Errorf("%s decoded", bad)
		}
	}
}
