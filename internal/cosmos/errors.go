package cosmos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
)

// OperatorError is a misconfiguration an operator must fix (an account that
// is not Strong, a container that is missing or partitioned on another
// path). Its text names only account facts and option fields, never keys or
// payloads, so callers may log it verbatim instead of reducing it to
// "unavailable". The subscriber pipeline recognizes it by its
// OperatorMessage method.
type OperatorError struct{ err error }

// OperatorErrorf returns an *OperatorError formatted as fmt.Errorf formats
// (so %w wraps).
func OperatorErrorf(format string, args ...any) error {
	return &OperatorError{err: fmt.Errorf(format, args...)}
}

func (e *OperatorError) Error() string { return e.err.Error() }

// Unwrap returns the wrapped error.
func (e *OperatorError) Unwrap() error { return e.err }

// OperatorMessage is the text to show an operator: the error text itself.
func (e *OperatorError) OperatorMessage() string { return e.err.Error() }

// Kind is the class of an error from an azcosmos or azcore call.
type Kind int

// Kinds, from Classify.
const (
	// KindNone: no error.
	KindNone Kind = iota
	// KindNotFound: a clean 404 (no sub-status, or 0): the addressed item
	// does not exist. A 404 with a sub-status is not this kind: 1002 (read
	// session not available) is KindTransient, 1003 (the owner resource,
	// such as the container or database, is missing) and any other is
	// KindPermanent.
	KindNotFound
	// KindConflict: 409, the item exists already.
	KindConflict
	// KindPreconditionFailed: 412, an If-Match (ETag) condition failed.
	KindPreconditionFailed
	// KindThrottled: 429, request rate too large; Class.RetryAfter says
	// how long the service asked to wait. Transient.
	KindThrottled
	// KindTransient: retrying later may succeed: 408, 410, 449, 500, 502,
	// 503, 504 and any other 5xx, a 404 with sub-status 1002, transport
	// errors (no response) and timeouts (context.DeadlineExceeded).
	KindTransient
	// KindPermanent: retrying the same request will fail the same way
	// until something changes: 400, 401, 403, 413, any other 4xx, a 404
	// with a sub-status other than 0 or 1002, and *OperatorError.
	KindPermanent
	// KindCanceled: the caller's context was canceled.
	KindCanceled
)

var kindNames = [...]string{"none", "not_found", "conflict", "precondition_failed", "throttled", "transient", "permanent", "canceled"}

func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Sub-statuses that change a 404's meaning.
const (
	SubStatusReadSessionNotAvailable = 1002
	SubStatusOwnerResourceNotFound   = 1003
)

// Class is what Classify found out about an error.
type Class struct {
	Kind Kind
	// Status is the HTTP status of the service's answer; 0 when there was
	// none (transport error, timeout, cancellation, operator error).
	Status int
	// SubStatus is the x-ms-substatus header; 0 when absent, -1 when not a
	// number.
	SubStatus int
	// RetryAfter is the x-ms-retry-after-ms header (set on 429 and some
	// 503 answers); 0 when absent.
	RetryAfter time.Duration
}

// Transient reports a class worth retrying later: KindThrottled or
// KindTransient.
func (c Class) Transient() bool { return c.Kind == KindThrottled || c.Kind == KindTransient }

// Classify classifies an error returned by an azcosmos or azcore call (or
// by this package). A service answer (*azcore.ResponseError anywhere in the
// chain) is classified by its status; otherwise cancellation is
// KindCanceled, an *OperatorError is KindPermanent, and anything else is a
// transport failure or timeout: KindTransient (the request may or may not
// have reached the service).
func Classify(err error) Class {
	if err == nil {
		return Class{Kind: KindNone}
	}
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		c := Class{Status: re.StatusCode}
		if re.RawResponse != nil {
			if raw := re.RawResponse.Header.Get("x-ms-substatus"); raw != "" {
				n, aerr := strconv.Atoi(raw)
				if aerr != nil {
					n = -1 // unreadable: never a clean 404
				}
				c.SubStatus = n
			}
			if ms, perr := strconv.ParseFloat(re.RawResponse.Header.Get("x-ms-retry-after-ms"), 64); perr == nil && ms > 0 {
				c.RetryAfter = time.Duration(ms * float64(time.Millisecond))
			}
		}
		c.Kind = kindOfStatus(c.Status, c.SubStatus)
		return c
	}
	var oe *OperatorError
	switch {
	case errors.Is(err, context.Canceled):
		return Class{Kind: KindCanceled}
	case errors.As(err, &oe):
		return Class{Kind: KindPermanent}
	}
	return Class{Kind: KindTransient}
}

func kindOfStatus(status, sub int) Kind {
	switch status {
	case http.StatusNotFound:
		switch sub {
		case 0:
			return KindNotFound
		case SubStatusReadSessionNotAvailable:
			return KindTransient
		}
		return KindPermanent
	case http.StatusConflict:
		return KindConflict
	case http.StatusPreconditionFailed:
		return KindPreconditionFailed
	case http.StatusTooManyRequests:
		return KindThrottled
	case http.StatusRequestTimeout, http.StatusGone, 449: // 449: Retry With
		return KindTransient
	}
	if status >= 500 {
		return KindTransient
	}
	return KindPermanent
}

// IsNotFound reports a clean 404: the addressed document (or other
// resource) does not exist. A 404 with a sub-status (1002 read session not
// available, 1003 owner resource such as the container missing) is not
// "not found" and stays an error. It is Classify(err).Kind == KindNotFound.
func IsNotFound(err error) bool { return Classify(err).Kind == KindNotFound }

// StatusCode returns the HTTP status of a service answer in err's chain,
// or 0.
func StatusCode(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}
