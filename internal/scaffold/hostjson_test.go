package scaffold

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The host reads host.json and function.json with Newtonsoft.Json, which
// takes comments and trailing commas; strings keep whatever they hold.
func TestHostJSONText(t *testing.T) {
	for in, want := range map[string]string{
		"\xef\xbb\xbf{\"a\": 1}": `{"a":1}`,
		"// first\n{\"a\": 1, // one\n\"b\": [1, 2,], /* two\n lines */ \"c\": {\"d\": true,},\n}\n// last": `{"a":1,"b":[1,2],"c":{"d":true}}`,
		`{"url": "http://x//y", "c": "/* no */", "t": ",}", "q": "a\"//b"}`:                                 `{"c":"/* no */","q":"a\"//b","t":",}","url":"http://x//y"}`,
		"{\"a\": [ , ]}":  "",
		"{\"a\": 1 /* x ": "",
		"{\"a\": 1,,}":    "",
		"{\"a\": / 1}":    "",
		"[1,\n// c\n]":    `[1]`,
	} {
		var v any
		err := decodeHostJSON([]byte(in), &v)
		if want == "" {
			if err == nil {
				t.Errorf("%q: accepted as %v, want an error", in, v)
			}
			continue
		}
		got, _ := json.Marshal(v)
		if err != nil || string(got) != want {
			t.Errorf("%q: %s, %v; want %s", in, got, err, want)
		}
	}
	// Offsets in errors stay those of the file.
	in := "{\n  // a comment\n  \"a\": 1\n  \"b\": 2\n}"
	var v any
	err := decodeHostJSON([]byte(in), &v)
	var plain any
	werr := json.Unmarshal([]byte(strings.Replace(in, "// a comment", "            ", 1)), &plain)
	if err == nil || werr == nil || !strings.Contains(err.Error(), werr.Error()) {
		t.Errorf("error %v, want the one at the same offset: %v", err, werr)
	}
}

// check and package accept host.json and function.json with the comments
// and trailing commas the host accepts, and read them the same as without.
func TestCheckAcceptsHostJSONWithComments(t *testing.T) {
	dir := initModule(t)
	host := filepath.Join(dir, "host.json")
	b := readFile(t, host)
	commented := "// The Functions host of the Orders endpoint.\n" + strings.Replace(string(b), `"version": "2.0",`, `"version": "2.0", /* the schema */`, 1)
	commented = strings.Replace(commented, `"maxRetries": 3`, `"maxRetries": 3, // the SDK's`, 1)
	if commented == string(b) {
		t.Fatal("host.json changed nothing")
	}
	if err := os.WriteFile(host, []byte(commented), 0o644); err != nil {
		t.Fatal(err)
	}
	fn := filepath.Join(dir, "functions", "Subscriber", "function.json")
	f := strings.Replace(string(readFile(t, fn)), `"bindings": [`, "// session deliveries\n  \"bindings\": [", 1)
	if err := os.WriteFile(fn, []byte(f), 0o644); err != nil {
		t.Fatal(err)
	}
	if problems := Check(dir, CheckOptions{}); len(problems) != 0 {
		t.Errorf("problems: %q", problems)
	}
	exe, err := executableName(host)
	if err != nil || exe != "handler" {
		t.Errorf("package reads the executable %q, %v", exe, err)
	}
	// A value commented out is missing for the host, and for check.
	broken := strings.Replace(commented, `"autoCompleteMessages": true,`, `// "autoCompleteMessages": false,`, 1)
	broken = strings.Replace(broken, `"maxConcurrentCallsPerSession": 1,`, `/* "maxConcurrentCallsPerSession": 1, */ "maxConcurrentCallsPerSession": 2,`, 1)
	if err := os.WriteFile(host, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	want := []string{`host.json: extensions.serviceBus.maxConcurrentCallsPerSession is 2, want 1`}
	if problems := Check(dir, CheckOptions{}); !reflect.DeepEqual(problems, want) {
		t.Errorf("problems %q, want %q", problems, want)
	}
}
