package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/dev/minihost"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv/handlerproc"
	"github.com/nimbus-go/functions-subscriber/internal/funchost/hostwire"
)

// What the outbox proofs share: a subscription that keeps every
// PaymentRecorded the endpoint's topic receives, the checks that its copies
// of one payment are one message, a tally of the Cosmos DB batches by kind
// and partition, and the OutboxSweep timer invoked as the host invokes it.

// recordedSub is a subscription of the endpoint's topic that keeps every
// PaymentRecorded the topic receives (no session: every copy, as the topic
// got it, before NimBus's forwarder stamps its per-consumer properties).
const recordedSub = "recorded"

// withRecordedTap adds recordedSub to the endpoint's topic of topo.
func withRecordedTap(topo testenv.Topology) testenv.Topology {
	return withTap(recordedSub, "PaymentRecorded")(topo)
}

// withTap returns a topology change that adds sub to the endpoint's topic,
// a subscription without sessions that keeps every message of eventTypes
// the topic receives.
func withTap(sub string, eventTypes ...string) func(testenv.Topology) testenv.Topology {
	return func(topo testenv.Topology) testenv.Topology {
		tap := testenv.Subscription{Name: sub, MaxDeliveryCount: 10}
		for _, typ := range eventTypes {
			tap.Rules = append(tap.Rules, testenv.Rule{Name: typ, Equals: map[string]string{"EventTypeId": typ}})
		}
		topics := make([]testenv.Topic, len(topo.Topics))
		copy(topics, topo.Topics)
		for i := range topics {
			if topics[i].Name == endpointID {
				topics[i].Subscriptions = append(append([]testenv.Subscription(nil), topics[i].Subscriptions...), tap)
			}
		}
		topo.Topics = topics
		return topo
	}
}

// drainRecorded receives and removes every message recordedSub holds,
// until none comes for quiet, in arrival order.
func drainRecorded(tb testing.TB, c *azservicebus.Client, quiet time.Duration) []*azservicebus.ReceivedMessage {
	tb.Helper()
	return drainTap(tb, c, recordedSub, quiet)
}

// drainTap receives and removes every message the endpoint topic's
// subscription sub holds, until none comes for quiet, in arrival order.
func drainTap(tb testing.TB, c *azservicebus.Client, sub string, quiet time.Duration) []*azservicebus.ReceivedMessage {
	tb.Helper()
	r, err := c.NewReceiverForSubscription(endpointID, sub, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		tb.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = r.Close(ctx)
	}()
	var out []*azservicebus.ReceivedMessage
	for {
		ctx, cancel := context.WithTimeout(context.Background(), quiet)
		ms, err := r.ReceiveMessages(ctx, 200, nil)
		cancel()
		out = append(out, ms...)
		if len(ms) == 0 {
			if err != nil && ctx.Err() == nil {
				tb.Fatalf("receiving from %s/%s: %v", endpointID, sub, err)
			}
			return out
		}
	}
}

// byMessageID groups messages by MessageId, each group in arrival order.
func byMessageID(ms []*azservicebus.ReceivedMessage) map[string][]*azservicebus.ReceivedMessage {
	out := map[string][]*azservicebus.ReceivedMessage{}
	for _, m := range ms {
		out[m.MessageID] = append(out[m.MessageID], m)
	}
	return out
}

// copyDiff describes how b differs from a as a copy of one message: the
// MessageId, the session, the correlation, the other broker properties
// the sender sets, every application property with its AMQP type (the
// trace context included) and the body bytes. "" when b is a's copy.
func copyDiff(a, b *azservicebus.ReceivedMessage) string {
	var diffs []string
	cmp := func(what string, x, y any) {
		if !reflect.DeepEqual(x, y) {
			diffs = append(diffs, fmt.Sprintf("%s %#v ≠ %#v", what, x, y))
		}
	}
	cmp("MessageId", a.MessageID, b.MessageID)
	cmp("SessionId", deref(a.SessionID), deref(b.SessionID))
	cmp("CorrelationId", deref(a.CorrelationID), deref(b.CorrelationID))
	cmp("To", deref(a.To), deref(b.To))
	cmp("Subject", deref(a.Subject), deref(b.Subject))
	cmp("ContentType", deref(a.ContentType), deref(b.ContentType))
	cmp("ReplyTo", deref(a.ReplyTo), deref(b.ReplyTo))
	cmp("TimeToLive", a.TimeToLive, b.TimeToLive)
	cmp("ApplicationProperties", a.ApplicationProperties, b.ApplicationProperties)
	if !bytes.Equal(a.Body, b.Body) {
		diffs = append(diffs, fmt.Sprintf("body %s ≠ %s", a.Body, b.Body))
	}
	return strings.Join(diffs, "; ")
}

// recordedBody is the body of the PaymentRecorded announcing payment pid
// of customer with the balance it left, written out independently of the
// code under test.
func recordedBody(pid, customer string, cents, balance int64) string {
	return eventBody("PaymentRecorded", fmt.Sprintf(`{"PaymentId":%q,"CustomerId":%q,"AmountCents":%d,"BalanceCents":%d}`, pid, customer, cents, balance))
}

// checkAnnounced asserts that the copies of one PaymentRecorded are one
// message, the first exactly as NimBus's PublishFromContext writes the
// announcement of payment in (its MessageId, the delivery's session and
// correlation, lineage, a traceparent, body with the balance the payment
// left).
func checkAnnounced(t *testing.T, copies []*azservicebus.ReceivedMessage, in event, pid, customer string, cents, balance int64) {
	t.Helper()
	first := copies[0]
	tp, _ := first.ApplicationProperties["traceparent"].(string)
	traceID := ""
	if parts := strings.Split(tp, "-"); len(parts) == 4 {
		traceID = parts[1]
	}
	checkPublished(t, "PaymentRecorded-"+pid, first, publishedWant(in, "PaymentRecorded"), traceID,
		"PaymentRecorded-"+pid, in.SessionID, guidFor("correlation/"+in.MessageID), recordedBody(pid, customer, cents, balance))
	for i, c := range copies[1:] {
		if d := copyDiff(first, c); d != "" {
			t.Errorf("PaymentRecorded-%s: copy %d is not the first copy again: %s", pid, i+2, d)
		}
	}
}

// ---------------------------------------------------------------------------
// Cosmos DB batches by kind

// batchKind tells the transactional batches apart: a handler's commit
// (its writes and the inbox markers) or the mark that a marker's events
// were dispatched (one patch of the marker setting dispatchedAtUtc).
type batchKind int

const (
	commitBatch batchKind = iota
	markBatch
)

func (k batchKind) String() string { return [...]string{"commit", "mark"}[k] }

// batchKindOf reads r's body (and puts it back for the proxy to forward)
// to tell a commit from a mark.
func batchKindOf(r *http.Request) batchKind {
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(b))
	if bytes.Contains(b, []byte(`"path":"/dispatchedAtUtc"`)) {
		return markBatch
	}
	return commitBatch
}

// batchPartition is the partition key value r names (a single string
// value), or "".
func batchPartition(r *http.Request) string {
	var pk []string
	_ = json.Unmarshal([]byte(r.Header.Get("x-ms-documentdb-partitionkey")), &pk)
	if len(pk) != 1 {
		return ""
	}
	return pk[0]
}

// batchTally counts the transactional batches that pass the fault proxy
// by kind, partition and answer.
type batchTally struct {
	mu    sync.Mutex
	kinds map[*http.Request]batchKind
	// answers: kind → partition → HTTP status → count.
	answers map[batchKind]map[string]map[int]int
}

func newBatchTally() *batchTally {
	return &batchTally{kinds: map[*http.Request]batchKind{}, answers: map[batchKind]map[string]map[int]int{commitBatch: {}, markBatch: {}}}
}

// hooks are the fault proxy's hooks for batch requests.
func (b *batchTally) hooks() *testenv.ForwardHooks {
	return &testenv.ForwardHooks{
		BeforeForward: func(r *http.Request) bool {
			k := batchKindOf(r)
			b.mu.Lock()
			b.kinds[r] = k
			b.mu.Unlock()
			return true
		},
		AfterRelay: func(r *http.Request, status int) {
			b.mu.Lock()
			defer b.mu.Unlock()
			k := b.kinds[r]
			delete(b.kinds, r)
			pk := batchPartition(r)
			if b.answers[k][pk] == nil {
				b.answers[k][pk] = map[int]int{}
			}
			b.answers[k][pk][status]++
		},
	}
}

// count returns how many batches of kind in partition pk were answered
// status.
func (b *batchTally) count(kind batchKind, pk string, status int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.answers[kind][pk][status]
}

// ---------------------------------------------------------------------------
// The OutboxSweep timer

// sweepLine is the OutboxSweep invocation's log line.
type sweepLine struct {
	Outcome                                    string
	Found, Dispatched, Events, Responses, Left int
	SendFailed, MarkFailed                     int
}

// runSweep invokes the OutboxSweep timer function of the handler at base
// as the Functions host does on a tick, requires a successful answer, and
// returns its log line, read from the handler's stdout (lines).
func runSweep(tb testing.TB, base string, lines func() []handlerproc.Line) sweepLine {
	tb.Helper()
	before := len(sweepLines(lines()))
	now := time.Now().UTC()
	env := hostwire.BuildTimer(hostwire.Timer{FunctionName: "OutboxSweep", Last: now.Add(-5 * time.Minute), Next: now, LastUpdated: now, UtcNow: now, RandGUID: minihost.NewGUID()})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := (&minihost.Invoker{BaseURL: base}).Invoke(ctx, "OutboxSweep", env)
	if err != nil {
		tb.Fatalf("invoking OutboxSweep: %v", err)
	}
	if !res.Succeeded {
		tb.Fatalf("OutboxSweep answered %d: %s", res.StatusCode, res.Body)
	}
	var got []handlerproc.Line
	testenv.WaitUntil(tb, 10*time.Second, func() bool {
		got = sweepLines(lines())
		return len(got) > before
	}, func() string { return "the OutboxSweep log line" })
	l := got[len(got)-1]
	return sweepLine{
		Outcome: l.Str("outcome"), Found: int(l.Num("found")), Dispatched: int(l.Num("dispatched")), Events: int(l.Num("events")),
		Left: int(l.Num("left")), Responses: int(l.Num("responses")), SendFailed: int(l.Num("sendFailed")), MarkFailed: int(l.Num("markFailed")),
	}
}

func sweepLines(ls []handlerproc.Line) []handlerproc.Line {
	var out []handlerproc.Line
	for _, l := range ls {
		if l.Fields != nil && l.Str("function") == "OutboxSweep" && l.Str("outcome") != "" {
			out = append(out, l)
		}
	}
	return out
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
