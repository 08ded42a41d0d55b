package trackingtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/message"
	"github.com/nimbus-go/functions-subscriber/internal/tracking"
)

// fullySetEvent is NimBus's FullySetEvent: every field set, so a field a
// provider drops shows up.
func fullySetEvent(endpointID, eventID, sessionID string) tracking.UnresolvedEvent {
	s := tracking.Str
	rc, rl := int32(3), int32(7)
	q, p := int64(111), int64(222)
	by := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	return tracking.UnresolvedEvent{
		UpdatedAt:                  time.Date(2026, 5, 1, 8, 0, 0, 123456700, time.UTC),
		EnqueuedTimeUtc:            time.Date(2026, 5, 1, 7, 59, 0, 0, time.UTC),
		EventID:                    eventID,
		SessionID:                  sessionID,
		CorrelationID:              s("corr-drift"),
		ResolutionStatus:           tracking.Failed,
		EndpointRole:               tracking.Subscriber,
		EndpointID:                 endpointID,
		RetryCount:                 &rc,
		RetryLimit:                 &rl,
		MessageType:                message.ErrorResponse,
		DeadLetterReason:           s("dl-reason"),
		DeadLetterErrorDescription: s("dl-description"),
		LastMessageID:              s("last-1"),
		OriginatingMessageID:       s("origin-1"),
		ParentMessageID:            s("parent-1"),
		Reason:                     s("reason-1"),
		OriginatingFrom:            s("adapter-1"),
		EventTypeID:                s("OrderPlaced"),
		To:                         s("subscriber-1"),
		From:                       s("publisher-1"),
		MessageContent: &message.Content{
			EventContent: &message.EventContent{EventTypeID: s("OrderPlaced"), EventJSON: s(`{"secret":"payload"}`)},
			ErrorContent: &message.ErrorContent{ErrorText: s("boom"), ErrorType: s("System.InvalidOperationException"), ExceptionStackTrace: s("at X")},
		},
		QueueTimeMs:       &q,
		ProcessingTimeMs:  &p,
		PendingSubStatus:  s("Handoff"),
		HandoffReason:     s("external work"),
		ExternalJobID:     s("JOB-9"),
		ExpectedBy:        &by,
		CloudEventID:      s("ce-event-search-1"),
		CloudEventSource:  s("urn:nimbus:event-search"),
		CloudEventType:    s("com.nimbus.event-search.v1"),
		CloudEventSubject: s("events/42"),
	}
}

// fullySetMessage is the MessageEntity of NimBus's message drift guard.
func fullySetMessage(endpointID, eventID, messageID string) tracking.MessageEntity {
	s := tracking.Str
	rc, rl := int32(3), int32(7)
	ds, q, p := int64(5), int64(111), int64(222)
	by := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	return tracking.MessageEntity{
		EventID:                    eventID,
		MessageID:                  messageID,
		EventTypeID:                s("OrderPlaced"),
		OriginatingMessageID:       s("origin-1"),
		ParentMessageID:            s("parent-1"),
		From:                       s("publisher-1"),
		To:                         s("subscriber-1"),
		OriginatingFrom:            s("adapter-1"),
		SessionID:                  s("session-msgdrift"),
		CorrelationID:              s("corr-msgdrift"),
		EnqueuedTimeUtc:            time.Date(2026, 5, 1, 8, 30, 0, 0, time.UTC),
		MessageType:                message.ErrorResponse,
		EndpointRole:               tracking.Subscriber,
		EndpointID:                 endpointID,
		RetryCount:                 &rc,
		RetryLimit:                 &rl,
		DeadLetterReason:           s("dl-reason"),
		DeadLetterErrorDescription: s("dl-description"),
		OriginalSessionID:          s("orig-session"),
		DeferralSequence:           &ds,
		QueueTimeMs:                &q,
		ProcessingTimeMs:           &p,
		PendingSubStatus:           s("Handoff"),
		HandoffReason:              s("external work"),
		ExternalJobID:              s("JOB-9"),
		ExpectedBy:                 &by,
		CloudEventID:               s("ce-message-search-1"),
		CloudEventSource:           s("urn:nimbus:message-search"),
		CloudEventType:             s("com.nimbus.message-search.v1"),
		CloudEventSubject:          s("messages/42"),
		MessageContent: &message.Content{
			EventContent: &message.EventContent{EventTypeID: s("OrderPlaced"), EventJSON: s(`{"secret":"payload"}`)},
			ErrorContent: &message.ErrorContent{ErrorText: s("boom"), ErrorType: s("System.InvalidOperationException"), ExceptionStackTrace: s("at X")},
		},
	}
}

// diffJSON compares two values by their JSON; "" when equal.
func diffJSON(want, got any) string {
	w, err1 := json.Marshal(want)
	g, err2 := json.Marshal(got)
	if err1 != nil || err2 != nil {
		return fmt.Sprintf("marshal: %v %v", err1, err2)
	}
	if bytes.Equal(w, g) {
		return ""
	}
	return fmt.Sprintf("\nwant %s\n got %s", w, g)
}
