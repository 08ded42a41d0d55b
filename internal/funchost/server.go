package funchost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/rs/zerolog"
)

// Invocation is one request from the host.
type Invocation struct {
	// Function is the function (folder) name from the URL path.
	Function string
	// InvocationID is the host's X-Azure-Functions-InvocationId header.
	InvocationID string
	// Body is the raw envelope.
	Body []byte
}

// Func handles one invocation. A nil error completes the trigger; an error
// fails it. The status code is StatusOf(err).
type Func func(ctx context.Context, inv *Invocation) error

// StatusOf maps a Func result to the HTTP status the host sees: 200 for
// nil, 400 for a malformed envelope, 503 for everything else (a transient
// failure: the broker redelivers).
func StatusOf(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, ErrMalformed):
		return http.StatusBadRequest
	default:
		var s interface{ HTTPStatus() int }
		if errors.As(err, &s) {
			return s.HTTPStatus()
		}
		return http.StatusServiceUnavailable
	}
}

// ResponseBody is the answer to every invocation: the host requires a JSON
// body with Content-Type application/json even when nothing is returned.
const ResponseBody = `{"Outputs":{},"Logs":[],"ReturnValue":null}`

var (
	responseBody   = []byte(ResponseBody)
	responseLength = strconv.Itoa(len(ResponseBody))
)

// DefaultMaxBody bounds an envelope: a 100 MB Premium message, base64
// encoded, plus metadata.
const DefaultMaxBody = 140 << 20

// Server routes host requests to functions. The zero value is not usable;
// use NewServer.
type Server struct {
	log     zerolog.Logger
	maxBody int64
	funcs   map[string]Func // lower-cased name
	names   []string
	extra   map[string]http.Handler
}

// NewServer returns a server that logs protocol problems to log.
func NewServer(log zerolog.Logger) *Server {
	return &Server{log: log, maxBody: DefaultMaxBody, funcs: map[string]Func{}, extra: map[string]http.Handler{}}
}

// Handle registers f for the function name (matched case-insensitively, as
// the host treats function names). It panics on a duplicate name.
func (s *Server) Handle(name string, f Func) {
	key := strings.ToLower(name)
	if _, dup := s.funcs[key]; dup {
		panic("funchost: function " + name + " registered twice")
	}
	s.funcs[key] = f
	s.names = append(s.names, name)
}

// HandleGet registers an extra GET route (for example /_nimbus/metrics).
// Paths must start with "/_" so they can never collide with a function
// name, which the host requires to start with a letter.
func (s *Server) HandleGet(path string, h http.Handler) {
	if !strings.HasPrefix(path, "/_") {
		panic("funchost: extra routes must start with /_")
	}
	s.extra[path] = h
}

// Functions returns the registered function names in registration order.
func (s *Server) Functions() []string { return append([]string(nil), s.names...) }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if path == "/" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"status":"ready"}`))
		return
	}
	if h, ok := s.extra[path]; ok && r.Method == http.MethodGet {
		h.ServeHTTP(w, r)
		return
	}
	name := strings.TrimPrefix(path, "/")
	f, ok := s.funcs[strings.ToLower(name)]
	if !ok {
		s.log.Warn().Str("function", truncate(name, 128)).Msg("invocation for an unknown function")
		writeResult(w, http.StatusNotFound)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeResult(w, http.StatusMethodNotAllowed)
		return
	}
	body, err := s.readBody(r)
	if err != nil {
		s.log.Error().Str("function", name).Str("invocationId", r.Header.Get("X-Azure-Functions-InvocationId")).
			Str("error", err.Error()).Msg("could not read the invocation body; the host will retry it")
		writeResult(w, http.StatusBadRequest)
		return
	}
	inv := &Invocation{Function: name, InvocationID: r.Header.Get("X-Azure-Functions-InvocationId"), Body: body}
	status := s.invoke(r.Context(), f, inv)
	writeResult(w, status)
}

func (s *Server) invoke(ctx context.Context, f Func, inv *Invocation) (status int) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error().Str("function", inv.Function).Str("invocationId", inv.InvocationID).
				Str("panic", fmt.Sprint(p)).Msg("invocation panicked; failing it so the host retries")
			status = http.StatusInternalServerError
		}
	}()
	return StatusOf(f(ctx, inv))
}

func (s *Server) readBody(r *http.Request) ([]byte, error) {
	if r.ContentLength > s.maxBody {
		return nil, fmt.Errorf("envelope of %d bytes exceeds the %d byte limit", r.ContentLength, s.maxBody)
	}
	lr := io.LimitReader(r.Body, s.maxBody+1)
	size := 16 << 10
	if r.ContentLength > 0 {
		size = int(r.ContentLength)
	}
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if int64(len(buf)) > s.maxBody {
		return nil, fmt.Errorf("envelope exceeds the %d byte limit", s.maxBody)
	}
	return buf, nil
}

func writeResult(w http.ResponseWriter, status int) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", responseLength)
	w.WriteHeader(status)
	_, _ = w.Write(responseBody)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
