package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// proxiedClient is an SDK client that reaches the stand-in through p, with
// retries set by the test.
func proxiedClient(t *testing.T, p *AMQPFaultProxy, retry azservicebus.RetryOptions) *azservicebus.Client {
	t.Helper()
	c, err := azservicebus.NewClientFromConnectionString(p.ConnectionString, &azservicebus.ClientOptions{RetryOptions: retry})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// drain receives everything subscription all of topic T holds, waiting
// quiet for more.
func drain(t *testing.T, c *azservicebus.Client, quiet time.Duration) []string {
	t.Helper()
	r, err := c.NewReceiverForSubscription("T", "all", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	var got []string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), quiet)
		ms, err := r.ReceiveMessages(ctx, 100, nil)
		cancel()
		for _, m := range ms {
			got = append(got, string(m.Body))
		}
		if len(ms) == 0 || err != nil {
			return got
		}
	}
}

// marked matches the transfers whose message carries the bytes "fault-me".
func marked(body []byte) bool { return bytes.Contains(body, []byte("fault-me")) }

// TestAMQPFaultProxyKinds sends, through the proxy, one message it must
// fault and one it must pass, for each kind: a cut before the transfer
// stores nothing and fails the send; a cut after it stores the message
// once per try although every try fails; the other message goes through
// on the same client once it reconnected.
func TestAMQPFaultProxyKinds(t *testing.T) {
	t.Parallel()
	for _, kind := range []AMQPFaultKind{AMQPCutBefore, AMQPCutAfter} {
		t.Run(kind.String(), func(t *testing.T) {
			t.Parallel()
			sb := StartServiceBus(t, Topology{Topics: []Topic{{Name: "T", Subscriptions: []Subscription{{Name: "all"}}}}})
			p := StartAMQPFaultProxy(t, sb, AMQPFaultOptions{Seed: 1, Rate: 1, Kinds: []AMQPFaultKind{kind}, Match: marked})
			const tries = 3
			c := proxiedClient(t, p, azservicebus.RetryOptions{MaxRetries: tries - 1, RetryDelay: 10 * time.Millisecond, MaxRetryDelay: 20 * time.Millisecond})
			s, err := c.NewSender("T", nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte("plain-1")}, nil); err != nil {
				t.Fatalf("an unmatched message failed: %v", err)
			}
			err = s.SendMessage(ctx, &azservicebus.Message{Body: []byte("fault-me")}, nil)
			var sbErr *azservicebus.Error
			if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeConnectionLost {
				t.Errorf("the faulted send answered %v, want a lost connection after its tries", err)
			}
			if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte("plain-2")}, nil); err != nil {
				t.Fatalf("an unmatched message failed after the fault: %v", err)
			}
			got := drain(t, sb.Client(t), 300*time.Millisecond)
			want := []string{"plain-1", "plain-2"}
			if kind == AMQPCutAfter {
				want = []string{"plain-1"}
				for range tries {
					want = append(want, "fault-me")
				}
				want = append(want, "plain-2")
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("stored %q, want %q", got, want)
			}
			cs := p.Counts()
			if cs.Eligible != tries || cs.Injected() != tries || cs.Transfers < tries+2 || cs.CutAfterUnsettled != 0 || cs.Connections < tries {
				t.Errorf("counts %+v, want %d eligible transfers all faulted (the SDK's tries), each on a connection of its own", cs, tries)
			}
		})
	}
}

// TestAMQPFaultProxySeededShare sends 60 messages one after another through
// the proxy faulting 30% of them (not the client's authorization
// requests), both kinds, with a client that retries:
// every send succeeds in the end, the broker holds each message once plus
// once more per cut after it stored a try, and nothing else.
func TestAMQPFaultProxySeededShare(t *testing.T) {
	t.Parallel()
	sb := StartServiceBus(t, Topology{Topics: []Topic{{Name: "T", Subscriptions: []Subscription{{Name: "all"}}}}})
	p := StartAMQPFaultProxy(t, sb, AMQPFaultOptions{Seed: 7, Rate: 0.3, Match: func(b []byte) bool { return bytes.Contains(b, []byte("payload-")) }})
	c := proxiedClient(t, p, azservicebus.RetryOptions{MaxRetries: 8, RetryDelay: 10 * time.Millisecond, MaxRetryDelay: 20 * time.Millisecond})
	s, err := c.NewSender("T", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 60
	for i := range n {
		if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte(fmt.Sprint("payload-", i))}, nil); err != nil {
			t.Fatalf("send %d: %v (counts %+v)", i, err, p.Counts())
		}
	}
	got := drain(t, sb.Client(t), 300*time.Millisecond)
	cs := p.Counts()
	if cs.CutBefore == 0 || cs.CutAfter == 0 || cs.CutAfterUnsettled != 0 {
		t.Errorf("counts %+v: want both kinds injected, every cut after a settled transfer", cs)
	}
	if len(got) != n+int(cs.CutAfter) {
		t.Errorf("stored %d messages, want %d sends + %d stored before their cut", len(got), n, cs.CutAfter)
	}
	seen := map[string]int{}
	for _, b := range got {
		seen[b]++
	}
	for i := range n {
		if seen[fmt.Sprint("payload-", i)] == 0 {
			t.Errorf("message %d missing", i)
		}
	}
	t.Logf("%d sends: %+v; %d stored", n, cs, len(got))
}

// TestSetSendFaultsChangesARunningBroker refuses, on a broker started
// without faults, every message To=X once SetSendFaults says so, and none
// once the faults are cleared.
func TestSetSendFaultsChangesARunningBroker(t *testing.T) {
	t.Parallel()
	sb := StartServiceBus(t, Topology{Topics: []Topic{{Name: "T", Subscriptions: []Subscription{{Name: "all"}}}}})
	c := sb.Client(t)
	s, err := c.NewSender("T", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	send := func(to string) error {
		return s.SendMessage(ctx, &azservicebus.Message{Body: []byte(to), ApplicationProperties: map[string]any{"To": to}}, nil)
	}
	if err := send("X"); err != nil {
		t.Fatalf("before the faults: %v", err)
	}
	sb.SetSendFaults(t, &SendFaults{Rate: 1, Entities: []string{"T"}, Match: []Rule{{Equals: map[string]string{"To": "X"}}}})
	if err := send("X"); err == nil {
		t.Error("a message To=X went through while the faults refuse every one")
	}
	if err := send("Y"); err != nil {
		t.Errorf("a message To=Y was refused: %v", err)
	}
	sb.SetSendFaults(t, nil)
	if err := send("X"); err != nil {
		t.Errorf("after the faults were cleared: %v", err)
	}
	got := drain(t, c, 300*time.Millisecond)
	if fmt.Sprint(got) != "[X Y X]" {
		t.Errorf("stored %q, want X, Y, X", got)
	}
	if n := sb.InjectedSendFaults()["X"]; n != 1 {
		t.Errorf("the stand-in reports %d refusals, want 1", n)
	}
}

// TestAMQPFaultProxyCountsSendsCutInFlight sends 160 messages through the
// proxy from 8 senders at once, faulting 10% of them: a cut fails the
// other sends in flight on the connection too, which the proxy counts.
// Every send succeeds in the end (the client retries), every message is
// stored, and at most once more per fault or send cut in flight.
func TestAMQPFaultProxyCountsSendsCutInFlight(t *testing.T) {
	t.Parallel()
	sb := StartServiceBus(t, Topology{Topics: []Topic{{Name: "T", Subscriptions: []Subscription{{Name: "all"}}}}})
	p := StartAMQPFaultProxy(t, sb, AMQPFaultOptions{Seed: 3, Rate: 0.1, Match: func(b []byte) bool { return bytes.Contains(b, []byte("payload-")) }})
	c := proxiedClient(t, p, azservicebus.RetryOptions{MaxRetries: 20, RetryDelay: 10 * time.Millisecond, MaxRetryDelay: 50 * time.Millisecond})
	s, err := c.NewSender("T", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const senders, each = 8, 20
	errs := make(chan error, senders*each)
	var wg sync.WaitGroup
	for w := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte(fmt.Sprint("payload-", w, "-", i))}, nil); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a send failed after its retries: %v (counts %+v)", err, p.Counts())
	}
	got := drain(t, sb.Client(t), 300*time.Millisecond)
	cs := p.Counts()
	seen := map[string]bool{}
	for _, b := range got {
		seen[b] = true
	}
	if len(seen) != senders*each {
		t.Errorf("%d distinct messages stored, want %d", len(seen), senders*each)
	}
	if cs.InFlightCut == 0 || cs.Affected() <= cs.Injected() {
		t.Errorf("counts %+v: want sends cut in flight besides the faulted ones", cs)
	}
	if extra := int64(len(got) - senders*each); extra > cs.CutAfter+cs.InFlightCut {
		t.Errorf("%d copies beyond one per message, more than the %d cuts after a transfer and %d sends cut in flight", extra, cs.CutAfter, cs.InFlightCut)
	}
	t.Logf("%d sends: %+v; %d stored", senders*each, cs, len(got))
}
