package fingerprint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// FuzzEncodedFingerprint checks that the middleware's fingerprint, with its
// field digests encoded in one go, is the reference's, and that the
// digests decoded from the encoding are the reference's too.
func FuzzEncodedFingerprint(f *testing.F) {
	seeds := []struct {
		query, contentType, body, exclude string
	}{
		{"", "application/json", `{"b": 1, "a": [1, 2], "c": {"z": 1, "y": 2}}`, ""},
		{"b=2&a=1", "application/json", `{"a/b": 1, "a~b": 2, "a": 3, "<&>": 4, "é": 5, "\u00e9x": 6, "\ud83d\ude00": 7, "\ufb01": 8}`, "/a"},
		{"", "application/json", `{}`, ""},
		{"", "application/json", `[{"a": 1}]`, ""},
		{"", "application/json", `"text"`, ""},
		{"", "application/json", `{"amount": 1, "client_timestamp": 2}`, "/client_timestamp"},
		{"", "application/json", `{"a": 1, "a": 2}`, ""},
		{"", "application/x-www-form-urlencoded", `b=2&a=1&a=0&c=&d`, ""},
		{"", "application/x-www-form-urlencoded", `a%2Fb=1&a~b=2&%3C%26%3E=3&%C3%A9=4`, "/a~1b"},
		{"", "application/x-www-form-urlencoded", `&`, ""},
		{"", "application/x-www-form-urlencoded", `%FF=1`, ""},
		{"", "text/plain", `amount=1`, ""},
		// Flat bodies (see encodedFlat), short and past maxJoinedTail.
		{"", "application/json", `{"amount":4200,"currency":"usd","customer":"cus_bench"}`, ""},
		{"", "application/json", flatFields(maxFlatFields), ""},
	}
	for _, s := range seeds {
		for _, raw := range []bool{false, true} {
			f.Add(s.query, s.contentType, []byte(s.body), s.exclude, raw)
		}
	}
	f.Fuzz(func(t *testing.T, query, contentType string, body []byte, exclude string, raw bool) {
		p := Params{Method: "POST", Path: "/v1/payments", RawQuery: query, ContentType: contentType, Body: body, Raw: raw}
		if exclude != "" {
			p.Exclude = strings.Split(exclude, ",")
		}
		want, wantErr := refFingerprintOf(p)
		got, fields, err := Encoded(p)
		if fmt.Sprint(err) != fmt.Sprint(wantErr) {
			t.Fatalf("Encoded(%+v) error = %v, reference %v", p, err, wantErr)
		}
		if err != nil {
			return
		}
		if got.Sum != want.Sum || got.Kind != want.Kind || got.fields != nil {
			t.Fatalf("Encoded(%+v) = %x %s %v, reference %x %s and no digests", p, got.Sum, got.Kind, got.fields, want.Sum, want.Kind)
		}
		if wantFields := refEncodeFields(want); !bytes.Equal(fields, wantFields) || (fields == nil) != (wantFields == nil) {
			t.Fatalf("Encoded(%+v) fields = %q, reference %q", p, fields, wantFields)
		}
		if decoded := got.WithFields(fields); !slices.Equal(decoded.fields, want.fields) {
			t.Fatalf("WithFields of %+v = %v, reference %v", p, decoded.fields, want.fields)
		}
	})
}

// TestAppendJSONString checks that appendJSONString writes every byte, in
// a string and a byte slice, as encoding/json does.
func TestAppendJSONString(t *testing.T) {
	t.Parallel()
	for c := range 256 {
		s := "/a" + string(rune(c)) + string([]byte{byte(c)}) + "z"
		want, _ := json.Marshal(s)
		if got := appendJSONString([]byte("x"), s); string(got) != "x"+string(want) {
			t.Errorf("appendJSONString(%q) = %s, encoding/json %s", s, got[1:], want)
		}
		if got := appendJSONString(nil, []byte(s)); string(got) != string(want) {
			t.Errorf("appendJSONString([]byte(%q)) = %s, encoding/json %s", s, got, want)
		}
	}
}
