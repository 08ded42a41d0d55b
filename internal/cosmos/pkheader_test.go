package cosmos_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/nimbus-go/functions-subscriber/internal/cosmos"
	"github.com/nimbus-go/functions-subscriber/internal/cosmos/cosmostest"
)

// hardPartitionKeys are partition key values azcosmos v1.5.0 writes into
// the header with Go escapes: characters beyond the Basic Multilingual
// Plane (an emoji, CJK Extension B), every control character and DEL; and
// some it writes right, which must stay right.
func hardPartitionKeys() map[string]string {
	keys := map[string]string{
		"emoji":             "customer-\U0001F642",
		"cjk-ext-b":         "\U00020000\U0002A6A5",
		"mixed":             "a\"b\\c/é\u2028\U0001F600\x00\x7f",
		"bmp":               "Ünïcødé 日本",
		"only-emoji":        "\U0001F4B8",
		"quote-backslash":   `"\`,
		"html":              "<a&b>",
		"del":               "\x7f",
		"del-in-text":       "a\x7fb",
		"max-rune":          "\U0010FFFF",
		"surrogate-pair-lo": "\U00010000",
	}
	for c := rune(0); c < 0x20; c++ {
		keys[fmt.Sprintf("control-%02x", c)] = "k" + string(c) + "k"
	}
	return keys
}

// headerRecorder answers every request as a single-region account whose
// documents all exist, and keeps the partition key headers it was sent.
type headerRecorder struct {
	mu      sync.Mutex
	headers []string
}

func (h *headerRecorder) Do(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet && req.URL.Path == "/" {
		return cosmostest.Synth(req, 200, nil, fakeAccountJSON), nil
	}
	h.mu.Lock()
	h.headers = append(h.headers, req.Header.Values(cosmos.HeaderPartitionKey)...)
	h.mu.Unlock()
	return cosmostest.Synth(req, 200, nil, `{"id":"doc"}`), nil
}

func (h *headerRecorder) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.headers
	h.headers = nil
	return out
}

// Every partition key header the account's client sends is printable
// ASCII and JSON, and decodes to the value the caller gave: strings (any
// character), numbers, booleans and null, one component or several.
func TestPartitionKeyHeaderIsASCIIJSON(t *testing.T) {
	t.Parallel()
	rec := &headerRecorder{}
	acct, err := cosmos.NewAccount(cosmos.Config{Endpoint: "http://127.0.0.1:1/", Key: testenvKey, Retry: cosmostest.NoRetry, ClientOptions: cosmostest.ClientOptions(rec)})
	if err != nil {
		t.Fatal(err)
	}
	defer acct.Close()
	c, err := acct.Client().NewContainer("d", "c")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	check := func(name string, pk azcosmos.PartitionKey, want []any) {
		t.Helper()
		if _, err := c.ReadItem(ctx, pk, "doc", nil); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := rec.take()
		if len(got) != 1 {
			t.Fatalf("%s: %d partition key headers sent, want 1", name, len(got))
		}
		h := got[0]
		for i := 0; i < len(h); i++ {
			if h[i] < 0x20 || h[i] > 0x7e {
				t.Fatalf("%s: header %q holds byte %#x, not printable ASCII", name, h, h[i])
			}
		}
		var values []any
		if err := json.Unmarshal([]byte(h), &values); err != nil {
			t.Fatalf("%s: header %q is not JSON: %v", name, h, err)
		}
		if len(values) != len(want) {
			t.Fatalf("%s: header %q decodes to %d values, want %d", name, h, len(values), len(want))
		}
		for i := range want {
			if values[i] != want[i] {
				t.Errorf("%s: header %q component %d decodes to %#v, want %#v", name, h, i, values[i], want[i])
			}
		}
	}
	for name, v := range hardPartitionKeys() {
		check(name, azcosmos.NewPartitionKeyString(v), []any{v})
	}
	check("several components", azcosmos.NewPartitionKeyString("\U0001F642").AppendNumber(1.5).AppendBool(true).AppendNull().AppendString("\x00, \"]"),
		[]any{"\U0001F642", 1.5, true, nil, "\x00, \"]"})
	check("number", azcosmos.NewPartitionKeyNumber(-12345678.25), []any{-12345678.25})

	// A value that is not UTF-8 names the partition encoding/json writes
	// into a document holding it: its bad bytes become U+FFFD.
	bad := "a\xffb"
	doc, _ := json.Marshal(map[string]string{"pk": bad})
	var inDoc map[string]string
	_ = json.Unmarshal(doc, &inDoc)
	if !utf8.ValidString(inDoc["pk"]) {
		t.Fatal("encoding/json kept invalid UTF-8")
	}
	check("invalid UTF-8", azcosmos.NewPartitionKeyString(bad), []any{inDoc["pk"]})
}

// The Go SDK's own client (without the account's policy) sends what Cosmos
// DB refuses, and the local stand-in refuses it as the service does: 400.
// Through the account, every one of those values is a partition: created,
// point-read, queried, patched, read and written in a transactional batch,
// and deleted.
func TestPartitionKeyValuesRoundTrip(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Strong")
	ctx := context.Background()
	c, err := e.Account.Container(cosmos.ContainerOptions{Spec: cosmos.ContainerSpec{
		DatabaseID: e.DB, ContainerID: "pk", PartitionKeyPath: "/pk", AutoCreate: true,
	}, AllowRelaxedConsistency: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	plain := e.Srv.Client(t) // azcosmos as it is
	plainC, err := plain.NewContainer(e.DB, "pk")
	if err != nil {
		t.Fatal(err)
	}
	goEscaped := 0
	for name, v := range hardPartitionKeys() {
		t.Run(name, func(t *testing.T) {
			pk := azcosmos.NewPartitionKeyString(v)
			doc, _ := json.Marshal(map[string]any{"id": "doc", "pk": v, "n": 1})
			if _, err := c.Client().CreateItem(ctx, pk, doc, nil); err != nil {
				t.Fatalf("create: %v", err)
			}
			resp, err := c.Client().ReadItem(ctx, pk, "doc", nil)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			var got map[string]any
			if err := json.Unmarshal(resp.Value, &got); err != nil || got["pk"] != v {
				t.Fatalf("read back pk %#v (%v), want %#v", got["pk"], err, v)
			}
			var patch azcosmos.PatchOperations
			patch.AppendIncrement("/n", 2)
			if _, err := c.Client().PatchItem(ctx, pk, "doc", patch, nil); err != nil {
				t.Fatalf("patch: %v", err)
			}
			b := c.Client().NewTransactionalBatch(pk)
			b.ReadItem("doc", nil)
			other, _ := json.Marshal(map[string]any{"id": "other", "pk": v})
			b.CreateItem(other, nil)
			br, err := c.Client().ExecuteTransactionalBatch(ctx, b, nil)
			if err != nil || !br.Success {
				t.Fatalf("batch: %v (success %v)", err, br.Success)
			}
			pager := c.Client().NewQueryItemsPager("SELECT * FROM c WHERE c.pk = @pk", pk, &azcosmos.QueryOptions{
				QueryParameters: []azcosmos.QueryParameter{{Name: "@pk", Value: v}},
			})
			n := 0
			for pager.More() {
				page, err := pager.NextPage(ctx)
				if err != nil {
					t.Fatalf("query: %v", err)
				}
				n += len(page.Items)
			}
			if n != 2 {
				t.Fatalf("query found %d documents in the partition, want 2", n)
			}
			if _, err := c.Client().DeleteItem(ctx, pk, "other", nil); err != nil {
				t.Fatalf("delete: %v", err)
			}
			_, perr := plainC.ReadItem(ctx, pk, "doc", nil)
			switch {
			case perr == nil:
				// azcosmos writes this value as JSON already (ASCII
				// printable but for " and \, or a BMP character).
			case cosmos.StatusCode(perr) == http.StatusBadRequest:
				goEscaped++
			default:
				t.Errorf("the plain SDK's read: %v, want success or 400", perr)
			}
		})
	}
	// Every value beyond the Basic Multilingual Plane (5), DEL (2), and 27
	// of the control characters (Go and JSON spell \b, \t, \n, \f and \r
	// alike).
	if want := 8 + 27; goEscaped != want {
		t.Errorf("the stand-in refused %d of the plain SDK's headers, want %d", goEscaped, want)
	}
	t.Logf("the plain SDK's header was refused (400) for %d of %d values", goEscaped, len(hardPartitionKeys()))
}

// Header bytes beyond ASCII are refused by the stand-in's front end, as
// by the service's: 400, no body, the connection closed.
func TestStandInRefusesRawNonASCIIHeader(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Strong")
	addr := strings.TrimSuffix(strings.TrimPrefix(e.Srv.Endpoint, "http://"), "/")
	for _, v := range []string{`["café"]`, "[\"\U0001F642\"]"} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = fmt.Fprintf(conn, "GET /dbs/%s/colls/pk/docs/doc HTTP/1.1\r\nHost: %s\r\nx-ms-documentdb-partitionkey: %s\r\n\r\n", e.DB, addr, v)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		_ = conn.Close()
		if resp.StatusCode != http.StatusBadRequest || !resp.Close {
			t.Errorf("header %q answered %d (close %v), want 400 and the connection closed", v, resp.StatusCode, resp.Close)
		}
	}
}
