package app

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"

	"github.com/nimbus-go/functions-subscriber/internal/devhost"
	"github.com/nimbus-go/functions-subscriber/internal/message"
)

// errRefused is the in-memory sink's refusal of a send (POST
// /_nimbus/resolver/refuse), as a broker's refusal would fail it.
var errRefused = errors.New("the in-memory sink refused the send (a refusal asked for on /_nimbus/resolver/refuse)")

// sinkRefusals makes the in-memory sink refuse the next sends holding a
// message of one type, for local runs that show what follows a failed
// send: the sink calls fail for each message of a send before keeping
// any, and a refusal of one refuses the send whole.
type sinkRefusals struct {
	mu          sync.Mutex
	messageType string
	left        int
	// next is the sink's own Fail (set by a test), consulted first.
	next func(*message.Outgoing) error
}

func (r *sinkRefusals) fail(m *message.Outgoing) error {
	if r.next != nil {
		if err := r.next(m); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.left == 0 || (r.messageType != "" && m.Type() != r.messageType) {
		return nil
	}
	r.left--
	return errRefused
}

// ServeHTTP sets the refusal a devhost.Refusal in the body describes.
func (r *sinkRefusals) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var rf devhost.Refusal
	if err := json.NewDecoder(io.LimitReader(req.Body, 1<<12)).Decode(&rf); err != nil || rf.Count < 0 {
		http.Error(w, "want {\"messageType\":…,\"count\":n} with n ≥ 0", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.messageType, r.left = rf.MessageType, rf.Count
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}
