package config

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

func environ(set map[string]string) []string {
	m := base()
	m[KeySessionStore] = "InMemory"
	for k, v := range set {
		m[k] = v
	}
	var env []string
	for k, v := range m {
		env = append(env, k+"="+v)
	}
	return append(env, "PATH=/usr/bin", "HOME=/root")
}

func TestSettingNamesAreCheckedAgainstWhatIsRead(t *testing.T) {
	for _, c := range []struct {
		name string
		set  map[string]string
		want []string // parts of the one problem; none when valid
	}{
		{"every known name", map[string]string{KeyRetryPolicyDefaultMaxRetries: "3", IndexedKey(KeyRetryPolicyEventTypeID, 0): "OrderPlaced",
			IndexedKey(KeyRetryPolicyEventTypeMaxRetries, 0): "2", KeyCloudEventsPrefixes: "ce-"}, nil},
		{"misspelt field", map[string]string{"NimBus__RetryPolicies__Default__MaxRetires": "3"},
			[]string{`"NimBus__RetryPolicies__Default__MaxRetires" is not a setting this handler reads; did you mean NimBus__RetryPolicies__Default__MaxRetries?`}},
		{"misspelt indexed field", map[string]string{"NimBus__RetryPolicies__EventTypes__0__MaxRetires": "3"},
			[]string{"did you mean NimBus__RetryPolicies__EventTypes__{n}__MaxRetries?"}},
		{"other case", map[string]string{"nimbus__retrypolicies__default__maxretries": "3"},
			[]string{`"nimbus__retrypolicies__default__maxretries" is not read: setting names are matched exactly; write NimBus__RetryPolicies__Default__MaxRetries`}},
		{"other case, upper", map[string]string{"NIMBUS__ENDPOINT": "x"}, []string{"write NimBus__Endpoint"}},
		{"indexed, other case", map[string]string{"NimBus__RetryPolicies__EventTypes__0__eventtypeid": "A"},
			[]string{"write NimBus__RetryPolicies__EventTypes__0__EventTypeId"}},
		{"leading zeros", map[string]string{"NimBus__RetryPolicies__EventTypes__007__EventTypeId": "A"},
			[]string{"without leading zeros (NimBus__RetryPolicies__EventTypes__7__EventTypeId)"}},
		{"huge index", map[string]string{"NimBus__RetryPolicies__ExceptionRules__99999999999999999999__ExceptionContains": "x"},
			[]string{"at most 20 entries (indexes 0 to 19)"}},
		{"unknown section", map[string]string{"NimBus__Inbx__Enabled": "true"}, []string{"did you mean NimBus__Inbox__Enabled?"}},
		{"far from anything", map[string]string{"NimBus__Something__Else": "1"}, []string{`"NimBus__Something__Else" is not a setting this handler reads`}},
		{"other names are not checked", map[string]string{"ServiceBusConnection__credential": "managedidentity", "MY_OWN_SETTING": "1", "NimBusX": "1"}, nil},
		{"endpoint with a newline", map[string]string{KeyEndpoint: "Billing\nEndpoint"}, []string{`NimBus__Endpoint="Billing\nEndpoint" holds a control character`}},
		{"endpoint with a control character", map[string]string{KeyEndpoint: "Billing\x1bEndpoint"}, []string{"NimBus__Endpoint=", "control character"}},
		{"type map with a repeated key", map[string]string{KeyCloudEventsTypeMap: `{"a.b":"X","a.b":"Y"}`}, []string{`NimBus__CloudEvents__TypeMap maps "a.b" twice`}},
		{"prefixes of nothing", map[string]string{KeyCloudEventsPrefixes: ","}, []string{"NimBus__CloudEvents__Prefixes=\",\" has an empty prefix"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := LoadEnviron(environ(c.set))
			got := problems(t, err)
			if len(c.want) == 0 {
				if len(got) != 0 {
					t.Fatalf("problems = %q", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("problems = %q, want one", got)
			}
			for _, w := range c.want {
				if !strings.Contains(got[0], w) {
					t.Fatalf("problem = %q, want it to contain %q", got[0], w)
				}
			}
		})
	}
}

// Name problems join the value problems in the one list.
func TestNameProblemsJoinTheOthers(t *testing.T) {
	_, err := LoadEnviron(environ(map[string]string{KeyLogLevel: "loud", "NimBus__LogLevle": "debug"}))
	if got := problems(t, err); len(got) != 2 || !strings.Contains(got[0], KeyLogLevel) || !strings.Contains(got[1], "did you mean NimBus__LogLevel?") {
		t.Fatalf("problems = %q", got)
	}
}

// Every NimBus__ name the repository's documents and samples use is a
// setting that is read.
func TestDocumentedNamesAreRead(t *testing.T) {
	for _, f := range []string{"../../README.md", "../../local.settings.sample.json"} {
		b, err := readFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, m := range documentedName.FindAllString(b, -1) {
			if !strings.Contains(m, IndexPlaceholder) && !strings.HasSuffix(m, "__") {
				names = append(names, m)
			}
		}
		if len(names) == 0 {
			t.Fatalf("%s names no setting", f)
		}
		if bad := checkNames(names, nil); len(bad) != 0 {
			t.Errorf("%s: %q", f, bad)
		}
	}
}

func TestErrorListsABoundedNumberOfProblems(t *testing.T) {
	e := &Error{Problems: make([]string, 1000)}
	if n := strings.Count(e.Error(), "\n"); n != maxListed+1 || !strings.Contains(e.Error(), "… and 950 more problems") {
		t.Fatalf("%d lines:\n%s", n, e.Error()[:200])
	}
}

var documentedName = regexp.MustCompile(`NimBus__[A-Za-z0-9_{}]+`)

func readFile(name string) (string, error) {
	b, err := os.ReadFile(name)
	return string(b), err
}
