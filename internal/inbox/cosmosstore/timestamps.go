package cosmosstore

import (
	"fmt"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// createdAtLayout writes createdAtUtc in UTC with a fixed seven-digit
// fraction (100 ns ticks, as .NET's "O" format): 2030-01-01T00:00:00.0000000Z.
const createdAtLayout = "2006-01-02T15:04:05.0000000Z"

// tick is the timestamp resolution (one .NET tick).
const tick = 100 * time.Nanosecond

// formatCreatedAt renders t as stored in createdAtUtc, truncated to a tick.
func formatCreatedAt(t time.Time) string {
	return t.UTC().Truncate(tick).Format(createdAtLayout)
}

// parseCreatedAt reads createdAtUtc in the fixed form this package writes
// and in the trimmed forms NimBus's .NET writer produces (…:00Z, …:00.5Z).
func parseCreatedAt(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("cosmosstore: createdAtUtc %q is not an ISO 8601 UTC timestamp", s)
	}
	return t.UTC(), nil
}

// cutoffTick rounds t up to a whole tick. Stored timestamps are whole
// ticks, so for a stored s, s < t exactly when s < cutoffTick(t).
func cutoffTick(t time.Time) time.Time {
	t = t.UTC()
	c := t.Truncate(tick)
	if c.Before(t) {
		c = c.Add(tick)
	}
	return c
}

// expiredFilter returns a WHERE clause, and its parameters, matching
// endpointID's records created before olderThan, exactly at the stored
// (tick) resolution.
//
// Cosmos compares createdAtUtc as strings. Against the fixed seven-digit
// cutoff, every stored form compares correctly except trimmed values in the
// cutoff's own second whose digits are a prefix of the cutoff's fraction:
// "…:00Z" or "…:00.5Z" sort after "…:00.5000001Z" because 'Z' sorts after
// every digit, yet they are older. Those values form a finite set (at most
// seven strings), so the clause adds them as exact matches. The result is
// exact for both forms and needs only filters the gateway serves
// cross-partition.
func expiredFilter(endpointID string, olderThan time.Time) (string, []azcosmos.QueryParameter) {
	cutoff := formatCreatedAt(cutoffTick(olderThan)) // "YYYY-MM-DDThh:mm:ss.fffffffZ"
	params := []azcosmos.QueryParameter{
		{Name: "@endpointId", Value: endpointID},
		{Name: "@olderThan", Value: cutoff},
	}
	second, frac := cutoff[:19], cutoff[20:27]
	var names []string
	for k := 0; k < len(frac); k++ {
		// A stored value equal to the first k fraction digits is older
		// than the cutoff iff the cutoff's remaining digits are not all 0.
		if strings.Trim(frac[k:], "0") == "" {
			break
		}
		v := second + "Z"
		if k > 0 {
			v = second + "." + frac[:k] + "Z"
		}
		name := fmt.Sprintf("@prefix%d", k)
		names = append(names, name)
		params = append(params, azcosmos.QueryParameter{Name: name, Value: v})
	}
	where := "c.endpointId = @endpointId AND c.createdAtUtc < @olderThan"
	if len(names) > 0 {
		where = "c.endpointId = @endpointId AND (c.createdAtUtc < @olderThan OR c.createdAtUtc IN (" + strings.Join(names, ", ") + "))"
	}
	return where, params
}
