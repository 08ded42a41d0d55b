package message

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// parseContentStd is the reference: json.Unmarshal into Content.
func parseContentStd(body []byte) (*Content, error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' || depth(trimmed) > maxContentDepth {
		return nil, ErrInvalidContent
	}
	var c Content
	if err := json.Unmarshal(trimmed, &c); err != nil {
		return nil, ErrInvalidContent
	}
	return &c, nil
}

func checkSameContent(t *testing.T, body []byte) {
	t.Helper()
	got, gotErr := ParseContent(body)
	want, wantErr := parseContentStd(body)
	if (gotErr == nil) != (wantErr == nil) || !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseContent(%q) = %+v, %v; reference %+v, %v", body, got, gotErr, want, wantErr)
	}
}

var contentSeeds = []string{
	`{"EventContent":{"EventTypeId":"OrderPlaced","EventJson":"{\"OrderId\":\"O-1\"}"},"ErrorContent":null}`,
	`{"EventContent":{"EventTypeId":"T","EventJson":null},"ErrorContent":{"ErrorText":"DuplicateDetected","ErrorType":null,"ExceptionStackTrace":null,"ExceptionSource":null}}`,
	`{"eventcontent":{"eventtypeid":"a"},"EventContent":{"EventJson":"b"}}`,
	`{"EventContent":{"EventTypeId":"a"},"EventContent":null}`,
	`{"EventContent":{"EventTypeId":5}}`, `{"EventContent":[]}`, `{"ErrorContent":{"ErrorText":true}}`,
	`{"EventContent":{"EventTypeId":"\u00e9\ud83d\ude00","X":{"y":[1,{"z":null}]}},"Other":1}`,
	`{"EventContent":{"EventTypeId":"\ud800"}}`, "{\"EventContent\":{\"EventTypeId\":\"\xff\"}}",
	`{"EventContent":{}} trailing`, `{"EventContent":{},}`, `{}`, ` {"EventContent":null} `,
	`{"Ev\u0065ntContent":{"EventJson":"k"}}`, "{}\x00", "{\"EventContent\":null}\x00 ", `{"EventContent":{"EventTypeId":"a","EventTypeId":null}}`,
}

func TestParseContentMatchesReference(t *testing.T) {
	for _, s := range contentSeeds {
		checkSameContent(t, []byte(s))
	}
}

func FuzzParseContentMatchesReference(f *testing.F) {
	for _, s := range contentSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkSameContent(t, body) })
}
