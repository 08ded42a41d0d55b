package funchost

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// decodeServiceBusStd is the reference decoder: encoding/json alone, with
// the fast paths off. The scanner-based DecodeServiceBus must agree with it
// on every input.
func decodeServiceBusStd(envelope []byte, binding string) (*ServiceBusMessage, error) {
	var env struct {
		Data     map[string]json.RawMessage `json:"Data"`
		Metadata struct {
			DeliveryCount         json.RawMessage `json:"DeliveryCount"`
			MessageID             json.RawMessage `json:"MessageId"`
			SessionID             json.RawMessage `json:"SessionId"`
			CorrelationID         json.RawMessage `json:"CorrelationId"`
			ContentType           json.RawMessage `json:"ContentType"`
			Subject               json.RawMessage `json:"Subject"`
			SequenceNumber        json.RawMessage `json:"SequenceNumber"`
			EnqueuedTimeUtc       json.RawMessage `json:"EnqueuedTimeUtc"`
			EnqueuedTime          json.RawMessage `json:"EnqueuedTime"`
			ApplicationProperties json.RawMessage `json:"ApplicationProperties"`
			UserProperties        json.RawMessage `json:"UserProperties"`
		} `json:"Metadata"`
	}
	if err := json.Unmarshal(envelope, &env); err != nil {
		return nil, malformed("", "invalid envelope")
	}
	if env.Data == nil {
		return nil, malformed("Data", "missing")
	}
	raw, ok := env.Data[binding]
	if !ok {
		if len(env.Data) != 1 {
			return nil, malformed("Data", "bindings")
		}
		for _, v := range env.Data {
			raw = v
		}
	}
	md := &env.Metadata
	fields := [len(sbFields)][]byte{
		fDeliveryCount: md.DeliveryCount, fMessageID: md.MessageID, fSessionID: md.SessionID,
		fCorrelationID: md.CorrelationID, fContentType: md.ContentType, fSubject: md.Subject,
		fSequenceNumber: md.SequenceNumber, fEnqueuedTimeUtc: md.EnqueuedTimeUtc, fEnqueuedTime: md.EnqueuedTime,
		fApplicationProperties: md.ApplicationProperties, fUserProperties: md.UserProperties,
	}
	for i, f := range fields {
		if f != nil {
			fields[i] = bytes.TrimSpace(f)
		}
	}
	return decodeServiceBusFields(raw, &fields, false)
}

func checkSameDecode(t *testing.T, env []byte) {
	t.Helper()
	got, gotErr := DecodeServiceBus(env, "message")
	want, wantErr := decodeServiceBusStd(env, "message")
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("fast and reference decoders disagree on %q:\n fast: %v\n  ref: %v", env, gotErr, wantErr)
	}
	if gotErr != nil {
		if !errors.Is(gotErr, ErrMalformed) {
			t.Fatalf("error %v is not ErrMalformed", gotErr)
		}
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("fast and reference decoders disagree on %q:\n fast: %+v\n  ref: %+v", env, got, want)
	}
}

func TestFastDecoderMatchesReference(t *testing.T) {
	cases := []string{
		string(readFixture(t, "sb_session_binary.json")),
		string(readFixture(t, "sb_session_string.json")),
		string(nimbusEnvelope(false)),
		string(nimbusEnvelope(true)),
		`null`, `[]`, `"x"`, `{}`, `{"Data":null}`, `{"Data":{}}`, `{"Data":{"message":"eA=="}}`,
		`{"data":{"message":"eA=="},"metadata":{"messageid":"\"m\""}}`,
		`{"D\u0061ta":{"message":"eA=="},"Metadata":{"MessageId":"\"a\\u00e9\""}}`,
		`{"Data":{"message":"eA==","message":"eQ=="}}`,
		`{"Data":{"a":"eA=="},"Data":{"b":"eQ=="}}`,
		`{"Data":{"a":"eA=="},"Data":null,"Data":{"b":"eQ=="}}`,
		`{"Data":{"message":"eA=="},"Metadata":null}`,
		`{"Data":{"message":"eA=="},"Metadata":[]}`,
		`{"Data":{"message":"eA=="},"Metadata":{"MessageId":"\"a\"","MessageId":"\"b\""}}`,
		`{"Data":{"message":"eA=="},"Metadata":{"ApplicationProperties":{"a":1,"a":"x","n":null,"t":true,"o":{"x":[1,2.5e3]},"s":"\ud83d\ude00"}}}`,
		`{"Data":{"message":"eA=="},"Metadata":{"ApplicationProperties":{"bad":"\ud800"}}}`,
		`{"Data":{"message":"eA=="},"Metadata":{"DeliveryCount":"007","SequenceNumber":"99999999999999999999"}}`,
		`{"Data":{"message":"eA=="},"Metadata":{"DeliveryCount":3,"SequenceNumber":"-1"}}`,
		`{"Data":{"message":"eA=="},"Metadata":{"EnqueuedTimeUtc":"2025-01-15T10:20:05","EnqueuedTime":"2025-01-15T10:20:05+01:00"}}`,
		`{"Data":{"message":"eA=="}} x`, `{"Data":{"message":"eA=="},}`, `{"Data":{"message":"eA=="}`,
		`{"Data":{"message":"e\u0041=="}}`, `{"Data":{"message":"\"\\\"x\\\"\""}}`,
		"{\"Data\":{\"message\":\"eA==\"},\"Metadata\":{\"MessageId\":\"\\\"\xff\\\"\"}}",
		`{"Data":{"message":"eA=="},"Metadata":{"MessageId":"plain"}}`,
		`{"Data":{"message":"eA=="},"Metadata":{"Me\u017fsageId":"\"kelvin\""}}`,
		`{"Data":{"message":-0.5e+3}}`, `{"Data":{"message":01}}`, `{"Data":{"message":tru}}`,
		"{\"Data\":{\"message\":\"eA==\"}}\x00", "{\"Data\":{\"message\":\"eA==\"},\"Metadata\":{\"ApplicationProperties\":{}\x00}}",
	}
	for _, c := range cases {
		checkSameDecode(t, []byte(c))
	}
}

func FuzzFastDecoderMatchesReference(f *testing.F) {
	f.Add(readFixture(f, "sb_session_binary.json"))
	f.Add(readFixture(f, "sb_session_string.json"))
	f.Add(nimbusEnvelope(false))
	f.Add([]byte(`{"Data":{"message":"eA=="},"Metadata":{"ApplicationProperties":{"a":1,"o":{"x":[1]}}}}`))
	f.Fuzz(func(t *testing.T, env []byte) { checkSameDecode(t, env) })
}
