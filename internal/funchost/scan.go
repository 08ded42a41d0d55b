package funchost

import (
	"encoding/json"
	"errors"

	"github.com/nimbus-go/functions-subscriber/internal/jsonscan"
)

// sbFields are the Metadata keys the handler reads, in sbRaw order.
var sbFields = [...]string{
	"DeliveryCount", "MessageId", "SessionId", "CorrelationId", "ContentType", "Subject",
	"SequenceNumber", "EnqueuedTimeUtc", "EnqueuedTime", "ApplicationProperties", "UserProperties",
}

const (
	fDeliveryCount = iota
	fMessageID
	fSessionID
	fCorrelationID
	fContentType
	fSubject
	fSequenceNumber
	fEnqueuedTimeUtc
	fEnqueuedTime
	fApplicationProperties
	fUserProperties
)

type dataEntry struct {
	key string
	raw []byte
}

// sbRaw is a scanned Service Bus envelope: raw value spans, as
// json.RawMessage fields and a map[string]json.RawMessage would hold them.
type sbRaw struct {
	data    []dataEntry // nil when Data is absent or null
	hasData bool
	meta    [len(sbFields)][]byte
}

// scanServiceBus scans a whole envelope. It fails where json.Unmarshal into
// {Data map[string]json.RawMessage; Metadata struct{...RawMessage}} fails.
func scanServiceBus(b []byte) (*sbRaw, error) {
	s := jsonscan.New(b)
	env := &sbRaw{}
	switch s.Next() {
	case 'n':
		if err := s.Literal("null"); err != nil {
			return nil, err
		}
	case '{':
		err := s.Object(1, func(ks, ke int, plain bool) error {
			switch {
			case s.KeyIs(ks, ke, plain, "Data"):
				return scanData(s, env)
			case s.KeyIs(ks, ke, plain, "Metadata"):
				return scanMetadata(s, env)
			}
			return s.Skip(1)
		})
		if err != nil {
			return nil, err
		}
	default:
		return nil, jsonscan.ErrSyntax
	}
	if !s.Done() {
		return nil, jsonscan.ErrSyntax
	}
	return env, nil
}

func scanData(s *jsonscan.Scanner, env *sbRaw) error {
	switch s.Next() {
	case 'n':
		env.data, env.hasData = nil, false
		return s.Literal("null")
	case '{':
	default:
		return jsonscan.ErrSyntax
	}
	env.hasData = true
	return s.Object(2, func(ks, ke int, plain bool) error {
		key := s.KeyString(ks, ke, plain)
		raw, err := s.Span(2)
		if err != nil {
			return err
		}
		for i := range env.data {
			if env.data[i].key == key {
				env.data[i].raw = raw
				return nil
			}
		}
		env.data = append(env.data, dataEntry{key: key, raw: raw})
		return nil
	})
}

func scanMetadata(s *jsonscan.Scanner, env *sbRaw) error {
	switch s.Next() {
	case 'n':
		return s.Literal("null")
	case '{':
	default:
		return jsonscan.ErrSyntax
	}
	return s.Object(2, func(ks, ke int, plain bool) error {
		for f, name := range sbFields {
			if s.KeyIs(ks, ke, plain, name) {
				raw, err := s.Span(2)
				env.meta[f] = raw
				return err
			}
		}
		return s.Skip(2)
	})
}

// scanProperties decodes a flat ApplicationProperties object (string,
// number, boolean and null values) the way a json.Decoder with UseNumber
// would. ok is false for anything else; the caller then decodes it with
// encoding/json.
func scanProperties(raw []byte) (map[string]any, bool) {
	s := jsonscan.New(raw)
	if s.Next() != '{' {
		return nil, false
	}
	props := make(map[string]any, 12)
	err := s.Object(1, func(ks, ke int, plain bool) error {
		key := s.KeyString(ks, ke, plain)
		switch c := s.Next(); {
		case c == '"':
			start := s.Pos()
			_, _, _, err := s.Str()
			if err != nil {
				return err
			}
			v, ok := jsonscan.Unquote(s.Bytes(start, s.Pos()))
			if !ok {
				return jsonscan.ErrSyntax
			}
			props[key] = v
		case c == '-' || jsonscan.IsDigit(c):
			start := s.Pos()
			if err := s.Number(); err != nil {
				return err
			}
			props[key] = json.Number(s.Bytes(start, s.Pos()))
		case c == 't':
			props[key] = true
			return s.Literal("true")
		case c == 'f':
			props[key] = false
			return s.Literal("false")
		case c == 'n':
			props[key] = nil
			return s.Literal("null")
		default:
			return errNotFlat
		}
		return nil
	})
	if err != nil || !s.Done() {
		return nil, false
	}
	return props, true
}

var errNotFlat = errors.New("not a flat object")
