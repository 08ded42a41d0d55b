// Package testlog collects the JSON log lines an app writes while a test
// runs, from many goroutines at once.
package testlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
)

// Buffer is a bytes.Buffer safe for concurrent writes and reads.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Reset forgets what was written.
func (b *Buffer) Reset() {
	b.mu.Lock()
	b.b.Reset()
	b.mu.Unlock()
}

// Lines decodes every line written so far as a JSON object; a line that
// is not one fails tb.
func (b *Buffer) Lines(tb testing.TB) []map[string]any {
	tb.Helper()
	return ParseLines(tb, b.String())
}

// ParseLines decodes each line of out as a JSON object; a line that is not
// one fails tb.
func ParseLines(tb testing.TB, out string) []map[string]any {
	tb.Helper()
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			tb.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	return lines
}

// Since returns what was written after the first offset bytes, and the
// offset of its end: a reader that passes back the offset it got reads
// each line once.
func (b *Buffer) Since(offset int) (string, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.b.Bytes()[min(offset, b.b.Len()):]), b.b.Len()
}

// Decode decodes each line written so far into a T, skipping lines that
// do not decode or that keep does not want.
func Decode[T any](b *Buffer, keep func(T) bool) []T {
	return DecodeText(b.String(), keep)
}

// DecodeText decodes each line of text into a T, skipping lines that do
// not decode or that keep does not want. A line may be up to 16 MiB.
func DecodeText[T any](text string, keep func(T) bool) []T {
	var out []T
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err == nil && keep(v) {
			out = append(out, v)
		}
	}
	return out
}
