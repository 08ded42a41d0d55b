package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/nimbus-go/functions-subscriber/nimbus"
)

func orderEvent(json string, deliveryCount int) *nimbus.Event {
	return &nimbus.Event{EventTypeID: "OrderPlaced", JSON: json, MessageID: "m-1", DeliveryCount: deliveryCount}
}

// callOrderPlaced runs the OrderPlaced handler as nimbus.HandleEvent
// does: the event decoded first, and a decode error returned as is.
func callOrderPlaced(ev *nimbus.Event) (nimbus.Result, error) {
	var o OrderPlaced
	if err := ev.Decode(&o); err != nil {
		return nimbus.Result{}, err
	}
	return handleOrderPlaced(context.Background(), ev, o)
}

// handoff reports whether r is a pending handoff.
func handoff(r nimbus.Result) bool { _, ok := r.Handoff(); return ok }

func TestHandleOrderPlaced(t *testing.T) {
	type want int
	const (
		completed want = iota
		pending
		transient
		permanent
	)
	cases := []struct {
		name  string
		json  string
		count int
		want  want
	}{
		{"plain order, first delivery", `{"OrderId":"o-1","Amount":10}`, 1, completed},
		{"plain order, count missing", `{"OrderId":"o-1","Amount":10}`, 0, completed},
		{"over the approval limit", `{"OrderId":"o-1","Amount":10000.01}`, 1, pending},
		{"at the approval limit", `{"OrderId":"o-1","Amount":10000}`, 1, completed},
		{"fail first 2, delivery 1", `{"OrderId":"o-1","FailFirstAttempts":2}`, 1, transient},
		{"fail first 2, delivery 2", `{"OrderId":"o-1","FailFirstAttempts":2}`, 2, transient},
		{"fail first 2, delivery 3", `{"OrderId":"o-1","FailFirstAttempts":2}`, 3, completed},
		{"fail first 2, count missing", `{"OrderId":"o-1","FailFirstAttempts":2}`, 0, completed},
		{"fail first 2, count negative", `{"OrderId":"o-1","FailFirstAttempts":2}`, -1, completed},
		{"fail first 0, count missing", `{"OrderId":"o-1","FailFirstAttempts":0}`, 0, completed},
		{"fail first -3", `{"OrderId":"o-1","FailFirstAttempts":-3}`, 1, completed},
		{"fail first 1, then over the limit", `{"OrderId":"o-1","FailFirstAttempts":1,"Amount":20000}`, 2, pending},
		{"no OrderId", `{"Amount":10}`, 1, permanent},
		{"null event", `null`, 1, permanent},
		{"not JSON", `{"OrderId":`, 1, permanent},
		{"wrong type", `{"OrderId":"o-1","FailFirstAttempts":"two"}`, 1, permanent},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := callOrderPlaced(orderEvent(c.json, c.count))
			switch c.want {
			case completed:
				if err != nil || handoff(res) {
					t.Fatalf("want completed, got handoff=%v err=%v", handoff(res), err)
				}
			case pending:
				if err != nil || !handoff(res) {
					t.Fatalf("want a pending handoff, got handoff=%v err=%v", handoff(res), err)
				}
			case transient:
				if err == nil || nimbus.KindOf(err) != nimbus.KindTransient || !strings.Contains(err.Error(), "busy") {
					t.Fatalf("want a transient failure, got %v", err)
				}
			case permanent:
				if err == nil || nimbus.KindOf(err) != nimbus.KindPermanent {
					t.Fatalf("want a permanent failure, got %v", err)
				}
			}
		})
	}
}

// Redelivered with the count the broker gives, a FailFirstAttempts message
// succeeds on delivery N+1; without a count it never fails at all.
func TestFailFirstAttemptsEnds(t *testing.T) {
	const json = `{"OrderId":"o-1","FailFirstAttempts":3}`
	failures := 0
	for count := 1; count <= 10; count++ {
		_, err := callOrderPlaced(orderEvent(json, count))
		if err == nil {
			break
		}
		failures++
	}
	if failures != 3 {
		t.Errorf("%d failed deliveries, want 3", failures)
	}
	for i := 0; i < 10; i++ {
		if _, err := callOrderPlaced(orderEvent(json, 0)); err != nil {
			t.Fatalf("delivery %d without a count failed: %v", i+1, err)
		}
	}
}

// outcome classifies what the handler did.
type outcome string

const (
	outCompleted outcome = "completed"
	outHandoff   outcome = "handoff"
	outFailed    outcome = "failed"
	outTransient outcome = "transient"
	outPermanent outcome = "permanent"
	outDiscard   outcome = "discard"
	outPanic     outcome = "panic"
)

// runOrder calls the handler and classifies the result, catching a panic.
func runOrder(t *testing.T, json string, attempt nimbus.Attempt) (out outcome, err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			out, err = outPanic, fmt.Errorf("%v", r)
		}
	}()
	ev := orderEvent(json, 1)
	ev.Attempt = attempt
	res, err := callOrderPlaced(ev)
	switch {
	case err == nil && handoff(res):
		return outHandoff, nil
	case err == nil:
		return outCompleted, nil
	}
	switch nimbus.KindOf(err) {
	case nimbus.KindTransient:
		return outTransient, err
	case nimbus.KindPermanent:
		return outPermanent, err
	case nimbus.KindDiscard:
		return outDiscard, err
	}
	return outFailed, err
}

var attempts = []nimbus.Attempt{"", nimbus.AttemptOriginal, nimbus.AttemptRetry, nimbus.AttemptResubmission, nimbus.AttemptReplay}

func TestFailSwitches(t *testing.T) {
	kinds := map[string]outcome{
		"failed":    outFailed,
		"transient": outTransient,
		"permanent": outPermanent,
		"discard":   outDiscard,
		"panic":     outPanic,
	}
	for fail, kind := range kinds {
		for _, failOn := range []string{"", "original", "always"} {
			for _, a := range attempts {
				name := fmt.Sprintf("Fail=%s FailOn=%q attempt=%q", fail, failOn, a)
				t.Run(name, func(t *testing.T) {
					json := fmt.Sprintf(`{"OrderId":"o-1","Amount":123.45,"Fail":%q,"FailOn":%q}`, fail, failOn)
					got, err := runOrder(t, json, a)
					want := kind
					if failOn != "always" && a != "" && a != nimbus.AttemptOriginal {
						want = outCompleted // a retry, resubmission or replay succeeds
					}
					if got != want {
						t.Fatalf("outcome %s (%v), want %s", got, err, want)
					}
					if err != nil {
						// The text names the switch and no value of the order.
						if !strings.Contains(err.Error(), "Fail="+fail) || strings.Contains(err.Error(), "o-1") || strings.Contains(err.Error(), "123") {
							t.Fatalf("error text %q", err.Error())
						}
					}
				})
			}
		}
	}
}

func TestFailSwitchesRefuseUnknownValues(t *testing.T) {
	for _, json := range []string{
		`{"OrderId":"o-1","Fail":"sometimes"}`,
		`{"OrderId":"o-1","Fail":"Failed"}`,
		`{"OrderId":"o-1","Fail":"failed","FailOn":"never"}`,
	} {
		got, err := runOrder(t, json, nimbus.AttemptOriginal)
		if got != outPermanent {
			t.Errorf("%s: outcome %s (%v), want permanent", json, got, err)
			continue
		}
		if strings.Contains(err.Error(), "sometimes") || strings.Contains(err.Error(), "never") || strings.Contains(err.Error(), "o-1") {
			t.Errorf("%s: error quotes the payload: %q", json, err)
		}
	}
	// No Fail: FailOn alone changes nothing.
	if got, err := runOrder(t, `{"OrderId":"o-1","FailOn":"always"}`, nimbus.AttemptRetry); got != outCompleted {
		t.Errorf("FailOn without Fail: %s (%v)", got, err)
	}
}

func TestHandoffSwitch(t *testing.T) {
	for _, a := range attempts {
		if got, err := runOrder(t, `{"OrderId":"o-1","Amount":5,"Handoff":true}`, a); got != outHandoff {
			t.Errorf("Handoff=true, attempt %q: %s (%v), want handoff", a, got, err)
		}
	}
	if got, err := runOrder(t, `{"OrderId":"o-1","Amount":5,"Handoff":false}`, nimbus.AttemptOriginal); got != outCompleted {
		t.Errorf("Handoff=false: %s (%v)", got, err)
	}
	// A failure switch wins over the handoff on the attempts it applies to.
	if got, _ := runOrder(t, `{"OrderId":"o-1","Handoff":true,"Fail":"failed"}`, nimbus.AttemptOriginal); got != outFailed {
		t.Errorf("Fail with Handoff, original: %s, want failed", got)
	}
	if got, _ := runOrder(t, `{"OrderId":"o-1","Handoff":true,"Fail":"failed"}`, nimbus.AttemptResubmission); got != outHandoff {
		t.Errorf("Fail with Handoff, resubmission: %s, want handoff", got)
	}
}

// Fail=failed with the default FailOn: the event fails once and its
// RetryRequest succeeds — the demo's failure → retry path.
func TestFailOnOriginalThenRetrySucceeds(t *testing.T) {
	const json = `{"OrderId":"o-1","Fail":"failed"}`
	var seq []outcome
	for _, a := range []nimbus.Attempt{nimbus.AttemptOriginal, nimbus.AttemptOriginal, nimbus.AttemptRetry} {
		got, _ := runOrder(t, json, a)
		seq = append(seq, got)
	}
	if fmt.Sprint(seq) != fmt.Sprint([]outcome{outFailed, outFailed, outCompleted}) {
		t.Errorf("outcomes %v", seq)
	}
}

// An order that completes publishes InvoiceRequested, then OrderAccepted,
// with message ids derived from the order; an order that fails (any
// switch, any kind) or is handed off publishes nothing.
func TestOrderPlacedPublishesItsEvents(t *testing.T) {
	ev := orderEvent(`{"OrderId":"o-1","CustomerId":"c-9","Amount":12.5}`, 1)
	if _, err := callOrderPlaced(ev); err != nil {
		t.Fatal(err)
	}
	got := ev.Published()
	if len(got) != 2 {
		t.Fatalf("published %+v", got)
	}
	want := []struct{ typ, id, json string }{
		{"InvoiceRequested", "InvoiceRequested-o-1", `{"OrderId":"o-1","CustomerId":"c-9","Amount":12.5}`},
		{"OrderAccepted", "OrderAccepted-o-1", `{"OrderId":"o-1"}`},
	}
	for i, w := range want {
		raw, err := json.Marshal(got[i].Payload)
		if err != nil {
			t.Fatal(err)
		}
		if got[i].EventTypeID != w.typ || got[i].MessageID != w.id || string(raw) != w.json || got[i].SessionID != "" {
			t.Errorf("publication %d: %s %s %s (session %q), want %s %s %s", i, got[i].EventTypeID, got[i].MessageID, raw, got[i].SessionID, w.typ, w.id, w.json)
		}
	}
	// A delivery without a MessageId cannot parent an event: the order
	// completes unannounced.
	noID := orderEvent(`{"OrderId":"o-1"}`, 1)
	noID.MessageID = ""
	if res, err := callOrderPlaced(noID); err != nil || handoff(res) || len(noID.Published()) != 0 {
		t.Errorf("without a MessageId: %v, published %+v", err, noID.Published())
	}
	for _, order := range []string{
		`{"OrderId":"o-1","Fail":"failed"}`, `{"OrderId":"o-1","Fail":"transient"}`, `{"OrderId":"o-1","Fail":"permanent"}`,
		`{"OrderId":"o-1","Fail":"discard"}`, `{"OrderId":"o-1","Handoff":true}`, `{"OrderId":"o-1","Amount":20000}`,
		`{"OrderId":"o-1","FailFirstAttempts":1}`, `{"Amount":1}`,
	} {
		ev := orderEvent(order, 1)
		if res, err := callOrderPlaced(ev); (err == nil && !handoff(res)) || len(ev.Published()) != 0 {
			t.Errorf("%s: handoff %v, err %v, published %+v", order, handoff(res), err, ev.Published())
		}
	}
}
