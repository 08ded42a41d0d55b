package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/retrypolicy"
)

// Retry policies (NimBus's ConfigureRetryPolicies): when a handler fails,
// the policy that applies decides whether a RetryRequest is scheduled and
// when. Not to be confused with NimBus__Retry__* (the pause before a
// transient failure is answered, so the broker's redeliveries are paced).
//
// App-setting names must be valid Linux environment variable names, and
// event type ids contain dots, so the per-event-type policies and the
// exception rules are indexed lists: {n} stands for 0, 1, 2, … without gaps.
// Every field of a policy is optional except MaxRetries, which defines it.
//
// Limits:
//
//   - MaxRetries: 0 to 100 (0 turns retries off, for example for one event
//     type under a default policy).
//   - Backoff: Fixed, Linear or Exponential (case-insensitive; default
//     Fixed). Jitter: None, Full or Bounded (default None).
//   - BaseDelay (default 1 minute) and MaxDelay (default none): 0 to 14
//     days, MaxDelay not below BaseDelay; a Linear or Exponential policy
//     without MaxDelay draws a warning (its delay grows without bound).
//   - BoundedJitterFactor: a decimal number from 0 to 10 (default 0.25).
//   - EventTypes: at most 100 entries, each EventTypeId 1 to 260 UTF-16
//     code units, no EventTypeId twice (case-insensitively).
//   - ExceptionRules: at most 20; ExceptionContains 1 to 1,024 UTF-16 code
//     units; EventTypeIds an optional comma-separated list.
const (
	KeyRetryPolicyDefaultMaxRetries          = "NimBus__RetryPolicies__Default__MaxRetries"
	KeyRetryPolicyDefaultBackoff             = "NimBus__RetryPolicies__Default__Backoff"
	KeyRetryPolicyDefaultBaseDelay           = "NimBus__RetryPolicies__Default__BaseDelay"
	KeyRetryPolicyDefaultMaxDelay            = "NimBus__RetryPolicies__Default__MaxDelay"
	KeyRetryPolicyDefaultJitter              = "NimBus__RetryPolicies__Default__Jitter"
	KeyRetryPolicyDefaultBoundedJitterFactor = "NimBus__RetryPolicies__Default__BoundedJitterFactor"

	KeyRetryPolicyEventTypeID                  = "NimBus__RetryPolicies__EventTypes__{n}__EventTypeId"
	KeyRetryPolicyEventTypeMaxRetries          = "NimBus__RetryPolicies__EventTypes__{n}__MaxRetries"
	KeyRetryPolicyEventTypeBackoff             = "NimBus__RetryPolicies__EventTypes__{n}__Backoff"
	KeyRetryPolicyEventTypeBaseDelay           = "NimBus__RetryPolicies__EventTypes__{n}__BaseDelay"
	KeyRetryPolicyEventTypeMaxDelay            = "NimBus__RetryPolicies__EventTypes__{n}__MaxDelay"
	KeyRetryPolicyEventTypeJitter              = "NimBus__RetryPolicies__EventTypes__{n}__Jitter"
	KeyRetryPolicyEventTypeBoundedJitterFactor = "NimBus__RetryPolicies__EventTypes__{n}__BoundedJitterFactor"

	KeyRetryPolicyRuleExceptionContains   = "NimBus__RetryPolicies__ExceptionRules__{n}__ExceptionContains"
	KeyRetryPolicyRuleEventTypeIDs        = "NimBus__RetryPolicies__ExceptionRules__{n}__EventTypeIds"
	KeyRetryPolicyRuleMaxRetries          = "NimBus__RetryPolicies__ExceptionRules__{n}__MaxRetries"
	KeyRetryPolicyRuleBackoff             = "NimBus__RetryPolicies__ExceptionRules__{n}__Backoff"
	KeyRetryPolicyRuleBaseDelay           = "NimBus__RetryPolicies__ExceptionRules__{n}__BaseDelay"
	KeyRetryPolicyRuleMaxDelay            = "NimBus__RetryPolicies__ExceptionRules__{n}__MaxDelay"
	KeyRetryPolicyRuleJitter              = "NimBus__RetryPolicies__ExceptionRules__{n}__Jitter"
	KeyRetryPolicyRuleBoundedJitterFactor = "NimBus__RetryPolicies__ExceptionRules__{n}__BoundedJitterFactor"
)

// Limits of the retry-policy settings.
const (
	MaxRetryPolicyRetries        = 100
	MaxRetryPolicyDelay          = 14 * 24 * time.Hour
	MaxRetryPolicyJitterFactor   = 10.0
	MaxRetryPolicyEventTypes     = 100
	MaxRetryPolicyExceptionRules = 20
	MaxRetryPolicyEventTypeIDLen = 260  // UTF-16 code units
	MaxRetryPolicyContainsLen    = 1024 // UTF-16 code units
)

// IndexPlaceholder stands for the list index in the names of indexed
// settings.
const IndexPlaceholder = "{n}"

// IndexedKey returns the name of an indexed setting for index i.
func IndexedKey(pattern string, i int) string {
	return strings.Replace(pattern, IndexPlaceholder, strconv.Itoa(i), 1)
}

// policyKeys name the fields of one policy.
type policyKeys struct {
	MaxRetries, Backoff, BaseDelay, MaxDelay, Jitter, BoundedJitterFactor string
}

func (k policyKeys) at(i int) policyKeys {
	return policyKeys{
		MaxRetries: IndexedKey(k.MaxRetries, i), Backoff: IndexedKey(k.Backoff, i),
		BaseDelay: IndexedKey(k.BaseDelay, i), MaxDelay: IndexedKey(k.MaxDelay, i),
		Jitter: IndexedKey(k.Jitter, i), BoundedJitterFactor: IndexedKey(k.BoundedJitterFactor, i),
	}
}

func (k policyKeys) all() []string {
	return []string{k.MaxRetries, k.Backoff, k.BaseDelay, k.MaxDelay, k.Jitter, k.BoundedJitterFactor}
}

var (
	defaultPolicyKeys = policyKeys{KeyRetryPolicyDefaultMaxRetries, KeyRetryPolicyDefaultBackoff, KeyRetryPolicyDefaultBaseDelay,
		KeyRetryPolicyDefaultMaxDelay, KeyRetryPolicyDefaultJitter, KeyRetryPolicyDefaultBoundedJitterFactor}
	eventTypePolicyKeys = policyKeys{KeyRetryPolicyEventTypeMaxRetries, KeyRetryPolicyEventTypeBackoff, KeyRetryPolicyEventTypeBaseDelay,
		KeyRetryPolicyEventTypeMaxDelay, KeyRetryPolicyEventTypeJitter, KeyRetryPolicyEventTypeBoundedJitterFactor}
	rulePolicyKeys = policyKeys{KeyRetryPolicyRuleMaxRetries, KeyRetryPolicyRuleBackoff, KeyRetryPolicyRuleBaseDelay,
		KeyRetryPolicyRuleMaxDelay, KeyRetryPolicyRuleJitter, KeyRetryPolicyRuleBoundedJitterFactor}
)

// set reports whether key has a non-blank value.
func (l *loader) set(key string) bool { return l.str(key) != "" }

// retryPolicies reads every retry-policy setting into c.RetryPolicies (nil
// when none is set), reporting every problem.
func (l *loader) retryPolicies(c *Config) {
	var s retrypolicy.Set
	add := func(key string, err error) {
		if err != nil { // only when a check above missed something
			l.problem("%s: %v", key, err)
		}
	}

	if p, ok := l.retryPolicy(c, defaultPolicyKeys, "the default retry policy"); ok {
		add(KeyRetryPolicyDefaultMaxRetries, s.SetDefault(p))
	}

	seen := map[string]int{}
	l.indexed(IndexedKey(KeyRetryPolicyEventTypeID, 0), MaxRetryPolicyEventTypes, append([]string{KeyRetryPolicyEventTypeID}, eventTypePolicyKeys.all()...), func(i int) {
		idKey := IndexedKey(KeyRetryPolicyEventTypeID, i)
		id := l.str(idKey)
		ok := l.requiredText(idKey, id, MaxRetryPolicyEventTypeIDLen, fmt.Sprintf("the policy's fields at index %d need the event type they apply to", i))
		if j, dup := seen[strings.ToLower(id)]; ok && dup {
			l.problem("%s=%s repeats %s (event types match case-insensitively): give each event type one policy", idKey, show(id), IndexedKey(KeyRetryPolicyEventTypeID, j))
			ok = false
		} else if ok {
			seen[strings.ToLower(id)] = i
		}
		pk := eventTypePolicyKeys.at(i)
		if id != "" && !l.set(pk.MaxRetries) {
			l.problem("%s is set but %s is not: the policy of an event type is defined by its MaxRetries (0 to %d)", idKey, pk.MaxRetries, MaxRetryPolicyRetries)
		}
		p, pok := l.retryPolicy(c, pk, "the retry policy of "+idKey)
		if ok && pok {
			add(idKey, s.AddEventType(id, p))
		}
	})

	l.indexed(IndexedKey(KeyRetryPolicyRuleExceptionContains, 0), MaxRetryPolicyExceptionRules, append([]string{KeyRetryPolicyRuleExceptionContains, KeyRetryPolicyRuleEventTypeIDs}, rulePolicyKeys.all()...), func(i int) {
		textKey := IndexedKey(KeyRetryPolicyRuleExceptionContains, i)
		text := l.str(textKey)
		ok := l.requiredText(textKey, text, MaxRetryPolicyContainsLen, fmt.Sprintf("the exception rule at index %d needs the text to look for in the error", i))
		typesKey := IndexedKey(KeyRetryPolicyRuleEventTypeIDs, i)
		var types []string
		if raw := l.str(typesKey); raw != "" {
			for _, id := range strings.Split(raw, ",") {
				id = strings.TrimSpace(id)
				switch n := utf16Len(id); {
				case id == "":
					l.problem("%s=%s has an empty entry: list event type ids separated by commas", typesKey, show(raw))
					ok = false
				case n > MaxRetryPolicyEventTypeIDLen:
					l.problem("%s lists %s, %d UTF-16 code units long; the most is %d", typesKey, show(id), n, MaxRetryPolicyEventTypeIDLen)
					ok = false
				default:
					types = append(types, id)
				}
			}
		}
		pk := rulePolicyKeys.at(i)
		if text != "" && !l.set(pk.MaxRetries) {
			l.problem("%s is set but %s is not: the policy of an exception rule is defined by its MaxRetries (0 to %d)", textKey, pk.MaxRetries, MaxRetryPolicyRetries)
		}
		p, pok := l.retryPolicy(c, pk, "the retry policy of "+textKey)
		if ok && pok {
			add(textKey, s.AddExceptionRule(text, p, types...))
		}
	})

	if !s.Empty() {
		c.RetryPolicies = &s
	}
}

// indexed calls each(i) for every index below limit at which any of the
// patterns is set, and reports the first gap (an index set after an unset
// one) and an index at limit. It probes indices up to limit, so an entry
// further out than that is not seen.
func (l *loader) indexed(first string, limit int, patterns []string, each func(i int)) {
	missing, gapReported := -1, false
	for i := 0; i <= limit; i++ {
		var setKey string
		for _, p := range patterns {
			if k := IndexedKey(p, i); l.set(k) {
				setKey = k
				break
			}
		}
		switch {
		case setKey == "":
			if missing < 0 {
				missing = i
			}
			continue
		case i == limit:
			l.problem("%s is set: at most %d entries are allowed (indices 0 to %d)", setKey, limit, limit-1)
			continue
		case missing >= 0 && !gapReported:
			l.problem("%s is set but index %d is not: number the entries 0, 1, 2, … without gaps (starting at %s)", setKey, missing, first)
			gapReported = true
		}
		each(i)
	}
}

// retryPolicy reads one policy. It is defined by MaxRetries: its other
// fields without MaxRetries are a problem. ok is false when the policy is
// not defined or has a problem.
func (l *loader) retryPolicy(c *Config, k policyKeys, what string) (retrypolicy.Policy, bool) {
	p := retrypolicy.Policy{
		Backoff:             retrypolicy.DefaultBackoff,
		BaseDelay:           retrypolicy.DefaultBaseDelay,
		Jitter:              retrypolicy.DefaultJitter,
		BoundedJitterFactor: retrypolicy.DefaultBoundedJitterFactor,
	}
	if !l.set(k.MaxRetries) {
		for _, other := range k.all()[1:] {
			if l.set(other) {
				l.problem("%s is set but %s is not: %s is defined by its MaxRetries (0 to %d)", other, k.MaxRetries, what, MaxRetryPolicyRetries)
				return p, false
			}
		}
		return p, false
	}
	before := len(l.problems)
	p.MaxRetries = l.int(k.MaxRetries, 0, 0, MaxRetryPolicyRetries)
	if raw := l.str(k.Backoff); raw != "" {
		switch b := retrypolicy.Backoff(raw); {
		case strings.EqualFold(raw, string(retrypolicy.Fixed)):
			p.Backoff = retrypolicy.Fixed
		case strings.EqualFold(raw, string(retrypolicy.Linear)):
			p.Backoff = retrypolicy.Linear
		case strings.EqualFold(raw, string(retrypolicy.Exponential)):
			p.Backoff = retrypolicy.Exponential
		default:
			l.problem("%s=%s is not a backoff (use %s, %s or %s)", k.Backoff, show(string(b)), retrypolicy.Fixed, retrypolicy.Linear, retrypolicy.Exponential)
		}
	}
	p.BaseDelay = l.duration(k.BaseDelay, retrypolicy.DefaultBaseDelay, 0, MaxRetryPolicyDelay)
	p.BaseDelay = p.BaseDelay.Truncate(100 * time.Nanosecond)
	if l.set(k.MaxDelay) {
		p.MaxDelay = l.duration(k.MaxDelay, 0, 0, MaxRetryPolicyDelay).Truncate(100 * time.Nanosecond)
		if p.MaxDelay < p.BaseDelay {
			l.problem("%s (%s) must not be shorter than %s (%s)", k.MaxDelay, formatTimeSpan(p.MaxDelay), k.BaseDelay, formatTimeSpan(p.BaseDelay))
		}
	} else if p.Backoff != retrypolicy.Fixed {
		c.Warnings = append(c.Warnings, fmt.Sprintf("%s is not set: %s grows its %s delay without bound (up to about 292 years); set a cap", k.MaxDelay, what, p.Backoff))
	}
	if raw := l.str(k.Jitter); raw != "" {
		switch {
		case strings.EqualFold(raw, string(retrypolicy.JitterNone)):
			p.Jitter = retrypolicy.JitterNone
		case strings.EqualFold(raw, string(retrypolicy.JitterFull)):
			p.Jitter = retrypolicy.JitterFull
		case strings.EqualFold(raw, string(retrypolicy.JitterBounded)):
			p.Jitter = retrypolicy.JitterBounded
		default:
			l.problem("%s=%s is not a jitter mode (use %s, %s or %s)", k.Jitter, show(raw), retrypolicy.JitterNone, retrypolicy.JitterFull, retrypolicy.JitterBounded)
		}
	}
	if raw := l.str(k.BoundedJitterFactor); raw != "" {
		f, err := strconv.ParseFloat(raw, 64)
		if err != nil || math.IsNaN(f) || f < 0 || f > MaxRetryPolicyJitterFactor {
			l.problem("%s=%s must be a decimal number from 0 to %g (0.25 adds up to 25 %%)", k.BoundedJitterFactor, show(raw), MaxRetryPolicyJitterFactor)
		} else {
			p.BoundedJitterFactor = f
		}
	}
	return p, len(l.problems) == before
}

// requiredText reports a problem unless the setting key's value text is 1
// to most UTF-16 code units long; need says what an empty one lacks.
func (l *loader) requiredText(key, text string, most int, need string) bool {
	switch n := utf16Len(text); {
	case text == "":
		l.problem("%s is required: %s", key, need)
		return false
	case n > most:
		l.problem("%s=%s is %d UTF-16 code units long; the most is %d", key, show(text), n, most)
		return false
	}
	return true
}
