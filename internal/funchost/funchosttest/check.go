// Package funchosttest reads the envelopes captured from the Azure
// Functions host (internal/funchost/testdata/host) for tests: a fixture, the
// order of its Metadata keys, a Metadata string value. Package hostwire
// builds envelopes that match them byte for byte.
package funchosttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// HostFixture returns the envelope name (e.g. "sb_session_binary.json")
// from the envelopes captured from the Functions host in
// internal/funchost/testdata/host, without surrounding white space. The
// file is found from the working directory upward (a test runs in its
// package's directory); a missing file fails tb.
func HostFixture(tb testing.TB, name string) []byte {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("funchosttest: no go.mod above the working directory")
		}
		dir = parent
	}
	b, err := os.ReadFile(filepath.Join(dir, "internal", "funchost", "testdata", "host", name))
	if err != nil {
		tb.Fatal(err)
	}
	return bytes.TrimSpace(b)
}

// MetadataKeys returns the keys of an envelope's Metadata in wire order
// (the host writes them in a fixed order that fixtures pin). An envelope
// that is not JSON fails tb.
func MetadataKeys(tb testing.TB, envelope []byte) []string {
	tb.Helper()
	keys, err := metadataKeys(envelope)
	if err != nil {
		tb.Fatalf("%v\n%s", err, envelope)
	}
	return keys
}

func metadataKeys(envelope []byte) ([]string, error) {
	var top struct{ Metadata json.RawMessage }
	if err := json.Unmarshal(envelope, &top); err != nil {
		return nil, fmt.Errorf("envelope is not JSON: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(top.Metadata))
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	var keys []string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, err
		}
		keys = append(keys, k.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// DecodeTwice reads a host Metadata string value: a JSON string holding a
// JSON text that is itself a string. Any other value fails tb.
func DecodeTwice(tb testing.TB, raw json.RawMessage) string {
	tb.Helper()
	var inner, s string
	if err := json.Unmarshal(raw, &inner); err != nil {
		tb.Fatalf("%s: %v", raw, err)
	}
	if err := json.Unmarshal([]byte(inner), &s); err != nil {
		tb.Fatalf("%s: inner %q: %v", raw, inner, err)
	}
	return s
}
