package cosmos

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
)

// Sentinels of the errors Explain returns.
var (
	// ErrAccessDenied: Cosmos DB refused the request with 401 or 403; the
	// app's key or identity may not do what it asked.
	ErrAccessDenied = errors.New("cosmos: access denied")
	// ErrRefused: Cosmos DB refused the request for good (400, 413 or
	// another 4xx that is not an answer about the addressed item);
	// sending it again is refused the same way.
	ErrRefused = errors.New("cosmos: request refused")
)

// DataContributorRole names the Cosmos DB data-plane role an app needs to
// read and write documents, with its built-in role definition id.
const DataContributorRole = "Cosmos DB Built-in Data Contributor (role definition 00000000-0000-0000-0000-000000000002)"

// Sub-statuses of a 403 that are not about permissions: the SDK retries
// them in another region.
const (
	SubStatusWriteForbidden  = 3
	SubStatusAccountNotFound = 1008
)

// Explain words a refused request for an operator. A 401, or a 403 about
// permissions, becomes an *OperatorError wrapping ErrAccessDenied that
// names the status and the role or setting to fix; any other answer
// Classify calls KindPermanent (400, 413, a 404 with a sub-status, …)
// becomes an *OperatorError wrapping ErrRefused that names the status. A
// 403 with sub-status 3 or 1008 (a region that may not write, or does not
// know the account: the SDK's own retries handle those) is not explained.
// Both wrap err too (for Classify and errors.As), but their text holds
// nothing of err's own (which names the account, the request and what
// the service said about it). Any other error, nil included, is returned
// as it is.
func Explain(err error) error {
	var re *azcore.ResponseError
	if err == nil || !errors.As(err, &re) {
		return err
	}
	c := Classify(err)
	switch {
	case c.Status == http.StatusUnauthorized:
		return explain(err, ErrAccessDenied, "Cosmos DB answered 401 Unauthorized: the account key or the identity's token was not accepted (a rotated key, another account's key, or a token for another tenant or audience); check the Cosmos DB connection setting or managed identity")
	case c.Status == http.StatusForbidden && c.SubStatus != SubStatusWriteForbidden && c.SubStatus != SubStatusAccountNotFound:
		return explain(err, ErrAccessDenied, fmt.Sprintf("Cosmos DB answered 403 Forbidden%s: the app's identity may not do this on the account (a read-only data role or key, or no data-plane role at all); assign it %s at the account's scope, or use a read-write key",
			subStatusText(c.SubStatus), DataContributorRole))
	case c.Status == http.StatusNotFound && c.SubStatus == SubStatusOwnerResourceNotFound:
		return explain(err, ErrRefused, "Cosmos DB answered 404 Not Found (sub-status 1003): the container or its database does not exist (deleted since its first use?); create it as the store declares it, or restart with auto-create on")
	case c.Kind == KindPermanent && c.Status != http.StatusForbidden:
		return explain(err, ErrRefused, fmt.Sprintf("Cosmos DB refused the request with %d %s%s; sent again, it is refused the same way",
			c.Status, http.StatusText(c.Status), subStatusText(c.SubStatus)))
	}
	return err
}

// explain is an *OperatorError with text msg that wraps sentinel and
// cause.
func explain(cause, sentinel error, msg string) error {
	return &OperatorError{err: &explained{msg: msg, sentinel: sentinel, cause: cause}}
}

type explained struct {
	msg             string
	sentinel, cause error
}

func (e *explained) Error() string   { return e.msg }
func (e *explained) Unwrap() []error { return []error{e.sentinel, e.cause} }

func subStatusText(sub int) string {
	if sub == 0 {
		return ""
	}
	return fmt.Sprintf(" (sub-status %d)", sub)
}
