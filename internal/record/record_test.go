package record

import (
	"bytes"
	"encoding/json"
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

// TestEncodeHeaderIsEncodingJSON: the stored form is the bytes
// encoding/json writes, for plain headers (written without it) and for
// any other (left to it).
func TestEncodeHeaderIsEncodingJSON(t *testing.T) {
	t.Parallel()
	headers := []http.Header{
		nil,
		{},
		{"Content-Type": {"application/json"}},
		{"Content-Type": {"application/json"}, "Location": {"/v1/payments/pay_1"}, "X-Multi": {"one", "two", ""}},
		{"X-Nil": nil, "X-Empty": {}, "A": {"b"}},
		{"X-Html": {"<a href='x'>&amp;</a>"}},
		{"X-Quote": {`say "hi"\now`}},
		{"X-Control": {"a\tb\x01"}},
		{"X-Unicode": {"café ☕ \u2028"}},
		{"X-Bad-Utf8": {"\xff\xfe"}},
		{"Z": {"1"}, "Y": {"2"}, "X": {"3"}, "W": {"4"}, "V": {"5"}, "U": {"6"}, "T": {"7"}, "S": {"8"}, "R": {"9"}, "Q": {"10"}},
	}
	for _, h := range headers {
		want, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		got, err := EncodeHeader(h)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("EncodeHeader(%q) = %s, %v; want %s", h, got, err, want)
		}
	}
}

// FuzzEncodeHeader checks EncodeHeader against encoding/json on any name
// and values.
func FuzzEncodeHeader(f *testing.F) {
	f.Add("Content-Type", "application/json", "x")
	f.Add("X-A", "<>&", "\x00")
	f.Fuzz(func(t *testing.T, name, v1, v2 string) {
		h := http.Header{name: {v1, v2}, "Location": {v2}}
		want, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := EncodeHeader(h); err != nil || !bytes.Equal(got, want) {
			t.Errorf("EncodeHeader(%q) = %s, %v; want %s", h, got, err, want)
		}
	})
}
