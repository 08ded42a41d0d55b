package minihost

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
)

// DefaultHostVersion is the host version the invoker announces.
const DefaultHostVersion = "4.1052.300.26370"

// maxResponse bounds how much of a handler response is read.
const maxResponse = 4 << 20

// Invoker POSTs invocation envelopes to a custom handler the way the host
// does. The zero value is not usable: set BaseURL.
type Invoker struct {
	// BaseURL is the handler's address, e.g. http://127.0.0.1:PORT.
	BaseURL string
	// Client is the HTTP client (default http.DefaultClient).
	Client *http.Client
	// HostVersion goes into User-Agent and X-Azure-Functions-HostVersion
	// (default DefaultHostVersion).
	HostVersion string
}

// Result is a handler's answer to one invocation.
type Result struct {
	StatusCode   int
	InvocationID string
	Body         []byte
	// Succeeded is the host's verdict: a 2xx status, a JSON media type
	// (application/json or text/json) and a non-empty JSON body. Anything
	// else fails the invocation (the host abandons the message; an empty 2xx
	// body would even hang it until functionTimeout).
	Succeeded bool
}

// Invoke POSTs envelope to BaseURL/<function> with the host's headers
// (User-Agent Azure-Functions-Host/<version>, X-Azure-Functions-HostVersion,
// X-Azure-Functions-InvocationId, Content-Type application/json;
// charset=utf-8) and a chunked body, as the host's ObjectContent sends it.
// A transport failure is an error; any HTTP answer is a Result.
func (iv *Invoker) Invoke(ctx context.Context, function string, envelope []byte) (*Result, error) {
	version := iv.HostVersion
	if version == "" {
		version = DefaultHostVersion
	}
	client := iv.Client
	if client == nil {
		client = http.DefaultClient
	}
	// Hiding the length makes net/http send the body chunked.
	body := struct{ io.Reader }{bytes.NewReader(envelope)}
	url := strings.TrimRight(iv.BaseURL, "/") + "/" + function
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, body)
	if err != nil {
		return nil, fmt.Errorf("minihost: invocation request for %s: %w", function, err)
	}
	req.ContentLength = -1
	id := NewGUID()
	req.Header.Set("User-Agent", "Azure-Functions-Host/"+version)
	req.Header.Set("X-Azure-Functions-HostVersion", version)
	req.Header.Set("X-Azure-Functions-InvocationId", id)
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("minihost: invoking %s: %w", function, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return nil, fmt.Errorf("minihost: reading the %s response: %w", function, err)
	}
	r := &Result{StatusCode: resp.StatusCode, InvocationID: id, Body: b}
	r.Succeeded = resp.StatusCode/100 == 2 && isJSONMedia(resp.Header.Get("Content-Type")) && len(bytes.TrimSpace(b)) > 0 && json.Valid(b)
	return r, nil
}

func isJSONMedia(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/json" || mt == "text/json")
}
