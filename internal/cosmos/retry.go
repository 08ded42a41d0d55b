package cosmos

import (
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// DefaultRetry is the recommended Config.Retry: 3 retries, 200 ms doubling
// to at most 2 s between tries, 10 s per try; one operation takes at most
// 46 s. docs/cosmos-retry.md says what retries and why these figures.
var DefaultRetry = policy.RetryOptions{
	MaxRetries:    3,
	RetryDelay:    200 * time.Millisecond,
	MaxRetryDelay: 2 * time.Second,
	TryTimeout:    10 * time.Second,
}
