package txn

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/nimbus-go/functions-subscriber/internal/inbox"
)

// Limits of a Cosmos DB transactional batch, checked before sending.
const (
	// MaxOps is the most operations one batch may hold, markers included.
	MaxOps = 100
	// MaxHandlerOps is the most operations a handler may queue (one is
	// left for the marker).
	MaxHandlerOps = MaxOps - 1
	// MaxRequestBytes bounds the batch request body (2 MB).
	MaxRequestBytes = 2 << 20
	// MaxItemBytes bounds one document as Cosmos DB stores it, system
	// properties included (2 MB): the limit of the inbox marker that
	// holds a delivery's published events.
	MaxItemBytes = 2 << 20
	// MaxIDBytes bounds a document id.
	MaxIDBytes = 255
	// MaxPartitionKeyBytes bounds a partition key value: Cosmos DB takes
	// values of at most 2,048 bytes (UTF-8) in a container with large
	// partition keys (hash version 2), the containers this module creates
	// and its Bicep provisions (101 bytes in one created without them).
	MaxPartitionKeyBytes = 2048
)

// systemPropertiesBytes bounds the system properties Cosmos DB adds to a
// stored document (_rid, _self, _etag, _attachments, _ts), counted toward
// its item size.
const systemPropertiesBytes = 512

// markerBytes bounds a marker document without its outbox entries and
// response, as the request carries it: its fixed properties with the
// longest endpoint and MessageId the inbox takes, and the longest
// partition key value with every character escaped.
const markerBytes = 1024 + 6*(inbox.MaxEndpointIDLength+inbox.MaxMessageIDLength+MaxPartitionKeyBytes)

// CheckPartitionKey reports a partition key value Cosmos DB cannot take:
// over MaxPartitionKeyBytes bytes, or not valid UTF-8 (which no JSON
// document can hold, so no document could carry the value). Every other
// string is a value, whatever characters it holds. The error is a
// *LimitError naming LimitPartitionKeyValue, with Index -1; its text
// never holds the value.
func CheckPartitionKey(pk string) error {
	if len(pk) > MaxPartitionKeyBytes {
		return &LimitError{Limit: LimitPartitionKeyValue, Index: -1,
			Detail: fmt.Sprintf("the partition key value has %d bytes, over Cosmos DB's limit of %d bytes", len(pk), MaxPartitionKeyBytes)}
	}
	if !utf8.ValidString(pk) {
		return &LimitError{Limit: LimitPartitionKeyValue, Index: -1, Detail: "the partition key value is not valid UTF-8"}
	}
	return nil
}

// CheckID reports an id Cosmos DB refuses or the SDK's batch encoding
// breaks: empty, over MaxIDBytes bytes, or holding / \ ? # " or a control
// character. The error is a *LimitError with Index -1.
func CheckID(id string) error {
	if id == "" {
		return &LimitError{Limit: LimitID, Index: -1, Detail: "the id is empty"}
	}
	if len(id) > MaxIDBytes {
		return &LimitError{Limit: LimitID, Index: -1, Detail: fmt.Sprintf("the id has %d bytes, over %d", len(id), MaxIDBytes)}
	}
	for _, r := range id {
		switch {
		case r == '/' || r == '\\' || r == '?' || r == '#' || r == '"':
			return &LimitError{Limit: LimitID, Index: -1, Detail: fmt.Sprintf("the id holds %q", r)}
		case r < 0x20 || (r >= 0x7f && r < 0xa0):
			return &LimitError{Limit: LimitID, Index: -1, Detail: "the id holds a control character"}
		}
	}
	return nil
}

// EstimateRequestBytes returns an upper bound of the size of the request
// body the Go SDK (azcosmos v1.5.0) sends for ops: a JSON array of one
// object per operation with its operationType, id, ifMatch and
// resourceBody (the document, or the patch operations). The SDK encodes
// the array with encoding/json, which escapes <, > and & as \u003c (six
// bytes) and U+2028/U+2029 likewise; the estimate counts those.
func EstimateRequestBytes(ops []Op) int {
	n := 2 // [ ]
	for i, op := range ops {
		if i > 0 {
			n++
		}
		n += opBytes(op)
	}
	return n
}

// opOverhead bounds the fixed part of one operation:
// {"operationType":"Replace","ifMatch":"","id":"","resourceBody":}
const opOverhead = 72

func opBytes(op Op) int {
	n := opOverhead + escapedLen([]byte(op.ID))
	if op.IfMatch != "" {
		n += escapedLen([]byte(strconv.Quote(op.IfMatch)))
	}
	n += escapedLen(op.Body)
	if op.Kind == OpPatch {
		n += len(`{"operations":[]}`)
		for _, p := range op.Patch {
			// {"op":"replace","path":"","value":},
			n += 40 + escapedLen([]byte(p.Path)) + escapedLen(p.Value)
		}
	}
	return n
}

// escapedLen is len(b) plus what encoding/json's HTML-safe compaction
// adds: five bytes per <, > or &, three per U+2028 or U+2029.
func escapedLen(b []byte) int {
	n := len(b)
	n += 5 * (bytes.Count(b, []byte("<")) + bytes.Count(b, []byte(">")) + bytes.Count(b, []byte("&")))
	n += 3 * (bytes.Count(b, []byte("\u2028")) + bytes.Count(b, []byte("\u2029")))
	return n
}

// compactObject checks that b is one JSON object and returns it compacted.
func compactObject(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return nil, err
	}
	out := buf.Bytes()
	if len(out) == 0 || out[0] != '{' {
		return nil, fmt.Errorf("not a JSON object")
	}
	return out, nil
}
