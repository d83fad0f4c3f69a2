// Package record holds the stored form of a response that the SQL stores
// share: the status code, the replayed headers as a JSON object of lists,
// and the body, never NULL.
package record

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/idemkit/idem"
)

// EncodeHeader returns the stored form of a response's headers.
func EncodeHeader(h http.Header) ([]byte, error) {
	b, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encode headers: %w", err)
	}
	return b, nil
}

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
func DecodeResponse(status int, header, body []byte) (*idem.Response, error) {
	h := http.Header{}
	if len(header) > 0 {
		if err := json.Unmarshal(header, &h); err != nil {
			return nil, fmt.Errorf("decode stored headers: %w", err)
		}
	}
	return &idem.Response{StatusCode: status, Header: h, Body: EncodeBody(body)}, nil
}
