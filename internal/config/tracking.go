package config

import "strconv"

// Bounds of NimBus__Cosmos__UnresolvedRetentionDays.
const (
	// DefaultUnresolvedRetentionDays keeps unresolved rows without limit.
	DefaultUnresolvedRetentionDays = -1
	// MaxUnresolvedRetentionDays is NimBus's product bound: a
	// payload-bearing unresolved row never outlives the one-year audits
	// that describe it.
	MaxUnresolvedRetentionDays = 365
)

// retentionDays reads NimBus__Cosmos__UnresolvedRetentionDays: -1 or
// 1..365 whole days; anything else is a problem naming the setting and the
// value.
func (l *loader) retentionDays() int {
	raw := l.str(KeyUnresolvedRetentionDays)
	if raw == "" {
		return DefaultUnresolvedRetentionDays
	}
	n, err := strconv.Atoi(raw)
	if err != nil || !(n == -1 || (n >= 1 && n <= MaxUnresolvedRetentionDays)) {
		l.problem("%s=%s must be -1 (unlimited) or between 1 and %d whole days", KeyUnresolvedRetentionDays, show(raw), MaxUnresolvedRetentionDays)
		return DefaultUnresolvedRetentionDays
	}
	return n
}
