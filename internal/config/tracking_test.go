package config

import (
	"strings"
	"testing"
)

func TestUnresolvedRetentionDays(t *testing.T) {
	read := func(m map[string]string) (int, []string) {
		l := loader{lookup: FromMap(m)}
		n := l.retentionDays()
		return n, l.problems
	}
	if n, p := read(nil); n != -1 || len(p) != 0 {
		t.Fatalf("default %d %v, want -1", n, p)
	}
	for raw, want := range map[string]int{"-1": -1, "1": 1, "180": 180, "365": 365, " 30 ": 30} {
		if n, p := read(map[string]string{KeyUnresolvedRetentionDays: raw}); n != want || len(p) != 0 {
			t.Errorf("%q: %d %v, want %d", raw, n, p, want)
		}
	}
	for _, raw := range []string{"0", "-2", "366", "1.5", "7.00:00:00", "abc", "2147483648"} {
		m := base()
		m[KeyUnresolvedRetentionDays] = raw
		_, err := Load(FromMap(m))
		if err == nil || !strings.Contains(err.Error(), KeyUnresolvedRetentionDays) || !strings.Contains(err.Error(), raw) {
			t.Errorf("%q: %v; want start-up to fail naming the setting and the value", raw, err)
		}
	}
}
