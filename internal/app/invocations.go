package app

import (
	"encoding/json"
	"net/http"
	"sync"

	"github.com/nimbus-go/functions-subscriber/internal/devhost"
)

// maxRecentInvocations bounds the invocations recentInvocations keeps.
const maxRecentInvocations = 256

// recentInvocations keeps, in a local run (the Resolver sink in memory),
// the lines the host logs for the latest invocations: a completed one's
// Logs, a failed one's stderr line. GET /_nimbus/invocations?id=ID serves
// them, so that a tool invoking the app shows what the host would log.
// Every line is bounded and payload-free by its writer; the store keeps
// the last maxRecentInvocations invocations. A nil store keeps nothing.
type recentInvocations struct {
	mu    sync.Mutex
	order []string // invocation ids, oldest first
	lines map[string][]string
}

func newRecentInvocations() *recentInvocations {
	return &recentInvocations{lines: map[string][]string{}}
}

// add appends lines to the invocation id's.
func (r *recentInvocations) add(id string, lines ...string) {
	if r == nil || id == "" || len(lines) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.lines[id]; !ok {
		if len(r.order) == maxRecentInvocations {
			delete(r.lines, r.order[0])
			r.order = r.order[1:]
		}
		r.order = append(r.order, id)
	}
	r.lines[id] = append(r.lines[id], lines...)
}

// ServeHTTP answers GET /_nimbus/invocations?id=ID with the invocation's
// lines: none for an invocation the app did not log (not one of the
// latest, or refused before it was read).
func (r *recentInvocations) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	id := req.URL.Query().Get("id")
	r.mu.Lock()
	lines := append([]string{}, r.lines[id]...)
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(devhost.InvocationLines{InvocationID: id, Lines: lines})
}
