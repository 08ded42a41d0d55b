package servicebus

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testctx"
	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
	"github.com/nimbus-go/functions-subscriber/internal/message"
)

// transferCounter is a TCP proxy in front of the Service Bus stand-in that
// counts the AMQP transfer frames clients send: one per message sent, or
// per batch (messages this small fit in one frame).
type transferCounter struct {
	ln        net.Listener
	target    string
	transfers atomic.Int64
	wg        sync.WaitGroup
}

func startTransferCounter(tb testing.TB, port int) *transferCounter {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &transferCounter{ln: ln, target: fmt.Sprintf("127.0.0.1:%d", port)}
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(func() {
		_ = ln.Close()
		p.wg.Wait()
	})
	return p
}

// ConnectionString connects the SDK through the proxy.
func (p *transferCounter) ConnectionString() string {
	return testenv.ConnectionString(p.ln.Addr().(*net.TCPAddr).Port)
}

func (p *transferCounter) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			_, _ = io.Copy(client, server)
			_ = client.Close()
		}()
		go func() {
			defer p.wg.Done()
			p.frames(client, server)
			_ = server.Close()
		}()
	}
}

// frames forwards what the client writes and counts its transfer
// performatives: a protocol header is "AMQP" and 4 bytes; a frame is a
// 4-byte size, data offset, type and channel, then (type 0, AMQP) a
// described performative, 0x00 then its code as smallulong 0x53 or ulong
// 0x80; transfer is 0x14.
func (p *transferCounter) frames(client io.Reader, server io.Writer) {
	r := bufio.NewReader(client)
	hdr := make([]byte, 8)
	for {
		if _, err := io.ReadFull(r, hdr); err != nil {
			return
		}
		if bytes.HasPrefix(hdr, []byte("AMQP")) {
			if _, err := server.Write(hdr); err != nil {
				return
			}
			continue
		}
		size := binary.BigEndian.Uint32(hdr)
		if size < 8 {
			return
		}
		frame := make([]byte, size)
		copy(frame, hdr)
		if _, err := io.ReadFull(r, frame[8:]); err != nil {
			return
		}
		if off := int(hdr[4]) * 4; hdr[5] == 0 && off >= 8 && len(frame) >= off+3 && frame[off] == 0 {
			perf := frame[off+1:]
			if (perf[0] == 0x53 && perf[1] == 0x14) || (perf[0] == 0x80 && len(perf) >= 9 && binary.BigEndian.Uint64(perf[1:9]) == 0x14) {
				p.transfers.Add(1)
			}
		}
		if _, err := server.Write(frame); err != nil {
			return
		}
	}
}

// tapTopology is the endpoint's NimBus topology with a catch-all session
// subscription "tap" on its topic, which shows everything sent to it.
func tapTopology() testenv.Topology {
	topo := testenv.NimBusTopology(endpoint)
	for i := range topo.Topics {
		if topo.Topics[i].Name == endpoint {
			topo.Topics[i].Subscriptions = append(topo.Topics[i].Subscriptions, testenv.Subscription{Name: "tap", RequiresSession: true})
		}
	}
	return topo
}

// event is a published event of session s.
func event(t *testing.T, s, id string) *message.Outgoing {
	t.Helper()
	in := inbound(t, message.Ptr("in-1"), s, "ev-1")
	in.CorrelationID = message.Ptr("corr-1")
	o, err := message.NewPublishedEvent(in, message.Publication{Endpoint: endpoint, EventTypeID: "PaymentRecorded",
		EventJSON: `{"PaymentId":"` + id + `","Note":"é \u2028"}`, MessageID: "PaymentRecorded-" + id,
		TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// Several messages go to the endpoint topic in one AMQP transfer, in order,
// each as Publish would send it.
func TestPublishBatchIsOneTransferInOrder(t *testing.T) {
	t.Parallel()
	sb := testenv.StartServiceBus(t, tapTopology())
	proxy := startTransferCounter(t, sb.Port)
	p := newPublisher(t, proxy.ConnectionString())
	rc := sb.Client(t)
	ctx := testctx.Timeout(t, 20*time.Second)

	// The first send opens the connection and the link.
	warm := message.NewResponse(inbound(t, message.Ptr("w-1"), "warm", "ev-0"), message.Resolution, message.Timings{QueueTimeMs: 1}, nil)
	if err := p.Publish(ctx, warm); err != nil {
		t.Fatal(err)
	}
	testenv.ReceiveSession(t, rc, endpoint, "tap", "warm", 1, 20*time.Second)

	const s = "customer-1"
	response := message.NewResponse(inbound(t, message.Ptr("in-1"), s, "ev-1"), message.Resolution, message.Timings{QueueTimeMs: 12, ProcessingTimeMs: 34}, nil)
	batch := []*message.Outgoing{event(t, s, "P-1"), event(t, s, "P-2"), response}
	before := proxy.transfers.Load()
	if err := p.PublishBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if n := proxy.transfers.Load() - before; n != 1 {
		t.Errorf("the batch took %d transfers, want 1", n)
	}
	got := testenv.ReceiveSession(t, rc, endpoint, "tap", s, len(batch), 20*time.Second)
	for i, want := range batch {
		checkReceived(t, fmt.Sprintf("message %d", i+1), got[i], want)
	}
	if !uuidRE.MatchString(got[2].MessageID) {
		t.Errorf("the response's MessageId %q, want the SDK's random UUID", got[2].MessageID)
	}

	// The counter counts sends: three Publish calls are three transfers.
	before = proxy.transfers.Load()
	for _, m := range batch {
		if err := p.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if n := proxy.transfers.Load() - before; n != 3 {
		t.Errorf("three sends took %d transfers, want 3", n)
	}
	testenv.ReceiveSession(t, rc, endpoint, "tap", s, len(batch), 20*time.Second)

	before = proxy.transfers.Load()
	if err := p.PublishBatch(ctx, nil); err != nil || proxy.transfers.Load() != before {
		t.Errorf("an empty batch: %v, %d transfers", err, proxy.transfers.Load()-before)
	}
}

// checkReceived compares a received message with what was sent: every
// property's name, AMQP type and value, MessageId when set, session,
// correlation and body.
func checkReceived(t *testing.T, name string, got *azservicebus.ReceivedMessage, want *message.Outgoing) {
	t.Helper()
	if !reflect.DeepEqual(got.ApplicationProperties, want.ApplicationProperties) {
		t.Errorf("%s: properties %#v\nwant %#v", name, got.ApplicationProperties, want.ApplicationProperties)
	}
	if want.MessageID != "" && got.MessageID != want.MessageID {
		t.Errorf("%s: MessageId %q, want %q", name, got.MessageID, want.MessageID)
	}
	if got.SessionID == nil || *got.SessionID != want.SessionID || !reflect.DeepEqual(got.CorrelationID, want.CorrelationID) {
		t.Errorf("%s: session %v correlation %v, want %s %v", name, got.SessionID, got.CorrelationID, want.SessionID, want.CorrelationID)
	}
	if !bytes.Equal(got.Body, want.Body) {
		t.Errorf("%s: body %s, want %s", name, got.Body, want.Body)
	}
}

// More than fit in one batch go as consecutive batches, filled in order.
func TestSendBatchSplitsInOrder(t *testing.T) {
	t.Parallel()
	sb := testenv.StartServiceBus(t, tapTopology())
	proxy := startTransferCounter(t, sb.Port)
	c := newClient(t, proxy.ConnectionString())
	rc := sb.Client(t)
	ctx := testctx.Timeout(t, 20*time.Second)
	msg := func(i int) *Message {
		return &Message{SessionID: "s", MessageID: fmt.Sprintf("m-%d", i), Body: bytes.Repeat([]byte{'x'}, 1000),
			ApplicationProperties: map[string]any{"To": "X", "N": int32(i)}}
	}
	if err := c.Send(ctx, endpoint, msg(0)); err != nil {
		t.Fatal(err)
	}
	testenv.ReceiveSession(t, rc, endpoint, "tap", "s", 1, 20*time.Second)

	// Two of these fit in 2,500 bytes, three do not.
	c.batchMaxBytes = 2500
	var ms []*Message
	for i := 1; i <= 5; i++ {
		ms = append(ms, msg(i))
	}
	before := proxy.transfers.Load()
	if err := c.SendBatch(ctx, endpoint, ms); err != nil {
		t.Fatal(err)
	}
	if n := proxy.transfers.Load() - before; n != 3 {
		t.Errorf("5 messages, 2 per batch, took %d transfers, want 3", n)
	}
	for i, m := range testenv.ReceiveSession(t, rc, endpoint, "tap", "s", 5, 20*time.Second) {
		if m.MessageID != fmt.Sprintf("m-%d", i+1) || m.ApplicationProperties["N"] != int32(i+1) {
			t.Errorf("message %d: %s %v", i+1, m.MessageID, m.ApplicationProperties["N"])
		}
	}
}

// Nothing is sent when a message cannot be sent: one too large for a batch
// even alone, or a property of a type NimBus does not write.
func TestSendBatchRefusesBeforeSending(t *testing.T) {
	t.Parallel()
	sb := testenv.StartServiceBus(t, tapTopology())
	proxy := startTransferCounter(t, sb.Port)
	c := newClient(t, proxy.ConnectionString())
	rc := sb.Client(t)
	ctx := testctx.Timeout(t, 20*time.Second)
	small := &Message{SessionID: "s", MessageID: "small", ApplicationProperties: map[string]any{"To": "X"}, Body: []byte("{}")}
	if err := c.Send(ctx, endpoint, &Message{SessionID: "warm", ApplicationProperties: map[string]any{"To": "X"}}); err != nil {
		t.Fatal(err)
	}
	testenv.ReceiveSession(t, rc, endpoint, "tap", "warm", 1, 20*time.Second)

	// The stand-in's links take 1 MiB.
	huge := &Message{SessionID: "s", MessageID: "huge", ApplicationProperties: map[string]any{"To": "X"}, Body: bytes.Repeat([]byte{'x'}, 1<<20+1)}
	before := proxy.transfers.Load()
	err := c.SendBatch(ctx, endpoint, []*Message{small, huge})
	if !errors.Is(err, ErrTooLargeForBatch) || !strings.Contains(err.Error(), "message 2 of 2 (1048577 body bytes)") {
		t.Errorf("error %v, want ErrTooLargeForBatch naming message 2", err)
	}
	err = c.SendBatch(ctx, endpoint, []*Message{small, {SessionID: "s", ApplicationProperties: map[string]any{"n": 1}}})
	if !errors.Is(err, ErrUnsupportedProperty) || !strings.Contains(err.Error(), "message 2 of 2") {
		t.Errorf("error %v, want ErrUnsupportedProperty naming message 2", err)
	}
	if n := proxy.transfers.Load() - before; n != 0 {
		t.Errorf("%d transfers, want none", n)
	}
	// The next message is the first the session holds: nothing else was stored.
	if err := c.Send(ctx, endpoint, &Message{SessionID: "s", MessageID: "marker", ApplicationProperties: map[string]any{"To": "X"}}); err != nil {
		t.Fatal(err)
	}
	if got := testenv.ReceiveSession(t, rc, endpoint, "tap", "s", 1, 20*time.Second)[0].MessageID; got != "marker" {
		t.Errorf("the session's first message is %s, want the marker", got)
	}
}

// The broker accepts or refuses a batch whole: when it refuses one message
// of it, none of the others is stored.
func TestPublishBatchIsRefusedWhole(t *testing.T) {
	t.Parallel()
	sb := testenv.StartServiceBusWithSendFaults(t, tapTopology(), testenv.SendFaults{
		Rate: 1, Seed: 1, Entities: []string{endpoint}, Match: []testenv.Rule{{Equals: map[string]string{"To": "Resolver"}}},
	})
	p := newPublisher(t, sb.ConnectionString)
	rc := sb.Client(t)
	ctx := testctx.Timeout(t, 20*time.Second)
	const s = "customer-1"
	response := message.NewResponse(inbound(t, message.Ptr("in-1"), s, "ev-1"), message.Resolution, message.Timings{QueueTimeMs: 1}, nil)
	if err := p.PublishBatch(ctx, []*message.Outgoing{event(t, s, "P-1"), event(t, s, "P-2"), response}); err == nil {
		t.Fatal("a refused batch was reported sent")
	}
	// The stand-in's log line of the refusal may trail its answer.
	testenv.WaitUntil(t, 10*time.Second, func() bool { return sb.InjectedSendFaults()["Resolver"] >= 1 },
		func() string { return "the stand-in's refusal of the batch" })
	marker := event(t, s, "P-3")
	if err := p.PublishBatch(ctx, []*message.Outgoing{marker}); err != nil {
		t.Fatal(err)
	}
	if got := testenv.ReceiveSession(t, rc, endpoint, "tap", s, 1, 20*time.Second)[0].MessageID; got != marker.MessageID {
		t.Errorf("the session's first message is %s, want %s: part of the refused batch was stored", got, marker.MessageID)
	}
	if got := sb.InjectedSendFaults()["Resolver"]; got != 1 {
		t.Errorf("%d refusals, want 1", got)
	}
}

// An event's SizeBound is at least what the SDK counts for it in a batch
// of its own (so an event within the limit fits in a batch that size),
// and at most a few hundred bytes more.
func TestPublishedEventSizeBoundCoversTheSDKsCount(t *testing.T) {
	t.Parallel()
	sb := testenv.StartServiceBus(t, tapTopology())
	c := newClient(t, testenv.ConnectionString(sb.Port))
	ctx := testctx.Timeout(t, 20*time.Second)
	s, err := c.sender(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("é", 64) // 128 bytes, 64 characters
	in := &message.Inbound{Broker: message.Broker{MessageID: message.Ptr("in-" + long), SessionID: message.Ptr("s-" + long), CorrelationID: message.Ptr("c-" + long)},
		OriginatingMessageID: "o-" + long}
	for _, p := range []message.Publication{
		{EventTypeID: "A", MessageID: "a", EventJSON: `{}`},
		{Endpoint: "Billing", EventTypeID: "PaymentRecorded", MessageID: "PaymentRecorded-" + long, SessionID: "other-" + long,
			EventJSON: `{"PaymentId":"P-1","AmountCents":1200}`, TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", TraceState: "k=" + long},
		{EventTypeID: "B", MessageID: "b", EventJSON: `"` + strings.Repeat(`\"`, 40<<10) + `"`},
		{EventTypeID: "C", MessageID: "c", EventJSON: `"` + strings.Repeat("x", 900<<10) + `"`, MaxBytes: message.MaxMessageBytesLimit},
	} {
		m, err := message.NewPublishedEvent(in, p)
		if err != nil {
			t.Fatal(err)
		}
		am, err := fromOutgoing(m).toSDK()
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.NewMessageBatch(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.AddMessage(am, nil); err != nil {
			t.Fatalf("%d-byte body: %v", len(m.Body), err)
		}
		counted, bound := int(b.NumBytes()), m.SizeBound()
		t.Logf("%d-byte body: the SDK counts %d bytes, the bound is %d", len(m.Body), counted, bound)
		if bound < counted || bound > counted+512 {
			t.Errorf("%d-byte body: bound %d for the SDK's %d bytes, want from %d to %d", len(m.Body), bound, counted, counted, counted+512)
		}
	}
}
