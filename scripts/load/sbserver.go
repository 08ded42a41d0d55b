package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// sbServer is a Service Bus namespace reduced to what a sender needs, in
// the load program (-servicebus go): an AMQP 1.0 listener on a loopback
// port that accepts the SDK's connection (SASL ANONYMOUS, as azservicebus
// uses with a development connection string), its sessions and links, the
// claims-based-security token of each link ($cbs answers 202) and the
// $management link pair every sender attaches (any request there answers
// 404, as the Node stand-in does), and accepts every message sent to an
// entity, keeping none. It is the latency injector too, as the in-process
// Cosmos DB server is: the accepted disposition of a message goes out the
// send delay after the message's first frame arrived, so this server's own
// work hides inside the delay. It counts the TCP connections clients open.
//
// Unlike the Node stand-in it delivers nothing: a receiver that attaches
// gets no message. The load run only sends.
type sbServer struct {
	ln    net.Listener
	delay time.Duration
	conns connCounter
	late  exchanges
	// sends counts the transfers accepted on entity links (a batch is one),
	// claims the $cbs tokens answered.
	sends, claims atomic.Int64

	mu     sync.Mutex
	open   map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// sbMaxMessageSize is the max-message-size the server's attach answers a
// sender with (the batch size the SDK fills to), a Premium namespace's 1 MiB.
const sbMaxMessageSize = 1 << 20

// startSBServer listens on a free loopback port.
func startSBServer(delay time.Duration) (*sbServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("service bus stand-in: %w", err)
	}
	s := &sbServer{ln: ln, delay: delay, open: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Port is the port clients connect to.
func (s *sbServer) Port() int { return s.ln.Addr().(*net.TCPAddr).Port }

// Close stops accepting, cuts every connection and waits for them.
func (s *sbServer) Close() {
	_ = s.ln.Close()
	s.mu.Lock()
	s.closed = true
	for c := range s.open {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *sbServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = c.Close()
			return
		}
		s.open[c] = struct{}{}
		s.mu.Unlock()
		s.conns.track(c, http.StateNew)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			sc := &sbConn{s: s, c: c, sessions: map[uint16]*sbSession{}, done: make(chan struct{})}
			_ = sc.serve()
			close(sc.done)
			_ = c.Close()
			s.mu.Lock()
			delete(s.open, c)
			s.mu.Unlock()
			s.conns.track(c, http.StateClosed)
		}()
	}
}

// sbConn is one client connection. Its reader goroutine owns the session
// and link state; frames are written whole under wmu, from the reader and
// from the timers of delayed dispositions.
type sbConn struct {
	s        *sbServer
	c        net.Conn
	wmu      sync.Mutex
	sessions map[uint16]*sbSession // by channel (the server answers on the client's)
	done     chan struct{}
}

// sbSession is a session: the transfer ids of both directions and its
// links by handle (the server's handle of a link is the client's).
type sbSession struct {
	channel        uint16
	nextIncomingID uint32
	nextOutgoingID uint32
	links          map[uint32]*sbLink
}

// sbLink is a link attached by the client.
type sbLink struct {
	handle uint32
	// receiver: the client receives on the link (it is an RPC reply link).
	receiver bool
	// addr is the target address of a sending link, the source address of
	// a receiving one.
	addr          string
	deliveryCount uint32 // of a sending link: the client's count so far
	credit        uint32 // of a sending link: credit left
	// The delivery being received, over frames with more=true.
	partial        []byte
	partialID      uint32
	partialSettled bool
	partialStart   time.Time
	inDelivery     bool
}

const sbCredit = 5000

// rpc reports whether the link carries requests ($cbs, an entity's
// $management).
func (l *sbLink) rpc() bool { return l.addr == "$cbs" || strings.HasSuffix(l.addr, "/$management") }

// write sends the frames in b (whole frames) at once.
func (c *sbConn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.c.Write(b)
	return err
}

// serve runs the connection: protocol headers, SASL, open, then frames
// until close.
func (c *sbConn) serve() error {
	r := bufio.NewReaderSize(c.c, 64<<10)
	hdr := make([]byte, 8)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return err
	}
	if bytes.Equal(hdr, []byte("AMQP\x03\x01\x00\x00")) {
		out := append([]byte(nil), hdr...)
		out = appendFrame(out, frameSASL, 0, saslMechanisms, []any{amqpArray{symbol("ANONYMOUS")}}, nil)
		if err := c.write(out); err != nil {
			return err
		}
		f, err := readFrame(r, 1<<20)
		if err != nil {
			return err
		}
		if f.perf.code() != saslInit {
			return fmt.Errorf("sasl: expected sasl-init, got 0x%x", f.perf.code())
		}
		if err := c.write(appendFrame(nil, frameSASL, 0, saslOutcome, []any{uint8(0)}, nil)); err != nil {
			return err
		}
		if _, err := io.ReadFull(r, hdr); err != nil {
			return err
		}
	}
	if !bytes.Equal(hdr, []byte("AMQP\x00\x01\x00\x00")) {
		return fmt.Errorf("unexpected protocol header %q", hdr)
	}
	if err := c.write(hdr); err != nil {
		return err
	}
	for {
		f, err := readFrame(r, 1<<24)
		if err != nil {
			return err
		}
		if f.perf.desc == nil { // heartbeat
			continue
		}
		stop, err := c.handle(f)
		if err != nil || stop {
			return err
		}
	}
}

// handle answers one frame; stop is true after close.
func (c *sbConn) handle(f frame) (stop bool, err error) {
	switch f.perf.code() {
	case perfOpen:
		if ms, ok := asUint(f.field(4)); ok && ms > 0 {
			go c.heartbeat(time.Duration(ms) * time.Millisecond / 2)
		}
		return false, c.write(appendFrame(nil, frameAMQP, 0, perfOpen,
			[]any{"load-servicebus", nil, uint32(1 << 20), uint16(4095)}, nil))
	case perfBegin:
		next, _ := asUint(f.field(1))
		c.sessions[f.channel] = &sbSession{channel: f.channel, nextIncomingID: uint32(next), links: map[uint32]*sbLink{}}
		return false, c.write(appendFrame(nil, frameAMQP, f.channel, perfBegin,
			[]any{f.channel, uint32(0), uint32(1 << 31), uint32(1 << 31), uint32(1<<32 - 1)}, nil))
	case perfAttach:
		return false, c.attach(f)
	case perfTransfer:
		return false, c.transfer(f)
	case perfDetach:
		if s := c.sessions[f.channel]; s != nil {
			h, _ := asUint(f.field(0))
			delete(s.links, uint32(h))
			return false, c.write(appendFrame(nil, frameAMQP, f.channel, perfDetach, []any{uint32(h), f.field(1)}, nil))
		}
	case perfEnd:
		delete(c.sessions, f.channel)
		return false, c.write(appendFrame(nil, frameAMQP, f.channel, perfEnd, []any{}, nil))
	case perfClose:
		return true, c.write(appendFrame(nil, frameAMQP, 0, perfClose, []any{}, nil))
	case perfFlow, perfDisposition:
		// The client's credit for replies and its settlements need no
		// answer: replies are few and sent settled.
	}
	return false, nil
}

// heartbeat writes an empty frame every interval until the connection
// ends, so the client's idle timeout never fires.
func (c *sbConn) heartbeat(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
			if c.write([]byte{0, 0, 0, 8, 2, 0, 0, 0}) != nil {
				return
			}
		}
	}
}

// attach answers an attach with the mirror link (the termini echoed) and
// gives a sending client its credit.
func (c *sbConn) attach(f frame) error {
	s := c.sessions[f.channel]
	if s == nil {
		return fmt.Errorf("attach on channel %d, which has no session", f.channel)
	}
	name, _ := f.field(0).(string)
	h, _ := asUint(f.field(1))
	clientReceives, _ := f.field(2).(bool)
	l := &sbLink{handle: uint32(h), receiver: clientReceives}
	var initial any
	var maxSize any
	if clientReceives {
		l.addr = address(f.field(5))
		initial = uint32(0)
	} else {
		l.addr = address(f.field(6))
		n, _ := asUint(f.field(9))
		l.deliveryCount, l.credit = uint32(n), sbCredit
		maxSize = uint64(sbMaxMessageSize)
	}
	s.links[l.handle] = l
	out := appendFrame(nil, frameAMQP, f.channel, perfAttach, []any{
		name, l.handle, !clientReceives, f.field(3), f.field(4), f.field(5), f.field(6), nil, false, initial, maxSize,
	}, nil)
	if !clientReceives {
		out = c.appendFlow(out, s, l)
	}
	return c.write(out)
}

// appendFlow appends a flow frame that sets the sending link's credit.
func (c *sbConn) appendFlow(b []byte, s *sbSession, l *sbLink) []byte {
	return appendFrame(b, frameAMQP, s.channel, perfFlow, []any{
		s.nextIncomingID, uint32(1 << 31), s.nextOutgoingID, uint32(1 << 31), l.handle, l.deliveryCount, l.credit,
	}, nil)
}

// transfer takes one frame of a delivery; on its last it accepts the
// message: an RPC request at once, with its reply, a message to an entity
// the send delay after its first frame arrived.
func (c *sbConn) transfer(f frame) error {
	now := time.Now()
	s := c.sessions[f.channel]
	if s == nil {
		return fmt.Errorf("transfer on channel %d, which has no session", f.channel)
	}
	s.nextIncomingID++
	h, _ := asUint(f.field(0))
	l := s.links[uint32(h)]
	if l == nil || l.receiver {
		return fmt.Errorf("transfer on handle %d, which is not a sending link", h)
	}
	if !l.inDelivery {
		id, _ := asUint(f.field(1))
		settled, _ := f.field(4).(bool)
		l.inDelivery, l.partialID, l.partialSettled, l.partialStart, l.partial = true, uint32(id), settled, now, l.partial[:0]
	}
	if l.rpc() {
		l.partial = append(l.partial, f.payload...)
	}
	if more, _ := f.field(5).(bool); more {
		return nil
	}
	l.inDelivery = false
	if aborted, _ := f.field(9).(bool); aborted {
		return nil
	}
	l.deliveryCount++
	l.credit--
	var out []byte
	if l.credit < sbCredit/2 {
		l.credit = sbCredit
		out = c.appendFlow(out, s, l)
	}
	id, settled := l.partialID, l.partialSettled
	if l.rpc() {
		reply, err := c.rpcReply(s, l, l.partial)
		if err != nil {
			return err
		}
		out = append(out, reply...)
		if !settled {
			out = appendDisposition(out, s.channel, id)
		}
		return c.write(out)
	}
	c.s.sends.Add(1)
	if len(out) > 0 {
		if err := c.write(out); err != nil {
			return err
		}
	}
	if settled {
		return nil
	}
	arrived := l.partialStart
	due := arrived.Add(c.s.delay)
	channel := s.channel
	send := func() {
		now := time.Now()
		c.s.late.add(arrived, now, now.Sub(due), 0)
		_ = c.write(appendDisposition(nil, channel, id))
	}
	if d := time.Until(due); d > 0 {
		time.AfterFunc(d, send)
	} else {
		send()
	}
	return nil
}

// appendDisposition appends the settled, accepted disposition of the
// delivery id.
func appendDisposition(b []byte, channel uint16, id uint32) []byte {
	return appendFrame(b, frameAMQP, channel, perfDisposition, []any{true, id, nil, true, described{uint64(stateAccepted), []any{}}}, nil)
}

// rpcReply is the transfer that answers a request on an RPC link ($cbs:
// 202, a token is accepted; $management: 404, no operation is served) on
// the session's receiving link of the same address, correlated with the
// request's message-id.
func (c *sbConn) rpcReply(s *sbSession, req *sbLink, msg []byte) ([]byte, error) {
	sections, err := messageSections(msg)
	if err != nil {
		return nil, err
	}
	props, _ := sections[sectionProperties].([]any)
	var messageID any
	if len(props) > 0 {
		messageID = props[0]
	}
	status, desc := int32(404), "the load run's Service Bus stand-in serves no management operation"
	if req.addr == "$cbs" {
		status, desc = 202, "Accepted"
		c.s.claims.Add(1)
	}
	var reply *sbLink
	for _, l := range s.links {
		if l.receiver && l.addr == req.addr {
			reply = l
		}
	}
	if reply == nil {
		return nil, fmt.Errorf("an RPC request on %s without a link to answer on", req.addr)
	}
	var payload []byte
	payload = encode(payload, described{uint64(sectionProperties), []any{nil, nil, nil, nil, nil, messageID}})
	payload = encode(payload, described{uint64(sectionAppProps), amqpMap{"status-code", status, "status-description", desc}})
	payload = encode(payload, described{uint64(sectionAMQPValue), nil})
	id := s.nextOutgoingID
	s.nextOutgoingID++
	tag := binary.BigEndian.AppendUint32(nil, id)
	return appendFrame(nil, frameAMQP, s.channel, perfTransfer, []any{reply.handle, id, tag, uint32(0), true}, payload), nil
}
