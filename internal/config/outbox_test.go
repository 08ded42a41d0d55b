package config

import (
	"strings"
	"testing"
	"time"
)

func TestOutboxDefaults(t *testing.T) {
	cfg, err := load(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Outbox.SweepSchedule != "0 */5 * * * *" || cfg.Outbox.MinimumAge != 5*time.Minute {
		t.Fatalf("outbox defaults %+v", cfg.Outbox)
	}
}

func TestOutboxSettings(t *testing.T) {
	cfg, err := load(t, map[string]string{KeyOutboxSweepSchedule: " 0 */10 * * * * ", KeyOutboxMinimumAge: "00:15:00"})
	if err != nil || cfg.Outbox.SweepSchedule != "0 */10 * * * *" || cfg.Outbox.MinimumAge != 15*time.Minute {
		t.Fatalf("%+v %v", cfg, err)
	}
	for raw, why := range map[string]string{
		"0 */5 * * *": "5 fields",
		"":            "cannot run the OutboxSweep timer",
		"@every 5m":   "field",
	} {
		_, err := load(t, map[string]string{KeyOutboxSweepSchedule: raw})
		ps := problems(t, err)
		if len(ps) != 1 || !strings.Contains(ps[0], KeyOutboxSweepSchedule) || !strings.Contains(ps[0], why) {
			t.Errorf("%s=%q: problems %q, want one naming the setting and %q", KeyOutboxSweepSchedule, raw, ps, why)
		}
	}
	for _, raw := range []string{"0", "00:00:00.5", "31", "-00:05:00", "soon"} {
		_, err := load(t, map[string]string{KeyOutboxMinimumAge: raw})
		ps := problems(t, err)
		if len(ps) != 1 || !strings.Contains(ps[0], KeyOutboxMinimumAge) || !strings.Contains(ps[0], "30.00:00:00") {
			t.Errorf("%s=%q: problems %q", KeyOutboxMinimumAge, raw, ps)
		}
	}
	for _, raw := range []string{"00:00:01", "30"} {
		if _, err := load(t, map[string]string{KeyOutboxMinimumAge: raw}); err != nil {
			t.Errorf("%s=%q refused: %v", KeyOutboxMinimumAge, raw, err)
		}
	}
}

// With the inbox on (transactional handlers need it), an unset schedule
// and a minimum age that lets the sweep race a redelivery are warned
// about; with it off, neither is.
func TestOutboxWarnings(t *testing.T) {
	inbox := map[string]string{KeyInboxEnabled: "true", KeyInboxStore: "InMemory", KeyCleanupSchedule: DefaultCleanupSchedule}
	count := func(cfg *Config, key string) int {
		n := 0
		for _, w := range cfg.Warnings {
			if strings.Contains(w, key) {
				n++
			}
		}
		return n
	}
	for _, c := range []struct {
		name           string
		set            map[string]string
		sched, minimum int
	}{
		{"inbox, schedule unset", inbox, 1, 0},
		{"inbox, schedule set", with(inbox, KeyOutboxSweepSchedule, DefaultOutboxSweepSchedule), 0, 0},
		{"minimum age at the retry pause", with(with(inbox, KeyOutboxSweepSchedule, DefaultOutboxSweepSchedule), KeyOutboxMinimumAge, "00:01:00"), 0, 1},
		{"minimum age above the retry pause", with(with(inbox, KeyOutboxSweepSchedule, DefaultOutboxSweepSchedule), KeyOutboxMinimumAge, "00:01:01"), 0, 0},
		{"no inbox", map[string]string{KeyOutboxMinimumAge: "00:00:01"}, 0, 0},
	} {
		cfg, err := load(t, c.set)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if n := count(cfg, KeyOutboxSweepSchedule+" is not set"); n != c.sched {
			t.Errorf("%s: %d schedule warnings, want %d: %q", c.name, n, c.sched, cfg.Warnings)
		}
		if n := count(cfg, KeyOutboxMinimumAge); n != c.minimum {
			t.Errorf("%s: %d minimum-age warnings, want %d: %q", c.name, n, c.minimum, cfg.Warnings)
		}
	}
}

func with(m map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for key, val := range m {
		if key != k {
			out[key] = val
		}
	}
	return out
}

func TestPublishMaxMessageBytes(t *testing.T) {
	cfg, err := load(t, nil)
	if err != nil || cfg.Outbox.MaxMessageBytes != 262144 {
		t.Fatalf("default: %+v %v", cfg.Outbox, err)
	}
	for in, want := range map[string]int{"16384": 16 << 10, "1048576": 1 << 20, " 524288 ": 512 << 10} {
		cfg, err := load(t, map[string]string{KeyPublishMaxMessageBytes: in})
		if err != nil || cfg.Outbox.MaxMessageBytes != want {
			t.Errorf("%s=%q: %+v %v", KeyPublishMaxMessageBytes, in, cfg.Outbox, err)
		}
	}
	for _, in := range []string{"16383", "1048577", "0", "-1", "256KB", "1e6"} {
		_, err := load(t, map[string]string{KeyPublishMaxMessageBytes: in})
		ps := problems(t, err)
		if len(ps) != 1 || !strings.Contains(ps[0], KeyPublishMaxMessageBytes) || !strings.Contains(ps[0], "16384 to 1048576") {
			t.Errorf("%s=%q: problems %q", KeyPublishMaxMessageBytes, in, ps)
		}
	}
}
