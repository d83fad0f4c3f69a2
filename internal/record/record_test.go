package record

import (
	"bytes"
	"net/http"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	h := http.Header{"Content-Type": {"application/json"}, "X-Multi": {"one", "two"}}
	enc, err := EncodeHeader(h)
	if err != nil {
		t.Fatalf("EncodeHeader: %v", err)
	}
	resp, err := DecodeResponse(201, enc, EncodeBody(nil))
	if err != nil {
		t.Fatalf("DecodeResponse: %v", err)
	}
	if resp.StatusCode != 201 || resp.Body == nil || len(resp.Body) != 0 ||
		resp.Header.Get("Content-Type") != "application/json" || len(resp.Header.Values("X-Multi")) != 2 {
		t.Errorf("DecodeResponse = %+v", resp)
	}
	if resp, err := DecodeResponse(200, nil, []byte("x")); err != nil || resp.Header == nil || !bytes.Equal(resp.Body, []byte("x")) {
		t.Errorf("DecodeResponse without headers = %+v, %v", resp, err)
	}
	if _, err := DecodeResponse(200, []byte("{"), nil); err == nil {
		t.Error("DecodeResponse accepted broken headers")
	}
}
