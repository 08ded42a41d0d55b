package testlog

import (
	"fmt"
	"sync"
	"testing"
)

func TestConcurrentLinesAllDecode(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fmt.Fprintf(&b, "{\"n\":%d,\"outcome\":\"completed\"}\n", i)
		}()
	}
	wg.Wait()
	if got := len(b.Lines(t)); got != 50 {
		t.Fatalf("%d lines, want 50", got)
	}
	type line struct {
		N int `json:"n"`
	}
	even := Decode(&b, func(l line) bool { return l.N%2 == 0 })
	if len(even) != 25 {
		t.Fatalf("%d even lines, want 25", len(even))
	}
	b.Reset()
	if b.String() != "" || len(b.Lines(t)) != 0 {
		t.Fatal("Reset kept lines")
	}
}

func TestDecodeSkipsLinesThatAreNotJSON(t *testing.T) {
	var b Buffer
	fmt.Fprint(&b, "not json\n{\"n\":1}\n")
	type line struct {
		N int `json:"n"`
	}
	if got := Decode(&b, func(line) bool { return true }); len(got) != 1 || got[0].N != 1 {
		t.Fatalf("decoded %v", got)
	}
}
