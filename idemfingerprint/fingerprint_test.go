package idemfingerprint_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idem/idemfingerprint"
	"github.com/idemkit/idem/internal/fingerprint"
)

// FuzzNew checks that New carries the hash and the encoded fields that the
// middleware claims with, and its error.
func FuzzNew(f *testing.F) {
	for _, s := range []struct{ query, contentType, body string }{
		{"", "application/json", `{"amount":4200,"currency":"eur","customer":"cus_123"}`},
		{"b=2&a=1", "application/x-www-form-urlencoded", `b=2&a=1&a=0`},
		{"", "application/json", `[1,2]`},
		{"", "", ""},
		{"", "application/json", `{"a":1,"a":2}`},
		{"", "text/plain", `amount=1`},
	} {
		for _, raw := range []bool{false, true} {
			f.Add(s.query, s.contentType, []byte(s.body), raw)
		}
	}
	f.Fuzz(func(t *testing.T, query, contentType string, body []byte, raw bool) {
		p := idemfingerprint.Params{Method: "POST", Path: "/v1/payments", RawQuery: query, ContentType: contentType, Body: body, Exclude: []string{"/client_ts"}, Raw: raw}
		want, wantFields, wantErr := fingerprint.Encoded(fingerprint.Params(p))
		got, err := idemfingerprint.New(p)
		if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
			t.Fatalf("New(%+v) error = %v, the middleware's %v", p, err, wantErr)
		}
		if err != nil {
			if got.Hash != nil || got.Fields != nil {
				t.Errorf("New returned %+v with its error", got)
			}
			return
		}
		if !bytes.Equal(got.Hash, want.Sum[:]) || !bytes.Equal(got.Fields, wantFields) || (got.Fields == nil) != (wantFields == nil) {
			t.Fatalf("New(%+v) = %x %s; the middleware's %x %s", p, got.Hash, got.Fields, want.Sum, wantFields)
		}
	})
}

func TestNewDuplicateMember(t *testing.T) {
	t.Parallel()
	_, err := idemfingerprint.New(idemfingerprint.Params{Method: "POST", Path: "/v1/payments", ContentType: "application/json", Body: []byte(`{"a":1,"a":2}`)})
	if !errors.Is(err, fingerprint.ErrDuplicateMember) || !strings.Contains(err.Error(), "/a") {
		t.Errorf("New of a duplicate member: %v; want the reason naming /a", err)
	}
}
