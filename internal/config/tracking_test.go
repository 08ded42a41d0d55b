package config

import (
	"strings"
	"testing"
)

func TestUnresolvedRetentionDays(t *testing.T) {
	c, err := Load(FromMap(base()))
	if err != nil {
		t.Fatal(err)
	}
	if c.Tracking.UnresolvedRetentionDays != -1 {
		t.Fatalf("default %d, want -1", c.Tracking.UnresolvedRetentionDays)
	}
	for raw, want := range map[string]int{"-1": -1, "1": 1, "180": 180, "365": 365, " 30 ": 30} {
		m := base()
		m[KeyUnresolvedRetentionDays] = raw
		c, err := Load(FromMap(m))
		if err != nil {
			t.Errorf("%q: %v", raw, err)
			continue
		}
		if c.Tracking.UnresolvedRetentionDays != want {
			t.Errorf("%q: %d, want %d", raw, c.Tracking.UnresolvedRetentionDays, want)
		}
	}
	for _, raw := range []string{"0", "-2", "366", "1.5", "7.00:00:00", "abc", "2147483648"} {
		m := base()
		m[KeyUnresolvedRetentionDays] = raw
		_, err := Load(FromMap(m))
		if err == nil || !strings.Contains(err.Error(), KeyUnresolvedRetentionDays) || !strings.Contains(err.Error(), raw) {
			t.Errorf("%q: %v; want a problem naming the setting and the value", raw, err)
		}
	}
}
