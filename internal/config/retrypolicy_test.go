package config

import (
	"strings"
	"testing"
	"time"

	"github.com/nimbus-go/functions-subscriber/internal/retrypolicy"
)

func TestNoRetryPoliciesByDefault(t *testing.T) {
	c, err := load(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.RetryPolicies != nil {
		t.Fatalf("RetryPolicies = %+v, want nil", c.RetryPolicies)
	}
	// Blank values, as in the sample settings, are unset.
	c, err = load(t, map[string]string{KeyRetryPolicyDefaultMaxRetries: " ", KeyRetryPolicyDefaultBackoff: ""})
	if err != nil || c.RetryPolicies != nil {
		t.Fatalf("blank settings: %v, %+v", err, c)
	}
}

func TestRetryPoliciesLoad(t *testing.T) {
	c, err := load(t, map[string]string{
		KeyRetryPolicyDefaultMaxRetries: "3",
		// the default's other fields take NimBus's defaults

		"NimBus__RetryPolicies__EventTypes__0__EventTypeId":         "Billing.OrderPlaced",
		"NimBus__RetryPolicies__EventTypes__0__MaxRetries":          "5",
		"NimBus__RetryPolicies__EventTypes__0__Backoff":             "exponential",
		"NimBus__RetryPolicies__EventTypes__0__BaseDelay":           "00:00:10",
		"NimBus__RetryPolicies__EventTypes__0__MaxDelay":            "00:05:00",
		"NimBus__RetryPolicies__EventTypes__0__Jitter":              "Bounded",
		"NimBus__RetryPolicies__EventTypes__0__BoundedJitterFactor": "0.4",
		"NimBus__RetryPolicies__EventTypes__1__EventTypeId":         "Billing.Refund",
		"NimBus__RetryPolicies__EventTypes__1__MaxRetries":          "0",

		"NimBus__RetryPolicies__ExceptionRules__0__ExceptionContains": "timeout",
		"NimBus__RetryPolicies__ExceptionRules__0__EventTypeIds":      "Billing.OrderPlaced, Billing.Refund",
		"NimBus__RetryPolicies__ExceptionRules__0__MaxRetries":        "10",
		"NimBus__RetryPolicies__ExceptionRules__0__Backoff":           "Linear",
		"NimBus__RetryPolicies__ExceptionRules__0__BaseDelay":         "30s",
		"NimBus__RetryPolicies__ExceptionRules__0__MaxDelay":          "00:10:00",
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("warnings: %q", c.Warnings)
	}
	s := c.RetryPolicies
	if s == nil {
		t.Fatal("no policies")
	}
	want := map[[2]string]retrypolicy.Policy{
		{"Other", "boom"}: {MaxRetries: 3, Backoff: retrypolicy.Fixed, BaseDelay: time.Minute, Jitter: retrypolicy.JitterNone, BoundedJitterFactor: 0.25},
		{"billing.orderplaced", "boom"}: {MaxRetries: 5, Backoff: retrypolicy.Exponential, BaseDelay: 10 * time.Second, MaxDelay: 5 * time.Minute,
			Jitter: retrypolicy.JitterBounded, BoundedJitterFactor: 0.4},
		{"Billing.Refund", "boom"}: {MaxRetries: 0, Backoff: retrypolicy.Fixed, BaseDelay: time.Minute, Jitter: retrypolicy.JitterNone, BoundedJitterFactor: 0.25},
		{"Billing.Refund", "read TIMEOUT"}: {MaxRetries: 10, Backoff: retrypolicy.Linear, BaseDelay: 30 * time.Second, MaxDelay: 10 * time.Minute,
			Jitter: retrypolicy.JitterNone, BoundedJitterFactor: 0.25},
		{"Other", "read timeout"}: {MaxRetries: 3, Backoff: retrypolicy.Fixed, BaseDelay: time.Minute, Jitter: retrypolicy.JitterNone, BoundedJitterFactor: 0.25},
	}
	for in, w := range want {
		got, ok := s.For(in[0], in[1], "BillingEndpoint")
		if !ok || got != w {
			t.Errorf("For(%q, %q) = %+v, %v; want %+v", in[0], in[1], got, ok, w)
		}
	}
}

func TestRetryPolicyWarnsWithoutCap(t *testing.T) {
	c, err := load(t, map[string]string{KeyRetryPolicyDefaultMaxRetries: "3", KeyRetryPolicyDefaultBackoff: "Exponential"})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], KeyRetryPolicyDefaultMaxDelay) {
		t.Fatalf("warnings = %q", c.Warnings)
	}
}

func TestRetryPolicyProblems(t *testing.T) {
	et := func(i int, field string) string {
		return IndexedKey("NimBus__RetryPolicies__EventTypes__{n}__"+field, i)
	}
	rl := func(i int, field string) string {
		return IndexedKey("NimBus__RetryPolicies__ExceptionRules__{n}__"+field, i)
	}
	def := map[string]string{KeyRetryPolicyDefaultMaxRetries: "3"}
	with := func(m map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range def {
			out[k] = v
		}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	cases := []struct {
		name string
		set  map[string]string
		want []string // each must occur in one problem
	}{
		{"max retries not a number", map[string]string{KeyRetryPolicyDefaultMaxRetries: "three"}, []string{KeyRetryPolicyDefaultMaxRetries + `="three"`, "0 to 100"}},
		{"max retries negative", map[string]string{KeyRetryPolicyDefaultMaxRetries: "-1"}, []string{KeyRetryPolicyDefaultMaxRetries}},
		{"max retries above 100", map[string]string{KeyRetryPolicyDefaultMaxRetries: "101"}, []string{KeyRetryPolicyDefaultMaxRetries}},
		{"max retries overflow", map[string]string{KeyRetryPolicyDefaultMaxRetries: "99999999999999999999"}, []string{KeyRetryPolicyDefaultMaxRetries}},
		{"field without MaxRetries", map[string]string{KeyRetryPolicyDefaultBackoff: "Fixed"}, []string{KeyRetryPolicyDefaultBackoff + " is set but " + KeyRetryPolicyDefaultMaxRetries}},
		{"unknown backoff", with(map[string]string{KeyRetryPolicyDefaultBackoff: "Quadratic"}), []string{KeyRetryPolicyDefaultBackoff, "Quadratic"}},
		{"numeric backoff", with(map[string]string{KeyRetryPolicyDefaultBackoff: "2"}), []string{KeyRetryPolicyDefaultBackoff}},
		{"unknown jitter", with(map[string]string{KeyRetryPolicyDefaultJitter: "Half"}), []string{KeyRetryPolicyDefaultJitter, "Half"}},
		{"bad base delay", with(map[string]string{KeyRetryPolicyDefaultBaseDelay: "soon"}), []string{KeyRetryPolicyDefaultBaseDelay}},
		{"negative base delay", with(map[string]string{KeyRetryPolicyDefaultBaseDelay: "-00:00:01"}), []string{KeyRetryPolicyDefaultBaseDelay}},
		{"base delay above 14 days", with(map[string]string{KeyRetryPolicyDefaultBaseDelay: "14.00:00:01"}), []string{KeyRetryPolicyDefaultBaseDelay, "out of range"}},
		{"base delay overflow", with(map[string]string{KeyRetryPolicyDefaultBaseDelay: "99999999.00:00:00"}), []string{KeyRetryPolicyDefaultBaseDelay}},
		{"max delay above 14 days", with(map[string]string{KeyRetryPolicyDefaultMaxDelay: "15"}), []string{KeyRetryPolicyDefaultMaxDelay}},
		{"max delay below base", with(map[string]string{KeyRetryPolicyDefaultBaseDelay: "00:01:00", KeyRetryPolicyDefaultMaxDelay: "00:00:30"}), []string{KeyRetryPolicyDefaultMaxDelay + " (00:00:30) must not be shorter than " + KeyRetryPolicyDefaultBaseDelay}},
		{"max delay zero below default base", with(map[string]string{KeyRetryPolicyDefaultMaxDelay: "0"}), []string{KeyRetryPolicyDefaultMaxDelay}},
		{"factor not a number", with(map[string]string{KeyRetryPolicyDefaultBoundedJitterFactor: "a quarter"}), []string{KeyRetryPolicyDefaultBoundedJitterFactor}},
		{"factor negative", with(map[string]string{KeyRetryPolicyDefaultBoundedJitterFactor: "-0.01"}), []string{KeyRetryPolicyDefaultBoundedJitterFactor}},
		{"factor NaN", with(map[string]string{KeyRetryPolicyDefaultBoundedJitterFactor: "NaN"}), []string{KeyRetryPolicyDefaultBoundedJitterFactor}},
		{"factor infinite", with(map[string]string{KeyRetryPolicyDefaultBoundedJitterFactor: "+Inf"}), []string{KeyRetryPolicyDefaultBoundedJitterFactor}},
		{"factor above 10", with(map[string]string{KeyRetryPolicyDefaultBoundedJitterFactor: "10.5"}), []string{KeyRetryPolicyDefaultBoundedJitterFactor}},
		{"event type without id", map[string]string{et(0, "MaxRetries"): "2"}, []string{et(0, "EventTypeId") + " is required"}},
		{"event type without MaxRetries", map[string]string{et(0, "EventTypeId"): "A"}, []string{et(0, "EventTypeId") + " is set but " + et(0, "MaxRetries")}},
		{"event type id too long", map[string]string{et(0, "EventTypeId"): strings.Repeat("x", 261), et(0, "MaxRetries"): "1"}, []string{et(0, "EventTypeId"), "261 UTF-16"}},
		{"duplicate event type", map[string]string{et(0, "EventTypeId"): "A.B", et(0, "MaxRetries"): "1", et(1, "EventTypeId"): "a.b", et(1, "MaxRetries"): "2"},
			[]string{et(1, "EventTypeId") + `="a.b" repeats ` + et(0, "EventTypeId")}},
		{"gap in event types", map[string]string{et(0, "EventTypeId"): "A", et(0, "MaxRetries"): "1", et(2, "EventTypeId"): "C", et(2, "MaxRetries"): "1"},
			[]string{et(2, "EventTypeId") + " is set but index 1 is not"}},
		{"event types start at 1", map[string]string{et(1, "EventTypeId"): "A", et(1, "MaxRetries"): "1"}, []string{"index 0 is not"}},
		{"event type field invalid", map[string]string{et(0, "EventTypeId"): "A", et(0, "MaxRetries"): "1", et(0, "Jitter"): "Lots"}, []string{et(0, "Jitter")}},
		{"too many event types", func() map[string]string {
			m := map[string]string{}
			for i := 0; i <= MaxRetryPolicyEventTypes; i++ {
				m[et(i, "EventTypeId")] = "T" + strings.Repeat("x", i)
				m[et(i, "MaxRetries")] = "1"
			}
			return m
		}(), []string{et(100, "EventTypeId") + " is set: at most 100"}},
		{"rule without text", map[string]string{rl(0, "MaxRetries"): "1"}, []string{rl(0, "ExceptionContains") + " is required"}},
		{"rule without MaxRetries", map[string]string{rl(0, "ExceptionContains"): "timeout"}, []string{rl(0, "ExceptionContains") + " is set but " + rl(0, "MaxRetries")}},
		{"rule text too long", map[string]string{rl(0, "ExceptionContains"): strings.Repeat("é", 1025), rl(0, "MaxRetries"): "1"}, []string{rl(0, "ExceptionContains"), "1025 UTF-16"}},
		{"rule empty type entry", map[string]string{rl(0, "ExceptionContains"): "t", rl(0, "MaxRetries"): "1", rl(0, "EventTypeIds"): "A,,B"}, []string{rl(0, "EventTypeIds"), "empty entry"}},
		{"rule gap", map[string]string{rl(0, "ExceptionContains"): "t", rl(0, "MaxRetries"): "1", rl(3, "ExceptionContains"): "u", rl(3, "MaxRetries"): "1"}, []string{rl(3, "ExceptionContains") + " is set but index 1 is not"}},
		{"too many rules", func() map[string]string {
			m := map[string]string{}
			for i := 0; i <= MaxRetryPolicyExceptionRules; i++ {
				m[rl(i, "ExceptionContains")] = "t"
				m[rl(i, "MaxRetries")] = "1"
			}
			return m
		}(), []string{rl(20, "ExceptionContains") + " is set: at most 20"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := load(t, c.set)
			ps := problems(t, err)
			if len(ps) == 0 {
				t.Fatal("loaded without a problem")
			}
			for _, w := range c.want {
				found := false
				for _, p := range ps {
					found = found || strings.Contains(p, w)
				}
				if !found {
					t.Errorf("no problem mentions %q:\n%s", w, strings.Join(ps, "\n"))
				}
			}
		})
	}
}

// Every invalid field of every policy is reported at once.
func TestRetryPolicyProblemsAllListed(t *testing.T) {
	_, err := load(t, map[string]string{
		KeyRetryPolicyDefaultMaxRetries:                               "-2",
		KeyRetryPolicyDefaultBackoff:                                  "Sometimes",
		KeyRetryPolicyDefaultBaseDelay:                                "never",
		KeyRetryPolicyDefaultJitter:                                   "Wobbly",
		KeyRetryPolicyDefaultBoundedJitterFactor:                      "11",
		"NimBus__RetryPolicies__EventTypes__0__EventTypeId":           "A",
		"NimBus__RetryPolicies__EventTypes__0__MaxRetries":            "1000",
		"NimBus__RetryPolicies__EventTypes__1__EventTypeId":           "a",
		"NimBus__RetryPolicies__EventTypes__1__MaxRetries":            "1",
		"NimBus__RetryPolicies__EventTypes__1__MaxDelay":              "99",
		"NimBus__RetryPolicies__ExceptionRules__0__ExceptionContains": "x",
		"NimBus__RetryPolicies__ExceptionRules__0__MaxRetries":        "1",
		"NimBus__RetryPolicies__ExceptionRules__0__Backoff":           "Never",
		KeyPort: "0",
	})
	ps := problems(t, err)
	for _, want := range []string{
		KeyRetryPolicyDefaultMaxRetries, KeyRetryPolicyDefaultBackoff, KeyRetryPolicyDefaultBaseDelay, KeyRetryPolicyDefaultJitter,
		KeyRetryPolicyDefaultBoundedJitterFactor, "EventTypes__0__MaxRetries", "EventTypes__1__EventTypeId", "EventTypes__1__MaxDelay",
		"ExceptionRules__0__Backoff", KeyPort,
	} {
		found := false
		for _, p := range ps {
			found = found || strings.Contains(p, want)
		}
		if !found {
			t.Errorf("no problem mentions %s:\n%s", want, strings.Join(ps, "\n"))
		}
	}
	if len(ps) < 10 {
		t.Errorf("%d problems, want at least 10: %q", len(ps), ps)
	}
}

// A problem quotes at most about 100 characters of the bad value.
func TestRetryPolicyProblemsBoundTheValue(t *testing.T) {
	long := strings.Repeat("z", 5000)
	_, err := load(t, map[string]string{KeyRetryPolicyDefaultMaxRetries: "1", KeyRetryPolicyDefaultBackoff: long})
	for _, p := range problems(t, err) {
		if len(p) > 400 {
			t.Errorf("problem is %d bytes long: %.120s…", len(p), p)
		}
	}
}

func TestIndexedKey(t *testing.T) {
	if got := IndexedKey(KeyRetryPolicyEventTypeID, 12); got != "NimBus__RetryPolicies__EventTypes__12__EventTypeId" {
		t.Errorf("IndexedKey = %q", got)
	}
	for _, s := range Settings {
		name := s.Name
		if s.Indexed {
			if !strings.Contains(name, IndexPlaceholder) {
				t.Errorf("indexed setting %s has no %s", name, IndexPlaceholder)
			}
			name = IndexedKey(name, 0)
		}
		for _, r := range name {
			if !(r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') && !strings.HasPrefix(name, "AzureWebJobs.") {
				t.Errorf("setting %s is not a valid Linux environment variable name", name)
				break
			}
		}
	}
}
