package nimbus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
)

// The pipeline's event reaches the handler with every field, and a
// CloudEvent's attributes with it.
func TestAdaptPassesTheEvent(t *testing.T) {
	enq := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	ext := map[string]string{"tenant": "t-1"}
	cases := []struct {
		name string
		in   subscriber.Event
		want Event
	}{
		{
			name: "native",
			in: subscriber.Event{EventTypeID: "OrderPlaced", JSON: `{"OrderId":"O-1"}`, MessageID: "m-1", SessionID: "s-1",
				CorrelationID: "c-1", EventID: "e-1", From: "Shop", DeliveryCount: 3, RetryCount: 2, EnqueuedTime: enq,
				Attempt: subscriber.AttemptRetry},
			want: Event{EventTypeID: "OrderPlaced", JSON: `{"OrderId":"O-1"}`, MessageID: "m-1", SessionID: "s-1",
				CorrelationID: "c-1", EventID: "e-1", From: "Shop", DeliveryCount: 3, RetryCount: 2, EnqueuedTime: enq,
				Attempt: AttemptRetry},
		},
		{
			name: "CloudEvent",
			in: subscriber.Event{EventTypeID: "OrderPlaced", JSON: `{}`, Attempt: subscriber.AttemptReplay,
				CloudEvent: &subscriber.CloudEventAttributes{ID: "ce-1", Source: "/shop", Type: "shop.order.placed", SpecVersion: "1.0",
					Subject: "O-1", Time: "2025-03-01T12:00:00Z", DataSchema: "urn:s", DataContentType: "application/json", Extensions: ext}},
			want: Event{EventTypeID: "OrderPlaced", JSON: `{}`, Attempt: AttemptReplay,
				CloudEvent: &CloudEventAttributes{ID: "ce-1", Source: "/shop", Type: "shop.order.placed", SpecVersion: "1.0",
					Subject: "O-1", Time: "2025-03-01T12:00:00Z", DataSchema: "urn:s", DataContentType: "application/json", Extensions: ext}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got *Event
			h := adapt(func(_ context.Context, ev *Event) (Result, error) {
				got = ev
				return Completed(), nil
			})
			if _, err := h(t.Context(), &c.in); err != nil {
				t.Fatal(err)
			}
			if got.in != &c.in || got.pubs == nil {
				t.Fatalf("the Event is not linked to the pipeline's (in %p, want %p; publications %v)", got.in, &c.in, got.pubs)
			}
			got.in, got.pubs = nil, nil
			if !reflect.DeepEqual(*got, c.want) {
				t.Fatalf("handler got %+v\nwant %+v", *got, c.want)
			}
		})
	}
}

// Every field of the pipeline's event reaches the handler: the test fills
// each one (CloudEvent attributes included) with its own value and finds
// it, by name, in the Event, so a field added to the pipeline's event and
// not carried over fails it, as does a field of a kind it cannot fill.
func TestEventCarriesEveryFieldOfThePipelinesEvent(t *testing.T) {
	var in subscriber.Event
	n := 0
	fill(t, reflect.ValueOf(&in).Elem(), &n)
	same(t, "Event", reflect.ValueOf(in), reflect.ValueOf(*newEvent(&in)))
}

// fill sets every exported field of v, recursively, to a value no other
// field has.
func fill(t *testing.T, v reflect.Value, n *int) {
	t.Helper()
	*n++
	switch {
	case v.Type() == reflect.TypeFor[time.Time]():
		v.Set(reflect.ValueOf(time.Unix(int64(*n), 0)))
		return
	case v.Kind() == reflect.String:
		v.SetString(fmt.Sprintf("v%d", *n))
	case v.CanInt():
		v.SetInt(int64(*n))
	case v.Kind() == reflect.Bool:
		v.SetBool(true)
	case v.Kind() == reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem(), n)
	case v.Kind() == reflect.Map && v.Type().Key().Kind() == reflect.String && v.Type().Elem().Kind() == reflect.String:
		v.Set(reflect.MakeMap(v.Type()))
		v.SetMapIndex(reflect.ValueOf(fmt.Sprintf("k%d", *n)).Convert(v.Type().Key()), reflect.ValueOf(fmt.Sprintf("v%d", *n)).Convert(v.Type().Elem()))
	case v.Kind() == reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(t, v.Field(i), n)
			}
		}
	default:
		t.Fatalf("the test cannot fill a %s (%s): teach it", v.Type(), v.Kind())
	}
}

// same fails t unless every exported field of in has a field of the same
// name in out holding the same value.
func same(t *testing.T, path string, in, out reflect.Value) {
	t.Helper()
	switch {
	case in.Type() == reflect.TypeFor[time.Time]():
		if !in.Interface().(time.Time).Equal(out.Interface().(time.Time)) {
			t.Errorf("%s = %v, want %v", path, out, in)
		}
	case in.Kind() == reflect.Pointer:
		if in.IsNil() != out.IsNil() {
			t.Errorf("%s is nil: %v, want %v", path, out.IsNil(), in.IsNil())
		} else if !in.IsNil() {
			same(t, path, in.Elem(), out.Elem())
		}
	case in.Kind() == reflect.Struct:
		for i := range in.NumField() {
			f := in.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			o := out.FieldByName(f.Name)
			if !o.IsValid() {
				t.Errorf("%s has no field %s", path, f.Name)
				continue
			}
			same(t, path+"."+f.Name, in.Field(i), o)
		}
	case in.Kind() == reflect.Map:
		if fmt.Sprint(in) != fmt.Sprint(out) {
			t.Errorf("%s = %v, want %v", path, out, in)
		}
	default:
		if !in.CanConvert(out.Type()) || in.Convert(out.Type()).Interface() != out.Interface() {
			t.Errorf("%s = %v, want %v", path, out, in)
		}
	}
}

// The attempts are the pipeline's, value for value.
func TestAttemptsAreThePipelines(t *testing.T) {
	pairs := map[subscriber.Attempt]Attempt{
		subscriber.AttemptOriginal:     AttemptOriginal,
		subscriber.AttemptRetry:        AttemptRetry,
		subscriber.AttemptResubmission: AttemptResubmission,
		subscriber.AttemptReplay:       AttemptReplay,
	}
	for in, want := range pairs {
		if got := newEvent(&subscriber.Event{Attempt: in}).Attempt; got != want {
			t.Errorf("attempt %q reaches the handler as %q, want %q", in, got, want)
		}
	}
}

// The handler's result becomes the pipeline's; errors reach the pipeline
// unchanged, with their kind.
func TestAdaptReturnsTheResult(t *testing.T) {
	cause := errors.New("billing busy")
	ho := Handoff{Reason: "ManualApproval", ExternalJobID: "job-1", ExpectedIn: time.Hour}
	cases := []struct {
		name     string
		res      Result
		err      error
		wantRes  subscriber.Result
		wantKind subscriber.FailureKind
	}{
		{"completed", Completed(), nil, subscriber.Completed(), -1},
		{"zero result", Result{}, nil, subscriber.Completed(), -1},
		{"pending handoff", PendingHandoff(ho), nil, subscriber.PendingHandoff(subscriber.Handoff{Reason: "ManualApproval", ExternalJobID: "job-1", ExpectedIn: time.Hour}), -1},
		{"failed", Completed(), cause, subscriber.Result{}, subscriber.KindFailed},
		{"transient", Result{}, Transient(cause), subscriber.Result{}, subscriber.KindTransient},
		{"permanent", Result{}, Permanent(cause), subscriber.Result{}, subscriber.KindPermanent},
		{"discard", Result{}, Discard(cause), subscriber.Result{}, subscriber.KindDiscard},
		{"wrapped transient", Result{}, fmt.Errorf("charge: %w", Transient(cause)), subscriber.Result{}, subscriber.KindTransient},
		{"error wins over a handoff", PendingHandoff(ho), cause, subscriber.Result{}, subscriber.KindFailed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := adapt(func(context.Context, *Event) (Result, error) { return c.res, c.err })
			res, err := h(t.Context(), &subscriber.Event{})
			if err != c.err {
				t.Fatalf("error %v, want %v unchanged", err, c.err)
			}
			if c.err != nil {
				if subscriber.KindOf(err) != c.wantKind || !errors.Is(err, cause) {
					t.Fatalf("kind %v (cause reached: %v), want %v", subscriber.KindOf(err), errors.Is(err, cause), c.wantKind)
				}
				return
			}
			if !reflect.DeepEqual(res, c.wantRes) {
				t.Fatalf("result %+v, want %+v", res, c.wantRes)
			}
		})
	}
}

// KindOf converts the pipeline's kind by its number: both types must
// number every kind alike.
func TestFailureKindNumberingIsThePipelines(t *testing.T) {
	pairs := map[FailureKind]subscriber.FailureKind{KindNone: subscriber.KindNone, KindFailed: subscriber.KindFailed,
		KindTransient: subscriber.KindTransient, KindPermanent: subscriber.KindPermanent, KindDiscard: subscriber.KindDiscard}
	for k, sk := range pairs {
		if int(k) != int(sk) {
			t.Errorf("nimbus kind %v is %d, the pipeline's is %d", k, int(k), int(sk))
		}
	}
}

func TestKindOf(t *testing.T) {
	cause := &json.SyntaxError{Offset: 3}
	cases := []struct {
		err  error
		want FailureKind
	}{
		{nil, KindNone},
		{cause, KindFailed},
		{Transient(cause), KindTransient},
		{Permanent(cause), KindPermanent},
		{Discard(cause), KindDiscard},
		{fmt.Errorf("outer: %w", Discard(cause)), KindDiscard},
		{Permanent(Transient(cause)), KindPermanent},
		{errors.Join(errors.New("other"), Transient(cause)), KindTransient},
	}
	for _, c := range cases {
		if got := KindOf(c.err); got != c.want {
			t.Errorf("KindOf(%v) = %v, want %v", c.err, got, c.want)
		}
		if c.err == nil {
			continue
		}
		var syn *json.SyntaxError
		if !errors.As(c.err, &syn) || syn != cause {
			t.Errorf("errors.As does not reach the cause through %v", c.err)
		}
	}
	for _, mark := range []func(error) error{Transient, Permanent, Discard} {
		if mark(nil) != nil {
			t.Error("marking a nil error is not nil")
		}
	}
	names := map[FailureKind]string{KindNone: "none", KindFailed: "failed", KindTransient: "transient",
		KindPermanent: "permanent", KindDiscard: "discard", 9: "FailureKind(9)", -1: "FailureKind(-1)"}
	for k, want := range names {
		if got := k.String(); got != want {
			t.Errorf("FailureKind(%d).String() = %q, want %q", int(k), got, want)
		}
	}
}

func TestDecode(t *testing.T) {
	type order struct {
		OrderID string `json:"OrderId"`
		Amount  float64
	}
	var o order
	if err := (&Event{EventTypeID: "OrderPlaced", JSON: `{"OrderId":"O-1","Amount":12.5}`}).Decode(&o); err != nil || o != (order{"O-1", 12.5}) {
		t.Fatalf("Decode = %+v, %v", o, err)
	}
	err := (&Event{EventTypeID: "OrderPlaced", JSON: `{"OrderId":"O-secret","Amount":"lots"}`}).Decode(&o)
	var typ *json.UnmarshalTypeError
	if KindOf(err) != KindPermanent || !errors.As(err, &typ) {
		t.Fatalf("Decode of a wrong type: %v (kind %v)", err, KindOf(err))
	}
	if msg := err.Error(); strings.Contains(msg, "lots") || strings.Contains(msg, "secret") || !strings.Contains(msg, "Amount") {
		t.Fatalf("Decode error text %q: it must name the field and quote no value", msg)
	}
}

func TestResultHandoff(t *testing.T) {
	if _, ok := Completed().Handoff(); ok {
		t.Error("Completed is a handoff")
	}
	want := Handoff{Reason: "r", ExternalJobID: "j", ExpectedIn: time.Minute}
	if got, ok := PendingHandoff(want).Handoff(); !ok || got != want {
		t.Errorf("PendingHandoff(%+v).Handoff() = %+v, %v", want, got, ok)
	}
	if Completed() != (Result{}) || PendingHandoff(Handoff{}) == Completed() {
		t.Error("Completed is not the zero Result, or an empty handoff equals it")
	}
}
