package cosmos_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/cosmos/cosmostest"
	"github.com/nimbus-go/functions-subscriber/internal/subscriber"
)

// respErr builds the *azcore.ResponseError azcosmos returns for an answer.
func respErr(status int, headers ...string) error {
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1/dbs/d/colls/c/docs/x", nil)
	h := map[string]string{}
	for i := 0; i+1 < len(headers); i += 2 {
		h[headers[i]] = headers[i+1]
	}
	return runtime.NewResponseError(cosmostest.Synth(req, status, h, `{"code":"x","message":"y"}`))
}

func TestClassify(t *testing.T) {
	t.Parallel()
	opErr := cosmos.OperatorErrorf("%w: container %q missing", cosmos.ErrContainer, "inbox")
	cases := []struct {
		name string
		err  error
		want cosmos.Class
	}{
		{"nil", nil, cosmos.Class{Kind: cosmos.KindNone}},
		{"404", respErr(404), cosmos.Class{Kind: cosmos.KindNotFound, Status: 404}},
		{"404 substatus 0", respErr(404, "x-ms-substatus", "0"), cosmos.Class{Kind: cosmos.KindNotFound, Status: 404}},
		{"404/1002 read session unavailable", respErr(404, "x-ms-substatus", "1002"), cosmos.Class{Kind: cosmos.KindTransient, Status: 404, SubStatus: 1002}},
		{"404/1003 owner resource missing", respErr(404, "x-ms-substatus", "1003"), cosmos.Class{Kind: cosmos.KindPermanent, Status: 404, SubStatus: 1003}},
		{"404 unreadable substatus", respErr(404, "x-ms-substatus", "abc"), cosmos.Class{Kind: cosmos.KindPermanent, Status: 404, SubStatus: -1}},
		{"409", respErr(409), cosmos.Class{Kind: cosmos.KindConflict, Status: 409}},
		{"412", respErr(412), cosmos.Class{Kind: cosmos.KindPreconditionFailed, Status: 412}},
		{"429 with retry-after", respErr(429, "x-ms-retry-after-ms", "1500", "x-ms-substatus", "3200"),
			cosmos.Class{Kind: cosmos.KindThrottled, Status: 429, SubStatus: 3200, RetryAfter: 1500 * time.Millisecond}},
		{"429 fractional retry-after", respErr(429, "x-ms-retry-after-ms", "12.5"), cosmos.Class{Kind: cosmos.KindThrottled, Status: 429, RetryAfter: 12500 * time.Microsecond}},
		{"429 without retry-after", respErr(429), cosmos.Class{Kind: cosmos.KindThrottled, Status: 429}},
		{"408", respErr(408), cosmos.Class{Kind: cosmos.KindTransient, Status: 408}},
		{"410", respErr(410, "x-ms-substatus", "1002"), cosmos.Class{Kind: cosmos.KindTransient, Status: 410, SubStatus: 1002}},
		{"449", respErr(449), cosmos.Class{Kind: cosmos.KindTransient, Status: 449}},
		{"500", respErr(500), cosmos.Class{Kind: cosmos.KindTransient, Status: 500}},
		{"502", respErr(502), cosmos.Class{Kind: cosmos.KindTransient, Status: 502}},
		{"503 with retry-after", respErr(503, "x-ms-retry-after-ms", "100"), cosmos.Class{Kind: cosmos.KindTransient, Status: 503, RetryAfter: 100 * time.Millisecond}},
		{"504", respErr(504), cosmos.Class{Kind: cosmos.KindTransient, Status: 504}},
		{"400", respErr(400), cosmos.Class{Kind: cosmos.KindPermanent, Status: 400}},
		{"401", respErr(401), cosmos.Class{Kind: cosmos.KindPermanent, Status: 401}},
		{"403", respErr(403, "x-ms-substatus", "5301"), cosmos.Class{Kind: cosmos.KindPermanent, Status: 403, SubStatus: 5301}},
		{"413", respErr(413), cosmos.Class{Kind: cosmos.KindPermanent, Status: 413}},
		{"other 4xx (422)", respErr(422), cosmos.Class{Kind: cosmos.KindPermanent, Status: 422}},
		{"wrapped 409", fmt.Errorf("cosmosstore: record: %w", respErr(409)), cosmos.Class{Kind: cosmos.KindConflict, Status: 409}},
		{"response error without raw response", &azcore.ResponseError{StatusCode: 404}, cosmos.Class{Kind: cosmos.KindNotFound, Status: 404}},
		{"canceled", context.Canceled, cosmos.Class{Kind: cosmos.KindCanceled}},
		{"wrapped canceled", fmt.Errorf("op: %w", context.Canceled), cosmos.Class{Kind: cosmos.KindCanceled}},
		{"deadline", context.DeadlineExceeded, cosmos.Class{Kind: cosmos.KindTransient}},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, cosmos.Class{Kind: cosmos.KindTransient}},
		{"unexpected EOF", fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), cosmos.Class{Kind: cosmos.KindTransient}},
		{"operator error", opErr, cosmos.Class{Kind: cosmos.KindPermanent}},
		{"wrapped operator error", fmt.Errorf("store: %w", opErr), cosmos.Class{Kind: cosmos.KindPermanent}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := cosmos.Classify(tc.err)
			if got != tc.want {
				t.Fatalf("Classify = %+v, want %+v", got, tc.want)
			}
			wantTransient := tc.want.Kind == cosmos.KindTransient || tc.want.Kind == cosmos.KindThrottled
			if got.Transient() != wantTransient {
				t.Fatalf("Transient() = %v", got.Transient())
			}
			if cosmos.IsNotFound(tc.err) != (tc.want.Kind == cosmos.KindNotFound) {
				t.Fatalf("IsNotFound = %v", cosmos.IsNotFound(tc.err))
			}
			if cosmos.StatusCode(tc.err) != tc.want.Status {
				t.Fatalf("StatusCode = %d, want %d", cosmos.StatusCode(tc.err), tc.want.Status)
			}
		})
	}
}

// IsNotFound keeps exactly the semantics the inbox's check relies on: only
// a clean 404 means "no such document".
func TestIsNotFound(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("boom"), false},
		{respErr(404), true},
		{respErr(404, "x-ms-substatus", ""), true},
		{respErr(404, "x-ms-substatus", "0"), true},
		{respErr(404, "x-ms-substatus", "1002"), false},
		{respErr(404, "x-ms-substatus", "1003"), false},
		{respErr(410), false},
		{respErr(500), false},
		{fmt.Errorf("x: %w", respErr(404)), true},
		{&azcore.ResponseError{StatusCode: 404}, true},
	}
	for i, tc := range cases {
		if got := cosmos.IsNotFound(tc.err); got != tc.want {
			t.Errorf("case %d (%v): IsNotFound = %v, want %v", i, tc.err, got, tc.want)
		}
	}
}

func TestKindString(t *testing.T) {
	t.Parallel()
	want := map[cosmos.Kind]string{
		cosmos.KindNone: "none", cosmos.KindNotFound: "not_found", cosmos.KindConflict: "conflict",
		cosmos.KindPreconditionFailed: "precondition_failed", cosmos.KindThrottled: "throttled",
		cosmos.KindTransient: "transient", cosmos.KindPermanent: "permanent", cosmos.KindCanceled: "canceled",
		cosmos.Kind(99): "Kind(99)",
	}
	for k, w := range want {
		if k.String() != w {
			t.Errorf("%d: %q, want %q", int(k), k.String(), w)
		}
	}
}

// The pipeline recognizes the operator error by its method set and logs
// its message; errors.Is still reaches the sentinel it wraps.
func TestOperatorError(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("cosmosstore: check: %w", cosmos.OperatorErrorf("%w: container %q has partition key paths [/x], want [/id]", cosmos.ErrContainer, "inbox"))
	var oe subscriber.OperatorError
	if !errors.As(err, &oe) {
		t.Fatal("not a subscriber.OperatorError")
	}
	if !strings.Contains(oe.OperatorMessage(), `container "inbox" has partition key paths [/x]`) || !errors.Is(err, cosmos.ErrContainer) {
		t.Fatalf("message %q", oe.OperatorMessage())
	}
	se := subscriber.NewStoreError("check", err)
	if !strings.HasPrefix(se.Class, "misconfigured: ") {
		t.Fatalf("store error class %q", se.Class)
	}
}

// Explain words refusals for an operator, keeps the answer for Classify
// and errors.As, and leaves everything else as it is.
func TestExplain(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		err      error
		sentinel error  // nil: returned unchanged
		want     string // in the operator message
	}{
		{"401", respErr(401), cosmos.ErrAccessDenied, "401 Unauthorized"},
		{"403 RBAC", respErr(403, "x-ms-substatus", "5301"), cosmos.ErrAccessDenied, cosmos.DataContributorRole},
		{"403 read-only key", respErr(403), cosmos.ErrAccessDenied, "read-only"},
		{"400", respErr(400), cosmos.ErrRefused, "400 Bad Request"},
		{"413", respErr(413), cosmos.ErrRefused, "413 Request Entity Too Large"},
		{"404/1003", respErr(404, "x-ms-substatus", "1003"), cosmos.ErrRefused, "does not exist"},
		{"403/3 write forbidden: the SDK's regional retry", respErr(403, "x-ms-substatus", "3"), nil, ""},
		{"403/1008", respErr(403, "x-ms-substatus", "1008"), nil, ""},
		{"404", respErr(404), nil, ""},
		{"409", respErr(409), nil, ""},
		{"429", respErr(429), nil, ""},
		{"503", respErr(503), nil, ""},
		{"transport", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, nil, ""},
		{"nil", nil, nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := cosmos.Explain(tc.err)
			if tc.sentinel == nil {
				if got != tc.err {
					t.Fatalf("Explain changed %v into %v", tc.err, got)
				}
				return
			}
			var oe subscriber.OperatorError
			if !errors.Is(got, tc.sentinel) || !errors.As(got, &oe) {
				t.Fatalf("Explain(%v) = %v, want an operator error wrapping %v", tc.err, got, tc.sentinel)
			}
			if msg := oe.OperatorMessage(); !strings.Contains(msg, tc.want) || strings.Contains(msg, "127.0.0.1") || strings.Contains(msg, `"message"`) {
				t.Errorf("message %q: want %q in it and nothing of the answer", msg, tc.want)
			}
			if c, want := cosmos.Classify(got), cosmos.Classify(tc.err); c != want {
				t.Errorf("Classify = %+v, want %+v as before", c, want)
			}
			var re *azcore.ResponseError
			if !errors.As(got, &re) {
				t.Error("the answer is no longer in the chain")
			}
		})
	}
}
