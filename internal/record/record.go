// Package record holds the stored form of a response that the SQL stores
// share: the status code, the replayed headers as a JSON object of lists,
// and the body, never NULL.
package record

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/idemkit/idem/idemstore"
)

// EncodeHeader returns the stored form of a response's headers: the bytes
// that encoding/json writes for h, which stores compare and decode. Headers
// whose names and values are printable ASCII that JSON writes as it is, as
// replayed headers almost always are, are written here, without
// encoding/json's reflection; any other goes to encoding/json.
func EncodeHeader(h http.Header) ([]byte, error) {
	if h == nil || !plainHeader(h) {
		b, err := json.Marshal(h)
		if err != nil {
			return nil, fmt.Errorf("encode headers: %w", err)
		}
		return b, nil
	}
	var names [8]string
	sorted := names[:0]
	n := len("{}")
	for name, values := range h {
		sorted = append(sorted, name)
		n += len(name) + len(`"":[],`)
		for _, v := range values {
			n += len(v) + len(`"",`)
		}
	}
	slices.Sort(sorted)
	out := make([]byte, 0, n)
	out = append(out, '{')
	for i, name := range sorted {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(append(append(out, '"'), name...), '"', ':')
		values := h[name]
		if values == nil {
			out = append(out, "null"...)
			continue
		}
		out = append(out, '[')
		for j, v := range values {
			if j > 0 {
				out = append(out, ',')
			}
			out = append(append(append(out, '"'), v...), '"')
		}
		out = append(out, ']')
	}
	return append(out, '}'), nil
}

// plainHeader reports whether every name and value of h is printable ASCII
// that encoding/json writes as it is (see asIs).
func plainHeader(h http.Header) bool {
	for name, values := range h {
		if !plain(name) {
			return false
		}
		for _, v := range values {
			if !plain(v) {
				return false
			}
		}
	}
	return true
}

func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if !asIs[s[i]] {
			return false
		}
	}
	return true
}

// asIs marks the bytes that encoding/json writes in a string as they are:
// printable ASCII but '"', '\\' and the characters it escapes for HTML.
var asIs = func() (t [256]bool) {
	for c := 0x20; c <= 0x7e; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// EncodeBody returns the stored form of a response's body: an empty body
// is stored as zero bytes, not NULL.
func EncodeBody(body []byte) []byte {
	if body == nil {
		return []byte{}
	}
	return body
}

// DecodeResponse returns the response stored as status, header (the
// output of EncodeHeader; empty means no headers) and body. The response
// always has a non-nil Header and Body.
func DecodeResponse(status int, header, body []byte) (*idemstore.Response, error) {
	h := http.Header{}
	if len(header) > 0 {
		if err := json.Unmarshal(header, &h); err != nil {
			return nil, fmt.Errorf("decode stored headers: %w", err)
		}
	}
	return &idemstore.Response{StatusCode: status, Header: h, Body: EncodeBody(body)}, nil
}
