package funchost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"
	"golang.org/x/sync/semaphore"

	"github.com/nimbus-go/functions-subscriber/internal/logsafe"
	"github.com/nimbus-go/functions-subscriber/internal/netjson"
)

// Invocation is one request from the host.
type Invocation struct {
	// Function is the function (folder) name from the URL path.
	Function string
	// InvocationID is the host's X-Azure-Functions-InvocationId header.
	InvocationID string
	// Body is the raw envelope.
	Body []byte

	logs    []string
	dropped int
}

// Bounds of the response's Logs array.
const (
	// MaxLogs is the most entries one response carries; later ones are
	// dropped and the last entry says how many.
	MaxLogs = 8
	// MaxLogUnits bounds one entry, in UTF-16 units.
	MaxLogUnits = 4096
)

// Log adds line to the response's Logs array, which the host logs under
// the invocation (Information level, correlated with it in Application
// Insights) when the answer is 2xx; the host ignores Logs on any other
// answer. line is cut at MaxLogUnits; at most MaxLogs entries are kept.
// Never put payload in it.
func (inv *Invocation) Log(line string) {
	if len(inv.logs) < MaxLogs {
		// A valid UTF-8 line of at most MaxLogUnits bytes has at most as
		// many UTF-16 units: kept as is without counting them.
		if len(line) > MaxLogUnits || !utf8.ValidString(line) {
			line = logsafe.BoundTo(line, MaxLogUnits)
		}
		inv.logs = append(inv.logs, line)
		return
	}
	inv.dropped++
}

// Logs returns the entries the response carries.
func (inv *Invocation) Logs() []string {
	if inv.dropped == 0 {
		return inv.logs
	}
	out := append([]string(nil), inv.logs[:MaxLogs-1]...)
	return append(out, strconv.Itoa(inv.dropped+1)+" more log entries of this invocation were dropped; see the handler's stdout")
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

// DefaultAdmitWait is how long an invocation waits for room in the
// in-flight byte budget before it is answered 503.
const DefaultAdmitWait = 10 * time.Second

// DefaultBodyTimeout bounds how long reading one envelope may take. The
// Functions host sends an envelope whole, at loopback speed (140 MB in well
// under a second): a body still arriving after this is not the host, and
// must not hold its share of the byte budget, or shutdown, any longer.
const DefaultBodyTimeout = 5 * time.Second

// MaxDiscard bounds the body an invocation that is refused (overload, bad
// length) reads and discards before it answers, so that a client still
// sending its envelope reads the answer instead of a reset connection.
const MaxDiscard = DefaultMaxBody

// Options configures a Server. Zero values mean the defaults.
type Options struct {
	// MaxBody bounds one envelope; default DefaultMaxBody.
	MaxBody int64
	// MaxBytesInFlight bounds the envelope bytes of the invocations being
	// processed at once (0: unbounded). An invocation that finds no room
	// waits up to AdmitWait, then is answered 503 so the broker redelivers
	// it later. One envelope larger than the whole budget runs alone.
	MaxBytesInFlight int64
	// AdmitWait is how long an invocation waits for room; default
	// DefaultAdmitWait.
	AdmitWait time.Duration
	// BodyTimeout bounds the time from admission to the envelope's last
	// byte (and the discarding of a refused one); default
	// DefaultBodyTimeout. An envelope not read by then is answered 408.
	BodyTimeout time.Duration
	// Stopping, when done, ends every wait for room at once (shutdown).
	Stopping context.Context
	// OnOverload is called when an invocation is refused for want of room
	// (counters); it must not block.
	OnOverload func(function string)
}

// Server routes host requests to functions. The zero value is not usable;
// use NewServer.
type Server struct {
	log      zerolog.Logger
	maxBody  int64
	budget   *semaphore.Weighted // nil: unbounded
	capacity int64
	wait     time.Duration
	bodyWait time.Duration
	stopping context.Context
	overload func(string)
	funcs    map[string]Func // lower-cased name
	names    []string
	extra    map[string]http.Handler
	// extraPost are the extra POST routes (local runs' controls).
	extraPost map[string]http.Handler
	// http are the HTTP functions, by lower-cased route.
	http map[string]httpRoute
}

// RoutePrefix is the path prefix of the HTTP functions: with
// enableForwardingHttpRequest the host forwards an HTTP-triggered
// request at its original path, /api/<route> under the default route
// prefix.
const RoutePrefix = "/api/"

// httpRoute is one HTTP function: the methods it accepts and its handler.
type httpRoute struct {
	name    string
	methods []string
	allow   string
	h       http.Handler
}

// NewServer returns a server that logs protocol problems to log.
func NewServer(log zerolog.Logger, o Options) *Server {
	s := &Server{log: log, maxBody: o.MaxBody, wait: o.AdmitWait, bodyWait: o.BodyTimeout, stopping: o.Stopping, overload: o.OnOverload,
		funcs: map[string]Func{}, extra: map[string]http.Handler{}, extraPost: map[string]http.Handler{}, http: map[string]httpRoute{}}
	if s.maxBody <= 0 {
		s.maxBody = DefaultMaxBody
	}
	if s.wait <= 0 {
		s.wait = DefaultAdmitWait
	}
	if s.bodyWait <= 0 {
		s.bodyWait = DefaultBodyTimeout
	}
	if s.stopping == nil {
		s.stopping = context.Background()
	}
	if o.MaxBytesInFlight > 0 {
		s.budget, s.capacity = semaphore.NewWeighted(o.MaxBytesInFlight), o.MaxBytesInFlight
	}
	return s
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

// HandlePost registers an extra POST route, under the same rule as
// HandleGet.
func (s *Server) HandlePost(path string, h http.Handler) {
	if !strings.HasPrefix(path, "/_") {
		panic("funchost: extra routes must start with /_")
	}
	s.extraPost[path] = h
}

// HandleHTTP registers h, the HTTP function name, for the HTTP requests
// the host forwards at RoutePrefix+route (matched case-insensitively, as the host matches
// routes), with one of methods (upper case). Another method is answered
// 405 with an Allow header. The request's body is bounded by the
// envelope limit, and its announced length takes room in the in-flight
// byte budget while h runs. It panics on a duplicate route.
func (s *Server) HandleHTTP(name, route string, methods []string, h http.Handler) {
	key := strings.ToLower(route)
	if _, dup := s.http[key]; dup {
		panic("funchost: route " + route + " registered twice")
	}
	s.http[key] = httpRoute{name: name, methods: methods, allow: strings.Join(methods, ", "), h: h}
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
	if h, ok := s.extraPost[path]; ok && r.Method == http.MethodPost {
		h.ServeHTTP(w, r)
		return
	}
	if len(path) > len(RoutePrefix) && strings.EqualFold(path[:len(RoutePrefix)], RoutePrefix) {
		if route, ok := s.http[strings.ToLower(path[len(RoutePrefix):])]; ok {
			s.serveHTTPFunction(w, r, route)
			return
		}
	}
	name := strings.TrimPrefix(path, "/")
	f, ok := s.funcs[strings.ToLower(name)]
	if !ok {
		s.log.Warn().Str("function", logsafe.Bound(name)).Msg("invocation for an unknown function")
		writeResult(w, http.StatusNotFound)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeResult(w, http.StatusMethodNotAllowed)
		return
	}
	invocationID := r.Header.Get("X-Azure-Functions-InvocationId")
	held, err := s.admit(r.Context(), r.ContentLength)
	if err != nil {
		s.log.Warn().Str("function", logsafe.Bound(name)).Str("invocationId", logsafe.Bound(invocationID)).
			Str("outcome", "overloaded").Int64("contentLength", r.ContentLength).Str("error", err.Error()).
			Msg("too many invocation bytes in flight; answering 503 so the broker redelivers the message later")
		if s.overload != nil {
			s.overload(name)
		}
		s.discardBody(w, r)
		writeResult(w, http.StatusServiceUnavailable)
		return
	}
	defer func() { s.release(held) }()
	// The body must arrive within the body timeout: a trickling client
	// would otherwise hold its reservation, and shutdown, for as long as
	// it trickles.
	rc := http.NewResponseController(w)
	deadlineSet := rc.SetReadDeadline(time.Now().Add(s.bodyWait)) == nil
	body, err := s.readBody(r, &held)
	if deadlineSet {
		_ = rc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		s.log.Error().Str("function", logsafe.Bound(name)).Str("invocationId", logsafe.Bound(invocationID)).
			Str("error", logsafe.Bound(err.Error())).Msg("could not read the invocation body; the host will retry it")
		status := http.StatusBadRequest
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			status = http.StatusRequestTimeout
		case errors.Is(err, errTooLarge):
			s.discardBody(w, r)
		case errors.Is(err, errOverBudget):
			status = http.StatusServiceUnavailable
			if s.overload != nil {
				s.overload(name)
			}
			s.discardBody(w, r)
		}
		writeResult(w, status)
		return
	}
	inv := &Invocation{Function: name, InvocationID: invocationID, Body: body}
	status := s.invoke(r.Context(), f, inv)
	if status >= 200 && status < 300 && len(inv.logs) > 0 {
		writeLogs(w, status, inv.Logs())
		return
	}
	writeResult(w, status)
}

// serveHTTPFunction runs an HTTP function's handler for a method it
// accepts, within the body limit and the in-flight byte budget.
func (s *Server) serveHTTPFunction(w http.ResponseWriter, r *http.Request, route httpRoute) {
	if !slices.Contains(route.methods, r.Method) {
		w.Header().Set("Allow", route.allow)
		http.Error(w, "method not allowed; allowed: "+route.allow, http.StatusMethodNotAllowed)
		return
	}
	if r.ContentLength > s.maxBody {
		http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
		return
	}
	held, err := s.admit(r.Context(), r.ContentLength)
	if err != nil {
		s.log.Warn().Str("function", route.name).Str("outcome", "overloaded").Int64("contentLength", r.ContentLength).
			Str("error", err.Error()).Msg("too many request bytes in flight; answering 503")
		if s.overload != nil {
			s.overload(route.name)
		}
		w.Header().Set("Retry-After", "1")
		http.Error(w, "busy; retry later", http.StatusServiceUnavailable)
		return
	}
	defer s.release(held)
	r.Body = http.MaxBytesReader(w, r.Body, s.maxBody)
	route.h.ServeHTTP(w, r)
}

var (
	errOverBudget = errors.New("the in-flight byte budget is spent")
	errTooLarge   = errors.New("the envelope exceeds the size limit")
)

// discardBody reads and drops what is left of a refused invocation's body,
// at most MaxDiscard bytes within the body timeout, so that the client,
// still sending, reads the answer that follows. Go's server would
// otherwise close the connection under it (it drains at most 256 KiB),
// and the client would see a reset instead of the status.
func (s *Server) discardBody(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(s.bodyWait)) != nil {
		return
	}
	_, _ = io.CopyN(io.Discard, r.Body, MaxDiscard)
	_ = rc.SetReadDeadline(time.Time{})
}

// admit reserves room for an envelope of n bytes (n < 0: unknown, reserved
// while reading). It waits up to the admit wait, or until shutdown.
func (s *Server) admit(ctx context.Context, n int64) (int64, error) {
	if s.budget == nil || n <= 0 {
		return 0, nil
	}
	n = min(n, s.capacity, s.maxBody)
	if s.budget.TryAcquire(n) {
		return n, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.wait)
	defer cancel()
	stop := context.AfterFunc(s.stopping, cancel)
	defer stop()
	if err := s.budget.Acquire(ctx, n); err != nil {
		return 0, fmt.Errorf("%w: no room for %d bytes within %v", errOverBudget, n, s.wait)
	}
	return n, nil
}

func (s *Server) release(n int64) {
	if n > 0 {
		s.budget.Release(n)
	}
}

func (s *Server) invoke(ctx context.Context, f Func, inv *Invocation) (status int) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error().Str("function", logsafe.Bound(inv.Function)).Str("invocationId", logsafe.Bound(inv.InvocationID)).
				Str("panic", logsafe.Bound(fmt.Sprint(p))).Str("stack", logsafe.Stack(debug.Stack())).
				Msg("invocation panicked; failing it so the host retries")
			status = http.StatusInternalServerError
		}
	}()
	return StatusOf(f(ctx, inv))
}

// readBody reads the envelope. When its length was not announced, the room
// it takes is reserved chunk by chunk as it arrives, without waiting (a
// waiting reader holding part of the budget could deadlock with another).
func (s *Server) readBody(r *http.Request, held *int64) ([]byte, error) {
	if r.ContentLength > s.maxBody {
		return nil, fmt.Errorf("%w: envelope of %d bytes exceeds the %d byte limit", errTooLarge, r.ContentLength, s.maxBody)
	}
	if r.ContentLength >= 0 {
		// The length is announced (the host always does): read exactly
		// that, in one allocation. The server stops the body at its length.
		buf := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, buf); err != nil {
			return nil, fmt.Errorf("reading the envelope: %w", err)
		}
		return buf, nil
	}
	lr := io.LimitReader(r.Body, s.maxBody+1)
	buf := make([]byte, 0, 16<<10)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		if s.budget != nil && int64(cap(buf)) > *held {
			grow := min(int64(cap(buf)), s.capacity) - *held
			if grow > 0 {
				if !s.budget.TryAcquire(grow) {
					return nil, fmt.Errorf("%w: no room to read %d more bytes", errOverBudget, grow)
				}
				*held += grow
			}
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
		return nil, fmt.Errorf("%w: envelope exceeds the %d byte limit", errTooLarge, s.maxBody)
	}
	return buf, nil
}

// appendJSONString appends s as a JSON string: printable ASCII without
// quotes or backslashes is copied as is, anything else is escaped as
// Newtonsoft.Json would.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if escapes[s[i]] {
			return netjson.AppendString(b, s)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// escapes marks the bytes appendJSONString does not copy as is.
var escapes = func() (t [256]bool) {
	for c := range 256 {
		t[c] = c < 0x20 || c >= 0x7f || c == '"' || c == '\\'
	}
	return t
}()

// writeLogs answers with logs in the Logs array.
func writeLogs(w http.ResponseWriter, status int, logs []string) {
	n := 64
	for _, l := range logs {
		n += len(l) + 8
	}
	body := make([]byte, 0, n)
	body = append(body, `{"Outputs":{},"Logs":[`...)
	for i, l := range logs {
		if i > 0 {
			body = append(body, ',')
		}
		body = appendJSONString(body, l)
	}
	body = append(body, `],"ReturnValue":null}`...)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeResult(w http.ResponseWriter, status int) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", responseLength)
	w.WriteHeader(status)
	_, _ = w.Write(responseBody)
}
