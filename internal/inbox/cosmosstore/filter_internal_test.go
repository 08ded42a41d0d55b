package cosmosstore

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// matcher evaluates expiredFilter's clause the way Cosmos does: an ordinal
// string comparison against @olderThan, or equality with a listed value.
func matcher(t *testing.T, olderThan time.Time) func(stored string) bool {
	t.Helper()
	where, params := expiredFilter("ep", olderThan)
	if params[0].Name != "@endpointId" || params[0].Value != "ep" || !strings.HasPrefix(where, "c.endpointId = @endpointId AND ") {
		t.Fatalf("clause %q does not scope by endpoint", where)
	}
	cutoff := params[1].Value.(string)
	exact := map[string]bool{}
	for _, p := range params[2:] {
		if !strings.Contains(where, p.Name) {
			t.Fatalf("parameter %s unused in %q", p.Name, where)
		}
		exact[p.Value.(string)] = true
	}
	return func(stored string) bool { return stored < cutoff || exact[stored] }
}

// dotNetForm renders t as Newtonsoft's default DateTime format does: up to
// seven fraction digits with trailing zeros trimmed.
func dotNetForm(t time.Time) string {
	s := t.UTC().Format("2006-01-02T15:04:05.0000000")
	s = strings.TrimRight(s, "0")
	s = strings.TrimSuffix(s, ".")
	return s + "Z"
}

// The clause selects exactly the records older than the cutoff, for the
// fixed seven-digit form and the trimmed .NET form, including trimmed
// values in the cutoff's own second (where a plain string comparison
// errs).
func TestExpiredFilterMatchesTimeOrder(t *testing.T) {
	t.Parallel()
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	fracs := []int{0, 1, 9, 10, 100, 1000, 10000, 100000, 1000000, 2000000, 2500000, 4999999, 5000000, 5000001, 5100000, 1234567, 1234560, 1234500, 1230000, 1200000, 9999999}
	var instants []time.Time
	for _, sec := range []int{-1, 0, 1} {
		for _, f := range fracs {
			instants = append(instants, base.Add(time.Duration(sec)*time.Second+time.Duration(f)*tick))
		}
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for range 300 {
		instants = append(instants, base.Add(time.Duration(rng.Int64N(int64(3*time.Second)))-time.Second).Truncate(tick))
	}
	forms := map[string]func(time.Time) string{"fixed": formatCreatedAt, "trimmed": dotNetForm}
	naive := 0
	for _, cutoff := range instants {
		matches := matcher(t, cutoff)
		for name, form := range forms {
			for _, rec := range instants {
				stored := form(rec)
				want := rec.Before(cutoff)
				if got := matches(stored); got != want {
					t.Fatalf("%s %q vs cutoff %s: matched %v, want %v", name, stored, formatCreatedAt(cutoff), got, want)
				}
				if (stored < formatCreatedAt(cutoff)) != want {
					naive++
				}
			}
		}
	}
	// The plain comparison NimBus uses does err on these inputs.
	if naive == 0 {
		t.Fatal("inputs never exercise the trimmed-form quirk")
	}
}

func TestExpiredFilterClauses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		cutoff   time.Time
		prefixes []string
	}{
		{time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), nil},
		{time.Date(2030, 1, 1, 0, 0, 0, 500_000_000, time.UTC), []string{"2030-01-01T00:00:00Z"}},
		{time.Date(2030, 1, 1, 0, 0, 0, 500_000_100, time.UTC), []string{
			"2030-01-01T00:00:00Z", "2030-01-01T00:00:00.5Z", "2030-01-01T00:00:00.50Z", "2030-01-01T00:00:00.500Z",
			"2030-01-01T00:00:00.5000Z", "2030-01-01T00:00:00.50000Z", "2030-01-01T00:00:00.500000Z"}},
		{time.Date(2030, 1, 1, 0, 0, 7, 120_000_000, time.FixedZone("CET", 3600)), []string{"2029-12-31T23:00:07Z", "2029-12-31T23:00:07.1Z"}},
	}
	for _, tc := range cases {
		where, params := expiredFilter("ep", tc.cutoff)
		var got []string
		for _, p := range params[2:] {
			got = append(got, p.Value.(string))
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.prefixes) {
			t.Errorf("cutoff %v: prefixes %v, want %v", tc.cutoff, got, tc.prefixes)
		}
		if (len(tc.prefixes) > 0) != strings.Contains(where, " IN (") {
			t.Errorf("cutoff %v: clause %q", tc.cutoff, where)
		}
		for _, kw := range []string{"TOP", "ORDER BY", "DISTINCT", "GROUP BY", "COUNT(", "MIN(", "MAX("} {
			if strings.Contains(strings.ToUpper(where), kw) {
				t.Errorf("clause %q contains %s", where, kw)
			}
		}
	}
}

func TestCreatedAtRoundTrip(t *testing.T) {
	t.Parallel()
	cases := map[string]time.Time{
		"2030-01-01T00:00:00.0000000Z": time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC),
		"2030-01-01T00:00:00Z":         time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC),
		"2030-01-01T00:00:00.5Z":       time.Date(2030, 1, 1, 0, 0, 0, 500_000_000, time.UTC),
		"2030-01-01T00:00:00.1234567Z": time.Date(2030, 1, 1, 0, 0, 0, 123_456_700, time.UTC),
		"2030-01-01T01:00:00+01:00":    time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	for s, want := range cases {
		got, err := parseCreatedAt(s)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseCreatedAt(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, bad := range []string{"", "2030-01-01", "01/01/2030 00:00:00"} {
		if _, err := parseCreatedAt(bad); err == nil {
			t.Errorf("parseCreatedAt(%q) accepted", bad)
		}
	}
	if got := formatCreatedAt(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)); got != "2030-01-01T00:00:00.0000000Z" {
		t.Errorf("formatCreatedAt = %q", got)
	}
	if got := formatCreatedAt(time.Date(2030, 1, 1, 0, 0, 0, 99, time.UTC)); got != "2030-01-01T00:00:00.0000000Z" {
		t.Errorf("formatCreatedAt(99ns) = %q, want truncation to the tick", got)
	}
	// A cutoff between ticks rounds up: every whole tick before it is older.
	for in, want := range map[int]int{0: 0, 1: 100, 99: 100, 100: 100, 101: 200} {
		base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		if got := cutoffTick(base.Add(time.Duration(in))); !got.Equal(base.Add(time.Duration(want))) {
			t.Errorf("cutoffTick(+%dns) = %v, want +%dns", in, got, want)
		}
	}
}
