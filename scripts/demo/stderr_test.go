package main

import (
	"strings"
	"testing"
	"time"
)

// The log joins partial writes into lines, waits for a marked line written
// later, and gives up after its wait, returning what there is.
func TestLineLogTakesWholeLinesAndWaitsForTheMark(t *testing.T) {
	l := newLineLog()
	_, _ = l.Write([]byte("start-up\nerror: a"))
	go func() {
		time.Sleep(50 * time.Millisecond) // the line arrives after take started waiting
		_, _ = l.Write([]byte("nswered invocationId=7\n"))
	}()
	got, found := l.take("invocationId=7", 5*time.Second)
	if !found || strings.Join(got, "|") != "start-up|error: answered invocationId=7" {
		t.Fatalf("take = %q, %v", got, found)
	}
	if got, found := l.take("", time.Second); !found || len(got) != 0 {
		t.Fatalf("a second take = %q, %v, want nothing new", got, found)
	}
	_, _ = l.Write([]byte("other\n"))
	got, found = l.take("invocationId=8", 20*time.Millisecond)
	if found || strings.Join(got, "|") != "other" {
		t.Fatalf("take without the mark = %q, %v, want the lines there are and false", got, found)
	}
}
