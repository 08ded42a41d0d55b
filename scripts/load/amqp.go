package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"time"
)

// The AMQP 1.0 type system and framing, as much as the load run's Service
// Bus stand-in (sbserver.go) and the frame reader of the delay line need:
// every primitive type is decoded, and the encoder writes the types the
// stand-in answers with. go-amqp, which the SDK uses, is a client only.

// symbol is an AMQP symbol.
type symbol string

// amqpMap is an AMQP map, its keys and values in order: k0, v0, k1, v1, ….
type amqpMap []any

// described is a described value: a descriptor (a ulong code or a symbol)
// and the value it describes.
type described struct {
	desc any
	val  any
}

// code is the descriptor as a ulong, or ^0 when it is not one.
func (d described) code() uint64 {
	if c, ok := d.desc.(uint64); ok {
		return c
	}
	return math.MaxUint64
}

// fields is the described value as a list (a performative's fields).
func (d described) fields() []any {
	l, _ := d.val.([]any)
	return l
}

// amqpChar is an AMQP char (a UTF-32 code point).
type amqpChar uint32

// amqpArray is an AMQP array: every element of one type.
type amqpArray []any

// decoder reads AMQP values from b.
type decoder struct {
	b []byte
}

var errShort = errors.New("amqp: value runs past the end of its frame")

func (d *decoder) need(n int) ([]byte, error) {
	if n < 0 || len(d.b) < n {
		return nil, errShort
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v, nil
}

// value reads one value.
func (d *decoder) value() (any, error) {
	c, err := d.need(1)
	if err != nil {
		return nil, err
	}
	if c[0] == 0x00 {
		desc, err := d.value()
		if err != nil {
			return nil, err
		}
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		return described{desc, v}, nil
	}
	return d.typed(c[0])
}

// typed reads the value of constructor code c.
func (d *decoder) typed(c byte) (any, error) {
	fixed := func(n int) ([]byte, error) { return d.need(n) }
	variable := func(wide bool) ([]byte, error) {
		if wide {
			b, err := d.need(4)
			if err != nil {
				return nil, err
			}
			return d.need(int(binary.BigEndian.Uint32(b)))
		}
		b, err := d.need(1)
		if err != nil {
			return nil, err
		}
		return d.need(int(b[0]))
	}
	switch c {
	case 0x40:
		return nil, nil
	case 0x41:
		return true, nil
	case 0x42:
		return false, nil
	case 0x56:
		b, err := fixed(1)
		if err != nil {
			return nil, err
		}
		return b[0] != 0, nil
	case 0x50:
		b, err := fixed(1)
		if err != nil {
			return nil, err
		}
		return b[0], nil
	case 0x51:
		b, err := fixed(1)
		if err != nil {
			return nil, err
		}
		return int8(b[0]), nil
	case 0x60:
		b, err := fixed(2)
		if err != nil {
			return nil, err
		}
		return binary.BigEndian.Uint16(b), nil
	case 0x61:
		b, err := fixed(2)
		if err != nil {
			return nil, err
		}
		return int16(binary.BigEndian.Uint16(b)), nil
	case 0x43:
		return uint32(0), nil
	case 0x52:
		b, err := fixed(1)
		if err != nil {
			return nil, err
		}
		return uint32(b[0]), nil
	case 0x70:
		b, err := fixed(4)
		if err != nil {
			return nil, err
		}
		return binary.BigEndian.Uint32(b), nil
	case 0x54:
		b, err := fixed(1)
		if err != nil {
			return nil, err
		}
		return int32(int8(b[0])), nil
	case 0x71:
		b, err := fixed(4)
		if err != nil {
			return nil, err
		}
		return int32(binary.BigEndian.Uint32(b)), nil
	case 0x72:
		b, err := fixed(4)
		if err != nil {
			return nil, err
		}
		return math.Float32frombits(binary.BigEndian.Uint32(b)), nil
	case 0x73:
		b, err := fixed(4)
		if err != nil {
			return nil, err
		}
		return amqpChar(binary.BigEndian.Uint32(b)), nil
	case 0x44:
		return uint64(0), nil
	case 0x53:
		b, err := fixed(1)
		if err != nil {
			return nil, err
		}
		return uint64(b[0]), nil
	case 0x80:
		b, err := fixed(8)
		if err != nil {
			return nil, err
		}
		return binary.BigEndian.Uint64(b), nil
	case 0x55:
		b, err := fixed(1)
		if err != nil {
			return nil, err
		}
		return int64(int8(b[0])), nil
	case 0x81:
		b, err := fixed(8)
		if err != nil {
			return nil, err
		}
		return int64(binary.BigEndian.Uint64(b)), nil
	case 0x82:
		b, err := fixed(8)
		if err != nil {
			return nil, err
		}
		return math.Float64frombits(binary.BigEndian.Uint64(b)), nil
	case 0x83:
		b, err := fixed(8)
		if err != nil {
			return nil, err
		}
		return time.UnixMilli(int64(binary.BigEndian.Uint64(b))).UTC(), nil
	case 0x74, 0x84, 0x94: // decimal32, 64, 128: kept as bytes
		n := map[byte]int{0x74: 4, 0x84: 8, 0x94: 16}[c]
		return fixed(n)
	case 0x98:
		b, err := fixed(16)
		if err != nil {
			return nil, err
		}
		var u [16]byte
		copy(u[:], b)
		return u, nil
	case 0xa0, 0xb0:
		b, err := variable(c == 0xb0)
		if err != nil {
			return nil, err
		}
		return append([]byte(nil), b...), nil
	case 0xa1, 0xb1:
		b, err := variable(c == 0xb1)
		return string(b), err
	case 0xa3, 0xb3:
		b, err := variable(c == 0xb3)
		return symbol(b), err
	case 0x45:
		return []any{}, nil
	case 0xc0, 0xd0, 0xc1, 0xd1:
		wide := c == 0xd0 || c == 0xd1
		body, count, err := d.compound(wide)
		if err != nil {
			return nil, err
		}
		inner := decoder{body}
		items := make([]any, 0, count)
		for range count {
			v, err := inner.value()
			if err != nil {
				return nil, err
			}
			items = append(items, v)
		}
		if c == 0xc1 || c == 0xd1 {
			return amqpMap(items), nil
		}
		return items, nil
	case 0xe0, 0xf0:
		body, count, err := d.compound(c == 0xf0)
		if err != nil {
			return nil, err
		}
		inner := decoder{body}
		ctor, err := inner.need(1)
		if err != nil {
			return nil, err
		}
		var desc any
		if ctor[0] == 0x00 {
			if desc, err = inner.value(); err != nil {
				return nil, err
			}
			if ctor, err = inner.need(1); err != nil {
				return nil, err
			}
		}
		items := make(amqpArray, 0, count)
		for range count {
			v, err := inner.typed(ctor[0])
			if err != nil {
				return nil, err
			}
			if desc != nil {
				v = described{desc, v}
			}
			items = append(items, v)
		}
		return items, nil
	}
	return nil, fmt.Errorf("amqp: unknown constructor 0x%02x", c)
}

// compound reads the size and count of a list, map or array and returns
// its body.
func (d *decoder) compound(wide bool) ([]byte, int, error) {
	if wide {
		h, err := d.need(8)
		if err != nil {
			return nil, 0, err
		}
		size, count := binary.BigEndian.Uint32(h[:4]), binary.BigEndian.Uint32(h[4:])
		if size < 4 {
			return nil, 0, errShort
		}
		body, err := d.need(int(size) - 4)
		return body, int(count), err
	}
	h, err := d.need(2)
	if err != nil {
		return nil, 0, err
	}
	if h[0] < 1 {
		return nil, 0, errShort
	}
	body, err := d.need(int(h[0]) - 1)
	return body, int(h[1]), err
}

// encode appends v to b. It writes nil, bool, the integer types, string,
// symbol, []byte, time.Time, [16]byte (uuid), []any (list), amqpMap,
// amqpArray of symbols and described values; decoded values encode back
// to the same types.
func encode(b []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return append(b, 0x40)
	case bool:
		if v {
			return append(b, 0x41)
		}
		return append(b, 0x42)
	case uint8:
		return append(b, 0x50, v)
	case int8:
		return append(b, 0x51, byte(v))
	case uint16:
		return binary.BigEndian.AppendUint16(append(b, 0x60), v)
	case int16:
		return binary.BigEndian.AppendUint16(append(b, 0x61), uint16(v))
	case uint32:
		switch {
		case v == 0:
			return append(b, 0x43)
		case v < 256:
			return append(b, 0x52, byte(v))
		}
		return binary.BigEndian.AppendUint32(append(b, 0x70), v)
	case int32:
		if v >= -128 && v <= 127 {
			return append(b, 0x54, byte(int8(v)))
		}
		return binary.BigEndian.AppendUint32(append(b, 0x71), uint32(v))
	case uint64:
		switch {
		case v == 0:
			return append(b, 0x44)
		case v < 256:
			return append(b, 0x53, byte(v))
		}
		return binary.BigEndian.AppendUint64(append(b, 0x80), v)
	case int64:
		if v >= -128 && v <= 127 {
			return append(b, 0x55, byte(int8(v)))
		}
		return binary.BigEndian.AppendUint64(append(b, 0x81), uint64(v))
	case float32:
		return binary.BigEndian.AppendUint32(append(b, 0x72), math.Float32bits(v))
	case float64:
		return binary.BigEndian.AppendUint64(append(b, 0x82), math.Float64bits(v))
	case amqpChar:
		return binary.BigEndian.AppendUint32(append(b, 0x73), uint32(v))
	case time.Time:
		return binary.BigEndian.AppendUint64(append(b, 0x83), uint64(v.UnixMilli()))
	case [16]byte:
		return append(append(b, 0x98), v[:]...)
	case []byte:
		return appendVariable(b, 0xa0, 0xb0, v)
	case string:
		return appendVariable(b, 0xa1, 0xb1, []byte(v))
	case symbol:
		return appendVariable(b, 0xa3, 0xb3, []byte(v))
	case []any:
		if len(v) == 0 {
			return append(b, 0x45)
		}
		return appendCompound(b, 0xd0, v)
	case amqpMap:
		return appendCompound(b, 0xd1, v)
	case amqpArray:
		// Only arrays of symbols are written (capabilities, mechanisms).
		body := []byte{0xb3}
		for _, e := range v {
			s, _ := e.(symbol)
			body = binary.BigEndian.AppendUint32(body, uint32(len(s)))
			body = append(body, s...)
		}
		b = append(b, 0xf0)
		b = binary.BigEndian.AppendUint32(b, uint32(len(body)+4))
		b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
		return append(b, body...)
	case described:
		return encode(encode(append(b, 0x00), v.desc), v.val)
	}
	panic(fmt.Sprintf("amqp: cannot encode %T", v))
}

func appendVariable(b []byte, short, wide byte, v []byte) []byte {
	if len(v) < 256 {
		b = append(b, short, byte(len(v)))
	} else {
		b = binary.BigEndian.AppendUint32(append(b, wide), uint32(len(v)))
	}
	return append(b, v...)
}

func appendCompound(b []byte, code byte, items []any) []byte {
	var body []byte
	for _, it := range items {
		body = encode(body, it)
	}
	b = append(b, code)
	b = binary.BigEndian.AppendUint32(b, uint32(len(body)+4))
	b = binary.BigEndian.AppendUint32(b, uint32(len(items)))
	return append(b, body...)
}

// Frame types and the descriptors of the performatives, SASL frames,
// delivery states, termini and message sections used here.
const (
	frameAMQP = 0x00
	frameSASL = 0x01

	perfOpen        = 0x10
	perfBegin       = 0x11
	perfAttach      = 0x12
	perfFlow        = 0x13
	perfTransfer    = 0x14
	perfDisposition = 0x15
	perfDetach      = 0x16
	perfEnd         = 0x17
	perfClose       = 0x18

	saslMechanisms = 0x40
	saslInit       = 0x41
	saslOutcome    = 0x44

	stateAccepted = 0x24

	sectionProperties   = 0x73
	sectionAppProps     = 0x74
	sectionAMQPValue    = 0x77
	sectionHeader       = 0x70
	sectionMessageAnnot = 0x72
)

// frame is one AMQP frame: its type, channel, performative and, for a
// transfer, the payload after it.
type frame struct {
	typ     byte
	channel uint16
	perf    described
	payload []byte
}

// field is the i-th field of the frame's performative, nil when absent.
func (f frame) field(i int) any {
	fs := f.perf.fields()
	if i < len(fs) {
		return fs[i]
	}
	return nil
}

// readFrame reads one frame from r (an empty frame, a heartbeat, comes
// back with a zero performative).
func readFrame(r io.Reader, max uint32) (frame, error) {
	var h [8]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return frame{}, err
	}
	size := binary.BigEndian.Uint32(h[:4])
	doff := uint32(h[4]) * 4
	if size < 8 || doff < 8 || doff > size || size > max {
		return frame{}, fmt.Errorf("amqp: bad frame header (size %d, data offset %d)", size, doff)
	}
	body := make([]byte, size-8)
	if _, err := io.ReadFull(r, body); err != nil {
		return frame{}, err
	}
	f := frame{typ: h[5], channel: binary.BigEndian.Uint16(h[6:8])}
	body = body[doff-8:]
	if len(body) == 0 {
		return f, nil
	}
	d := decoder{body}
	v, err := d.value()
	if err != nil {
		return f, err
	}
	p, ok := v.(described)
	if !ok {
		return f, fmt.Errorf("amqp: a frame body that is not a performative (%T)", v)
	}
	f.perf, f.payload = p, d.b
	return f, nil
}

// appendFrame appends the frame of performative code with fields (and
// payload) to b.
func appendFrame(b []byte, typ byte, channel uint16, code uint64, fields []any, payload []byte) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0, 2, typ, byte(channel>>8), byte(channel))
	b = encode(b, described{code, fields})
	b = append(b, payload...)
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start))
	return b
}

// asUint is an unsigned integer field as a uint64 (false when it is not
// one, or absent).
func asUint(v any) (uint64, bool) {
	switch n := v.(type) {
	case uint8:
		return uint64(n), true
	case uint16:
		return uint64(n), true
	case uint32:
		return uint64(n), true
	case uint64:
		return n, true
	}
	return 0, false
}

// address is the address of a source or target terminus.
func address(terminus any) string {
	t, ok := terminus.(described)
	if !ok {
		return ""
	}
	fs := t.fields()
	if len(fs) == 0 {
		return ""
	}
	s, _ := fs[0].(string)
	return s
}

// messageSections splits an encoded message into its sections by
// descriptor code.
func messageSections(b []byte) (map[uint64]any, error) {
	out := map[uint64]any{}
	d := decoder{b}
	for len(d.b) > 0 {
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		s, ok := v.(described)
		if !ok {
			return nil, fmt.Errorf("amqp: a message section that is not described (%T)", v)
		}
		out[s.code()] = s.val
	}
	return out, nil
}
