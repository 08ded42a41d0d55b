package app

import (
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/nimbus-go/functions-subscriber/internal/devhost"
)

// The store keeps the latest maxRecentInvocations invocations: the oldest
// is forgotten first, and a nil store keeps nothing.
func TestRecentInvocationsAreBounded(t *testing.T) {
	var none *recentInvocations
	none.add("x", "line")
	r := newRecentInvocations()
	for i := range maxRecentInvocations + 1 {
		r.add("inv-"+strconv.Itoa(i), "line "+strconv.Itoa(i))
	}
	r.add("inv-1", "more")
	get := func(id string) []string {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest("GET", devhost.InvocationsPath+"?id="+id, nil))
		var l devhost.InvocationLines
		if err := json.Unmarshal(rec.Body.Bytes(), &l); err != nil || rec.Code != 200 || l.InvocationID != id {
			t.Fatalf("GET %s: %d %s (%v)", id, rec.Code, rec.Body, err)
		}
		return l.Lines
	}
	if l := get("inv-0"); len(l) != 0 {
		t.Errorf("the oldest invocation is still kept: %q", l)
	}
	if l := get("inv-1"); len(l) != 2 || l[1] != "more" {
		t.Errorf("inv-1: %q", l)
	}
	if l := get("inv-" + strconv.Itoa(maxRecentInvocations)); len(l) != 1 {
		t.Errorf("the newest: %q", l)
	}
	if len(r.order) != maxRecentInvocations || len(r.lines) != maxRecentInvocations {
		t.Errorf("%d ids in order, %d kept", len(r.order), len(r.lines))
	}
}
