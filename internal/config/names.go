package config

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Setting names. App Service passes app settings to the process as
// environment variables with their names as written, and this package reads
// each name exactly (NimBus__Inbox__Enabled, not nimbus__inbox__enabled),
// while .NET configuration would match them in any case. So a name that
// starts with NimBus__ (in any case) must be one this package reads, spelt
// as documented: a name that matches a setting only case-insensitively is an
// error naming the expected spelling, and any other NimBus__ name is an
// error (with the nearest known name when one is close). List indexes are
// written 0, 1, 2, … without leading zeros, below the list's limit.

// namespacePrefix starts every name checkNames checks (case-insensitively).
const namespacePrefix = "NimBus__"

// EnvironValue returns the value of name in environ, in os.Environ's NAME=value
// form, as LoadEnviron reads it: the first of repeated names wins, and ""
// when it is unset.
func EnvironValue(environ []string, name string) string {
	for _, kv := range environ {
		if k, v, _ := strings.Cut(kv, "="); k == name {
			return v
		}
	}
	return ""
}

// LoadEnviron is Load over environ, in os.Environ's NAME=value form (the
// first of repeated names wins, as for os.Getenv); it also refuses every
// NimBus__ name that Load would not read (see checkNames), in the same
// error list. known are further names that are not refused: settings the
// application's own registrations read.
func LoadEnviron(environ []string, known ...string) (*Config, error) {
	m := make(map[string]string, len(environ))
	names := make([]string, 0, len(environ))
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		if _, dup := m[k]; k == "" || dup {
			continue
		}
		m[k] = v
		names = append(names, k)
	}
	c, err := Load(FromMap(m))
	bad := checkNames(names, known)
	if len(bad) == 0 {
		return c, err
	}
	if ce, ok := err.(*Error); ok {
		ce.Problems = append(ce.Problems, bad...)
		return nil, ce
	}
	return nil, &Error{Problems: bad}
}

// indexLimit is the number of entries an indexed list may have.
func indexLimit(pattern string) int {
	if strings.HasPrefix(pattern, "NimBus__RetryPolicies__ExceptionRules__") {
		return MaxRetryPolicyExceptionRules
	}
	return MaxRetryPolicyEventTypes
}

// checkNames returns a problem for every NimBus__ name in names that no
// setting reads.
func checkNames(names, extra []string) []string {
	exact := map[string]bool{}
	for _, n := range extra {
		exact[n] = true
	}
	lower := map[string]string{}
	var known []string // for suggestions
	for _, s := range Settings {
		if !strings.HasPrefix(s.Name, namespacePrefix) {
			continue
		}
		known = append(known, s.Name)
		if !s.Indexed {
			exact[s.Name] = true
			lower[strings.ToLower(s.Name)] = s.Name
		}
	}
	var problems []string
	for _, n := range names {
		if !strings.HasPrefix(strings.ToLower(n), strings.ToLower(namespacePrefix)) || exact[n] {
			continue
		}
		if why, ok := checkIndexed(n); ok {
			if why != "" {
				problems = append(problems, why)
			}
			continue
		}
		if want, ok := lower[strings.ToLower(n)]; ok {
			problems = append(problems, fmt.Sprintf("%s is not read: setting names are matched exactly; write %s", show(n), want))
			continue
		}
		hint := ""
		if near := nearest(n, known); near != "" {
			hint = "; did you mean " + near + "?"
		}
		problems = append(problems, fmt.Sprintf("%s is not a setting this handler reads%s", show(n), hint))
	}
	return problems
}

// checkIndexed reports whether n has the form of an indexed setting (in
// any case), with the problem when it would not be read ("" when it is).
func checkIndexed(n string) (string, bool) {
	for _, s := range Settings {
		if !s.Indexed {
			continue
		}
		pre, suf, _ := strings.Cut(s.Name, IndexPlaceholder)
		if len(n) <= len(pre)+len(suf) || !strings.EqualFold(n[:len(pre)], pre) || !strings.EqualFold(n[len(n)-len(suf):], suf) {
			continue
		}
		idx := n[len(pre) : len(n)-len(suf)]
		if strings.Trim(idx, "0123456789") != "" {
			continue
		}
		limit := indexLimit(s.Name)
		i, err := strconv.Atoi(idx)
		switch {
		case idx != "0" && idx[0] == '0':
			return fmt.Sprintf("%s is not read: write list indexes without leading zeros (%s)", show(n), IndexedKey(s.Name, i)), true
		case err != nil || i > limit:
			return fmt.Sprintf("%s is not read: the list has at most %d entries (indexes 0 to %d)", show(n), limit, limit-1), true
		case n[:len(pre)] != pre || n[len(n)-len(suf):] != suf:
			return fmt.Sprintf("%s is not read: setting names are matched exactly; write %s", show(n), IndexedKey(s.Name, i)), true
		}
		return "", true
	}
	return "", false
}

// listIndex finds a list index in a setting name.
var listIndex = regexp.MustCompile(`__[0-9]+__`)

// nearest returns the known name closest to n (case-insensitively, indexes
// written as {n}) when it is within a few edits, else "".
func nearest(n string, known []string) string {
	best, bestD := "", 4
	ln := listIndex.ReplaceAllString(strings.ToLower(n), "__"+IndexPlaceholder+"__")
	for _, k := range known {
		if d := editDistance(ln, strings.ToLower(k), bestD); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b in bytes, or max when
// it is max or more.
func editDistance(a, b string, max int) int {
	if d := len(a) - len(b); d >= max || -d >= max {
		return max
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		rowMin := cur[0]
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			rowMin = min(rowMin, cur[j])
		}
		if rowMin >= max {
			return max
		}
		prev, cur = cur, prev
	}
	return min(prev[len(b)], max)
}
