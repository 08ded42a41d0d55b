package funchost

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rs/zerolog"
)

// A 2xx answer carries the invocation's Logs, bounded in number and length
// and valid JSON whatever the entries hold; any other answer carries none
// (the host would ignore them).
func TestLogsAreReturnedBoundedOnlyOn2xx(t *testing.T) {
	s := NewServer(zerolog.Nop(), Options{})
	fail := false
	s.Handle("F", func(ctx context.Context, inv *Invocation) error {
		inv.Log(`first "quoted" line` + "\n\x00\u2028é")
		inv.Log(strings.Repeat("y", 10*MaxLogUnits))
		inv.Log(string([]byte{0xff, 'a'}))
		for i := range 20 {
			inv.Log("entry " + strconv.Itoa(i))
		}
		if fail {
			return errors.New("transient")
		}
		return nil
	})
	post := func() (int, string) {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/F", strings.NewReader(`{}`)))
		return rec.Code, rec.Body.String()
	}
	code, body := post()
	var resp struct {
		Outputs     map[string]any
		Logs        []string
		ReturnValue any
	}
	if err := json.Unmarshal([]byte(body), &resp); code != 200 || err != nil || resp.Outputs == nil || resp.ReturnValue != nil {
		t.Fatalf("%d %s (%v)", code, body, err)
	}
	if len(resp.Logs) != MaxLogs || resp.Logs[0] != `first "quoted" line`+"\n\x00\u2028é" ||
		!strings.Contains(resp.Logs[1], "[truncated: ") || !utf8.ValidString(resp.Logs[2]) ||
		resp.Logs[MaxLogs-1] != "16 more log entries of this invocation were dropped; see the handler's stdout" {
		t.Fatalf("Logs %q", resp.Logs)
	}
	for _, l := range resp.Logs {
		if len([]rune(l)) > MaxLogUnits+64 {
			t.Fatalf("an entry of %d characters", len([]rune(l)))
		}
	}
	fail = true
	if code, body := post(); code != 503 || body != ResponseBody {
		t.Fatalf("failed answer %d %s", code, body)
	}
}
