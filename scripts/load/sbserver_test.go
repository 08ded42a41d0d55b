package main

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/nimbus-go/functions-subscriber/internal/dev/testenv"
)

// The Go Service Bus stand-in serves the real SDK: a client connects
// (SASL, $cbs claims, the sender and its $management pair), a message and a
// batch are accepted, each answered the send delay after it arrived, on one
// connection.
func TestSBServerAcceptsTheSDKsSends(t *testing.T) {
	t.Parallel()
	const delay = 40 * time.Millisecond
	s, err := startSBServer(delay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := azservicebus.NewClientFromConnectionString(testenv.ConnectionString(s.Port()), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	sender, err := client.NewSender(endpoint, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close(ctx)
	// The first send opens the connection and links.
	if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte(`{"a":1}`)}, nil); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		start := time.Now()
		if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte(`{"a":1}`), ApplicationProperties: map[string]any{"k": "v"}}, nil); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < delay {
			t.Errorf("a send took %v, less than the %v delay", d, delay)
		}
	}
	batch, err := sender.NewMessageBatch(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := batch.AddMessage(&azservicebus.Message{Body: make([]byte, 300<<10)}, nil); err != nil {
			t.Fatalf("a 300 KB message does not fit a batch of the advertised 1 MiB: %v", err)
		}
	}
	if err := sender.SendMessageBatch(ctx, batch, nil); err != nil {
		t.Fatal(err)
	}
	if n := s.sends.Load(); n != 5 {
		t.Errorf("%d sends accepted, want 5 (4 messages, 1 batch)", n)
	}
	if n := s.claims.Load(); n < 1 {
		t.Errorf("%d claims answered", n)
	}
	if st := s.conns.stats(); st.Opened != 1 {
		t.Errorf("%d connections opened, want 1", st.Opened)
	}
}

// The delay line reads the AMQP frames passing through it: with the Go
// stand-in (answering 30 ms after each message arrives) behind a 20 ms
// line, every send the SDK makes to the entity is recorded once, with the
// server's 30 ms as its service time; the $cbs claims are not.
func TestDelayLineTimesTheServerBehindIt(t *testing.T) {
	t.Parallel()
	const serverDelay = 30 * time.Millisecond
	s, err := startSBServer(serverDelay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	line, err := startDelayLine(s.ln.Addr().String(), 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(line.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := azservicebus.NewClientFromConnectionString(testenv.ConnectionString(line.Port()), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	sender, err := client.NewSender(endpoint, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close(ctx)
	for range 4 {
		start := time.Now()
		if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte(`{}`)}, nil); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < 50*time.Millisecond {
			t.Errorf("a send took %v through the 20 ms line to the 30 ms server", d)
		}
	}
	st := line.late.since(0, line.late.mark())
	if st.N != 4 {
		t.Fatalf("%d sends timed, want 4", st.N)
	}
	if st.Service < serverDelay || st.Service > serverDelay+20*time.Millisecond {
		t.Errorf("mean service time %v, want the server's %v (and a little)", st.Service, serverDelay)
	}
}
