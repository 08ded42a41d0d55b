package cosmos

import (
	"net/http"
	"strconv"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/nimbus-go/functions-subscriber/internal/telemetry"
)

// HeaderRequestCharge is the response header in which Cosmos DB reports the
// request units a request consumed (also on errors, and on each retry).
const HeaderRequestCharge = "x-ms-request-charge"

// chargePolicy adds every response's request charge, and the request
// itself, to the telemetry.Charge of the request's context (one per
// invocation). It runs per try, so retried requests are counted too. A
// request without a Charge on its context costs one context lookup.
type chargePolicy struct{}

func (chargePolicy) Do(req *policy.Request) (*http.Response, error) {
	resp, err := req.Next()
	c := telemetry.ChargeFrom(req.Raw().Context())
	if c == nil {
		return resp, err
	}
	var ru float64
	if resp != nil {
		if v := resp.Header.Get(HeaderRequestCharge); v != "" {
			ru, _ = strconv.ParseFloat(v, 64)
		}
	}
	c.Add(ru)
	return resp, err
}
