package testenv

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// AMQPFaultKind is one kind of fault an AMQPFaultProxy injects into a
// client's connection when the client sends a message.
type AMQPFaultKind int

const (
	// AMQPCutBefore cuts the connection instead of passing the transfer
	// on: the broker never gets the message, and the client's send fails
	// with a lost connection.
	AMQPCutBefore AMQPFaultKind = iota + 1
	// AMQPCutAfter passes the transfer on, waits until the broker has
	// settled it (stored the message, or refused it), and cuts the
	// connection before the client hears the outcome: the message may be
	// stored although the client's send fails.
	AMQPCutAfter
)

func (k AMQPFaultKind) String() string {
	switch k {
	case AMQPCutBefore:
		return "cut-before"
	case AMQPCutAfter:
		return "cut-after"
	}
	return "none"
}

// AMQPFaultOptions configures an AMQPFaultProxy. The zero value passes
// everything on.
type AMQPFaultOptions struct {
	// Seed seeds the RNG that decides which transfers get a fault and
	// which kind; the same seed and transfer order give the same faults.
	Seed uint64
	// Rate is the share of eligible transfers, 0..1, that get a fault.
	Rate float64
	// Kinds are chosen from uniformly; default both.
	Kinds []AMQPFaultKind
	// Match limits the eligible transfers to those whose first frame's
	// body (the transfer performative, then the start of the encoded
	// message: its properties and application properties) it accepts;
	// nil means every transfer. The body must not be kept.
	Match func(frameBody []byte) bool
	// SettleWait bounds how long AMQPCutAfter waits for the broker to
	// settle the transfer before it cuts anyway; default 5 s.
	SettleWait time.Duration
}

// AMQPFaultCounts counts what an AMQPFaultProxy saw and did.
type AMQPFaultCounts struct {
	Connections int64 // client connections accepted
	Transfers   int64 // transfers (deliveries) the clients started
	Eligible    int64 // transfers Match accepted
	CutBefore   int64 // connections cut before a transfer reached the broker
	CutAfter    int64 // connections cut after the broker settled a transfer
	// CutAfterUnsettled counts the AMQPCutAfter faults whose transfer the
	// broker had not settled within SettleWait (included in CutAfter).
	CutAfterUnsettled int64
	// InFlightCut counts the other eligible transfers in flight on a
	// connection when a fault cut it (the client had not heard their
	// outcome): their sends fail too, whether or not the broker stored
	// them.
	InFlightCut int64
}

// Affected is the number of eligible transfers whose send a fault failed:
// the faulted ones and those in flight with them.
func (c AMQPFaultCounts) Affected() int64 { return c.Injected() + c.InFlightCut }

// Injected is the number of faults injected.
func (c AMQPFaultCounts) Injected() int64 { return c.CutBefore + c.CutAfter }

// AMQPFaultProxy is a TCP proxy on 127.0.0.1 in front of an AMQP 1.0 peer
// without TLS (the Service Bus stand-in). It follows the frames of each
// connection in both directions and cuts the connection (both sides) at a
// seeded share of the transfers the client starts: before the transfer
// reaches the peer, or after the peer settled it and before the client
// hears of it. Everything else passes through unchanged. A client that
// reconnects gets a new connection to the peer.
type AMQPFaultProxy struct {
	// Port is the proxy's port on 127.0.0.1; ConnectionString connects the
	// azservicebus SDK to the peer through it.
	Port             int
	ConnectionString string

	target     string
	ln         net.Listener
	kinds      []AMQPFaultKind
	match      func([]byte) bool
	settleWait time.Duration

	mu      sync.Mutex
	rng     *rand.Rand
	rate    float64
	enabled bool
	conns   map[*amqpConn]bool
	closed  bool
	wg      sync.WaitGroup

	connections, transfers, eligible, cutBefore, cutAfter, cutAfterUnsettled, inFlightCut atomic.Int64
}

// NewAMQPFaultProxy starts a proxy in front of the AMQP peer listening on
// 127.0.0.1:port. Close stops it.
func NewAMQPFaultProxy(port int, opts AMQPFaultOptions) (*AMQPFaultProxy, error) {
	if opts.Rate < 0 || opts.Rate > 1 {
		return nil, fmt.Errorf("amqp fault proxy: rate %v is outside 0..1", opts.Rate)
	}
	kinds := opts.Kinds
	if len(kinds) == 0 {
		kinds = []AMQPFaultKind{AMQPCutBefore, AMQPCutAfter}
	}
	for _, k := range kinds {
		if k < AMQPCutBefore || k > AMQPCutAfter {
			return nil, fmt.Errorf("amqp fault proxy: unknown fault kind %d", k)
		}
	}
	if opts.SettleWait <= 0 {
		opts.SettleWait = 5 * time.Second
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("amqp fault proxy: %w", err)
	}
	p := &AMQPFaultProxy{
		Port:       ln.Addr().(*net.TCPAddr).Port,
		target:     "127.0.0.1:" + strconv.Itoa(port),
		ln:         ln,
		kinds:      append([]AMQPFaultKind(nil), kinds...),
		match:      opts.Match,
		settleWait: opts.SettleWait,
		rng:        rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)),
		rate:       opts.Rate,
		enabled:    true,
		conns:      map[*amqpConn]bool{},
	}
	p.ConnectionString = ConnectionString(p.Port)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// StartAMQPFaultProxy is NewAMQPFaultProxy in front of sb that fails tb on
// error and closes the proxy when tb ends.
func StartAMQPFaultProxy(tb testing.TB, sb *ServiceBus, opts AMQPFaultOptions) *AMQPFaultProxy {
	tb.Helper()
	p, err := NewAMQPFaultProxy(sb.Port, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Close)
	return p
}

// SetEnabled switches fault injection on or off; transfers pass through
// untouched while it is off.
func (p *AMQPFaultProxy) SetEnabled(on bool) {
	p.mu.Lock()
	p.enabled = on
	p.mu.Unlock()
}

// Counts returns a snapshot of the counters.
func (p *AMQPFaultProxy) Counts() AMQPFaultCounts {
	return AMQPFaultCounts{
		Connections: p.connections.Load(), Transfers: p.transfers.Load(), Eligible: p.eligible.Load(),
		CutBefore: p.cutBefore.Load(), CutAfter: p.cutAfter.Load(), CutAfterUnsettled: p.cutAfterUnsettled.Load(),
		InFlightCut: p.inFlightCut.Load(),
	}
}

// Close stops accepting, cuts every connection and waits for them to end.
func (p *AMQPFaultProxy) Close() {
	p.mu.Lock()
	p.closed = true
	conns := make([]*amqpConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	for _, c := range conns {
		c.cut()
	}
	p.wg.Wait()
}

func (p *AMQPFaultProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.connections.Add(1)
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		c := &amqpConn{p: p, client: client, server: server, remote: map[uint16]uint16{}, outstanding: map[deliveryKey]bool{}}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.cut()
			return
		}
		p.conns[c] = true
		p.wg.Add(2)
		p.mu.Unlock()
		go c.clientToServer()
		go c.serverToClient()
	}
}

// pick decides the fault for an eligible transfer: 0 means pass it on.
func (p *AMQPFaultProxy) pick() AMQPFaultKind {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.enabled || p.rate == 0 || p.rng.Float64() >= p.rate {
		return 0
	}
	return p.kinds[p.rng.IntN(len(p.kinds))]
}

func (p *AMQPFaultProxy) forget(c *amqpConn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// amqpConn is one client connection and its connection to the peer.
type amqpConn struct {
	p              *AMQPFaultProxy
	client, server net.Conn
	cutOnce        sync.Once

	mu sync.Mutex
	// remote maps the peer's channel of each session to the client's
	// (from the peer's begin frames).
	remote map[uint16]uint16
	// muted: nothing more is relayed to the client (a cut is under way).
	muted bool
	// awaiting is the transfer whose settlement a cut waits for.
	awaiting *awaitedSettle
	// outstanding are the client's unsettled transfers whose outcome it
	// has not heard, and whether each is eligible.
	outstanding map[deliveryKey]bool
}

// deliveryKey is a transfer of the client: its channel and delivery id.
type deliveryKey struct {
	channel    uint16
	deliveryID uint32
}

// countInFlight adds the eligible transfers still in flight, but the
// faulted one, to the proxy's InFlightCut.
func (c *amqpConn) countInFlight(faulted deliveryKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, eligible := range c.outstanding {
		if eligible && k != faulted {
			c.p.inFlightCut.Add(1)
		}
	}
}

// awaitedSettle is a transfer of the client (its channel and delivery id)
// whose settlement by the peer closes settled.
type awaitedSettle struct {
	channel    uint16
	deliveryID uint32
	settled    chan struct{}
}

// cut closes both sides.
func (c *amqpConn) cut() {
	c.cutOnce.Do(func() {
		_ = c.client.Close()
		_ = c.server.Close()
	})
}

// AMQP 1.0 framing: the protocol headers, and the performatives the proxy
// reads.
const (
	amqpFrameHeader  = 8
	amqpTypeAMQP     = 0x00
	amqpBegin        = 0x11
	amqpTransfer     = 0x14
	amqpDisposition  = 0x15
	amqpMaxFrameSize = 16 << 20
)

// readFrame reads a protocol header ("AMQP" and 4 bytes) or a whole frame.
func readFrame(r *bufio.Reader) ([]byte, error) {
	head, err := r.Peek(amqpFrameHeader)
	if err != nil {
		return nil, err
	}
	n := amqpFrameHeader
	if !bytes.HasPrefix(head, []byte("AMQP")) {
		size := binary.BigEndian.Uint32(head)
		if size < amqpFrameHeader || size > amqpMaxFrameSize {
			return nil, fmt.Errorf("amqp fault proxy: frame size %d", size)
		}
		n = int(size)
	}
	b := make([]byte, n)
	_, err = io.ReadFull(r, b)
	return b, err
}

// frameBody returns an AMQP frame's channel and body (the performative
// and its payload); ok is false for a protocol header, an empty frame or
// a SASL frame.
func frameBody(f []byte) (channel uint16, body []byte, ok bool) {
	if bytes.HasPrefix(f, []byte("AMQP")) || len(f) <= amqpFrameHeader || f[5] != amqpTypeAMQP {
		return 0, nil, false
	}
	doff := int(f[4]) * 4
	if doff < amqpFrameHeader || doff >= len(f) {
		return 0, nil, false
	}
	return binary.BigEndian.Uint16(f[6:8]), f[doff:], true
}

// clientToServer relays the client's frames to the peer and injects the
// faults.
func (c *amqpConn) clientToServer() {
	defer c.p.wg.Done()
	defer c.p.forget(c)
	defer c.cut()
	r := bufio.NewReaderSize(c.client, 64<<10)
	var (
		fault   AMQPFaultKind
		pending *awaitedSettle
		faulted deliveryKey
	)
	for {
		f, err := readFrame(r)
		if err != nil {
			return
		}
		ch, body, ok := frameBody(f)
		var code uint64
		var fields [][]byte
		if ok {
			code, fields, _ = performative(body)
		}
		isTransfer := ok && code == amqpTransfer
		if isTransfer && fault == 0 {
			if id, has := amqpUint(field(fields, 1)); has {
				// The first frame of a delivery (continuations omit the
				// delivery id).
				c.p.transfers.Add(1)
				eligible := c.p.match == nil || c.p.match(body)
				if eligible {
					c.p.eligible.Add(1)
					fault = c.p.pick()
					faulted = deliveryKey{ch, id}
					if fault == AMQPCutAfter {
						pending = &awaitedSettle{channel: ch, deliveryID: id, settled: make(chan struct{})}
						c.mu.Lock()
						c.muted, c.awaiting = true, pending
						c.mu.Unlock()
					}
				}
				if settled, _ := amqpBool(field(fields, 4)); !settled && fault != AMQPCutBefore {
					c.mu.Lock()
					c.outstanding[deliveryKey{ch, id}] = eligible
					c.mu.Unlock()
				}
			}
		}
		if fault == AMQPCutBefore {
			c.p.cutBefore.Add(1)
			c.countInFlight(faulted)
			return
		}
		if _, err := c.server.Write(f); err != nil {
			return
		}
		if more, _ := amqpBool(field(fields, 5)); fault == AMQPCutAfter && isTransfer && ch == pending.channel && !more {
			// The delivery's last frame is with the peer: cut once it
			// settled the delivery.
			c.p.cutAfter.Add(1)
			t := time.NewTimer(c.p.settleWait)
			select {
			case <-pending.settled:
				t.Stop()
			case <-t.C:
				c.p.cutAfterUnsettled.Add(1)
			}
			c.countInFlight(faulted)
			return
		}
	}
}

// serverToClient relays the peer's frames to the client, learns the
// sessions' channels and signals the settlement a cut waits for.
func (c *amqpConn) serverToClient() {
	defer c.p.wg.Done()
	defer c.cut()
	r := bufio.NewReaderSize(c.server, 64<<10)
	for {
		f, err := readFrame(r)
		if err != nil {
			return
		}
		if ch, body, ok := frameBody(f); ok {
			if code, fields, err := performative(body); err == nil {
				switch code {
				case amqpBegin:
					if remote, has := amqpUint(field(fields, 0)); has {
						c.mu.Lock()
						c.remote[ch] = uint16(remote)
						c.mu.Unlock()
					}
				case amqpDisposition:
					c.noteDisposition(ch, fields)
				}
			}
		}
		c.mu.Lock()
		muted := c.muted
		if !muted {
			c.settleRelayed(f)
		}
		c.mu.Unlock()
		if muted {
			continue
		}
		if _, err := c.client.Write(f); err != nil {
			return
		}
	}
}

// settleRelayed forgets the client's transfers a disposition frame f of
// the peer, about to be relayed, settles. c.mu is held.
func (c *amqpConn) settleRelayed(f []byte) {
	ch, body, ok := frameBody(f)
	if !ok {
		return
	}
	code, fields, err := performative(body)
	if err != nil || code != amqpDisposition {
		return
	}
	if role, _ := amqpBool(field(fields, 0)); !role {
		return
	}
	clientCh, ok := c.remote[ch]
	if !ok {
		return
	}
	first, ok := amqpUint(field(fields, 1))
	if !ok {
		return
	}
	last, ok := amqpUint(field(fields, 2))
	if !ok {
		last = first
	}
	for k := range c.outstanding {
		if k.channel == clientCh && first <= k.deliveryID && k.deliveryID <= last {
			delete(c.outstanding, k)
		}
	}
}

// noteDisposition closes the awaited settlement when a disposition of the
// peer as receiver covers it.
func (c *amqpConn) noteDisposition(ch uint16, fields [][]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.awaiting
	if a == nil {
		return
	}
	if clientCh, ok := c.remote[ch]; !ok || clientCh != a.channel {
		return
	}
	if role, _ := amqpBool(field(fields, 0)); !role {
		return
	}
	first, ok := amqpUint(field(fields, 1))
	if !ok {
		return
	}
	last, ok := amqpUint(field(fields, 2))
	if !ok {
		last = first
	}
	if first <= a.deliveryID && a.deliveryID <= last {
		close(a.settled)
		c.awaiting = nil
	}
}

var errAMQPEncoding = errors.New("amqp fault proxy: unexpected encoding")

// performative decodes the described list at the start of a frame body:
// its descriptor code and the encoded fields.
func performative(body []byte) (uint64, [][]byte, error) {
	if len(body) < 2 || body[0] != 0x00 {
		return 0, nil, errAMQPEncoding
	}
	var code uint64
	rest := body[2:]
	switch body[1] {
	case 0x53: // smallulong
		if len(body) < 3 {
			return 0, nil, errAMQPEncoding
		}
		code, rest = uint64(body[2]), body[3:]
	case 0x80: // ulong
		if len(body) < 10 {
			return 0, nil, errAMQPEncoding
		}
		code, rest = binary.BigEndian.Uint64(body[2:10]), body[10:]
	case 0x44: // ulong0
	default:
		return 0, nil, errAMQPEncoding
	}
	fields, err := amqpList(rest)
	return code, fields, err
}

// amqpList splits an encoded list into its encoded elements.
func amqpList(b []byte) ([][]byte, error) {
	if len(b) == 0 {
		return nil, errAMQPEncoding
	}
	var count int
	switch b[0] {
	case 0x45: // list0
		return nil, nil
	case 0xc0: // list8: size, count
		if len(b) < 3 {
			return nil, errAMQPEncoding
		}
		count, b = int(b[2]), b[3:]
	case 0xd0: // list32: size, count
		if len(b) < 9 {
			return nil, errAMQPEncoding
		}
		count, b = int(binary.BigEndian.Uint32(b[5:9])), b[9:]
	default:
		return nil, errAMQPEncoding
	}
	out := make([][]byte, 0, count)
	for range count {
		n, err := amqpSkip(b)
		if err != nil {
			return nil, err
		}
		out = append(out, b[:n])
		b = b[n:]
	}
	return out, nil
}

// amqpSkip returns the length of the encoded value at the start of b: the
// constructor's high nibble gives the width of every AMQP type.
func amqpSkip(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, errAMQPEncoding
	}
	if b[0] == 0x00 { // described: descriptor, then value
		d, err := amqpSkip(b[1:])
		if err != nil {
			return 0, err
		}
		v, err := amqpSkip(b[1+d:])
		if err != nil {
			return 0, err
		}
		return 1 + d + v, nil
	}
	var n int
	switch b[0] >> 4 {
	case 0x4:
		n = 1
	case 0x5:
		n = 2
	case 0x6:
		n = 3
	case 0x7:
		n = 5
	case 0x8:
		n = 9
	case 0x9:
		n = 17
	case 0xa, 0xc, 0xe:
		if len(b) < 2 {
			return 0, errAMQPEncoding
		}
		n = 2 + int(b[1])
	case 0xb, 0xd, 0xf:
		if len(b) < 5 {
			return 0, errAMQPEncoding
		}
		n = 5 + int(binary.BigEndian.Uint32(b[1:5]))
	default:
		return 0, errAMQPEncoding
	}
	if n > len(b) {
		return 0, errAMQPEncoding
	}
	return n, nil
}

// field returns element i of fields, nil when the list is shorter.
func field(fields [][]byte, i int) []byte {
	if i < len(fields) {
		return fields[i]
	}
	return nil
}

// amqpUint decodes a uint, ushort or ubyte; ok is false for null, absent
// or another type.
func amqpUint(v []byte) (uint32, bool) {
	if len(v) == 0 {
		return 0, false
	}
	switch v[0] {
	case 0x43: // uint0
		return 0, true
	case 0x52, 0x50: // smalluint, ubyte
		if len(v) >= 2 {
			return uint32(v[1]), true
		}
	case 0x60: // ushort
		if len(v) >= 3 {
			return uint32(binary.BigEndian.Uint16(v[1:3])), true
		}
	case 0x70: // uint
		if len(v) >= 5 {
			return binary.BigEndian.Uint32(v[1:5]), true
		}
	}
	return 0, false
}

// amqpBool decodes a boolean; ok is false for null, absent or another
// type.
func amqpBool(v []byte) (bool, bool) {
	if len(v) == 0 {
		return false, false
	}
	switch v[0] {
	case 0x41:
		return true, true
	case 0x42:
		return false, true
	case 0x56:
		if len(v) >= 2 {
			return v[1] != 0, true
		}
	}
	return false, false
}
