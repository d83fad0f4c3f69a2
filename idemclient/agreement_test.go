package idemclient

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
)

// The client and the idem server share one definition of a valid key: every
// field formatKey produces, bare or quoted, is accepted by the idem
// middleware and carries the same key to the handler, and formatKey
// refuses only keys that the middleware would refuse in that form.

// serverKey sends field as the Idempotency-Key of a POST through the idem
// middleware, on a fresh store, and returns the key the handler saw, or ""
// and the status when the request did not reach the handler.
func serverKey(t testing.TB, field string) (string, int) {
	t.Helper()
	mw, err := idem.New(idemtest.NewMemoryStore(), &idem.Config{
		ClientID: func(*http.Request) (string, bool) { return "client", true },
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatalf("idem.New: %v", err)
	}
	var seen string
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scope, _ := idem.ScopeFromContext(r.Context())
		seen = scope.Key
		w.WriteHeader(http.StatusCreated)
	}))
	req := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", field)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated {
		return "", rec.Code
	}
	return seen, rec.Code
}

// agreementKeys are keys at the edges of the rules: every character class,
// the length limit, and characters the bare form does not allow.
func agreementKeys() []string {
	return []string{
		"order-42", "order#7", "order 7", `a"b\c`, "a,b", "a;b", "(x)", "*star", "?q",
		"8e03978e-40d5-43e8-bc93-6894a57f9324", "1795977227879855426_mjGTYA", "a_b-c.d:e~f/g+h=",
		"dGhpcyBpcyBhIGtleQ==", " lead", "trail ", " ", `"`, `\`, "k",
		strings.Repeat("k", idem.MaxKeyLength), strings.Repeat("k", idem.MaxKeyLength+1),
		strings.Repeat(`"`, idem.MaxKeyLength), "", "clé", "a\tb", "a\nb", "a\x00b", "a\x7fb",
		"!#$%&'*^`|", "<>@[]{}",
	}
}

func TestFormattedKeysAreAcceptedByTheServer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key       string
		bare      bool
		wantField string // "" when formatKey must refuse the key
	}{
		{"order-42", true, "order-42"},
		{"order-42", false, `"order-42"`},
		{"order#7", true, ""}, // the server refuses # unquoted
		{"order#7", false, `"order#7"`},
		{"a_b-c.d:e~f/g+h=", true, "a_b-c.d:e~f/g+h="},
		{"order 7", true, ""},
		{"!#$%&'*^`|", true, ""},
		{`a"b\c`, false, `"a\"b\\c"`},
		{" ", false, `" "`},
		{strings.Repeat("k", idem.MaxKeyLength), true, strings.Repeat("k", idem.MaxKeyLength)},
		{strings.Repeat("k", idem.MaxKeyLength+1), false, ""},
		{"", false, ""},
		{"clé", false, ""},
	}
	for _, tt := range tests {
		field, err := formatKey(tt.key, tt.bare)
		if tt.wantField == "" {
			if !errors.Is(err, ErrInvalidKey) {
				t.Errorf("formatKey(%q, bare=%v) = %q, %v; want ErrInvalidKey", tt.key, tt.bare, field, err)
			}
			continue
		}
		if err != nil || field != tt.wantField {
			t.Errorf("formatKey(%q, bare=%v) = %q, %v; want %q", tt.key, tt.bare, field, err, tt.wantField)
			continue
		}
		if got, status := serverKey(t, field); got != tt.key {
			t.Errorf("the server answered %d to %q and saw key %q; want %q", status, field, got, tt.key)
		}
	}
	for _, key := range agreementKeys() {
		checkAgreement(t, key)
	}
}

// checkAgreement checks both forms of key against the server's parser.
func checkAgreement(t *testing.T, key string) {
	t.Helper()
	for _, bare := range []bool{false, true} {
		field, err := formatKey(key, bare)
		if err != nil {
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("formatKey(%q, bare=%v) error %v is not ErrInvalidKey", key, bare, err)
			}
			// A refused key is one the server would refuse in that form too.
			sent := key
			if !bare {
				sent = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
			}
			if got, status := serverKey(t, sent); status == http.StatusCreated && got == key {
				t.Fatalf("formatKey(%q, bare=%v) refused a key the server accepts as %q", key, bare, sent)
			}
			continue
		}
		got, status := serverKey(t, field)
		if status != http.StatusCreated {
			t.Fatalf("formatKey(%q, bare=%v) = %q, which the server refuses with %d", key, bare, field, status)
		}
		if got != key {
			t.Fatalf("formatKey(%q, bare=%v) = %q, which the server reads as %q", key, bare, field, got)
		}
	}
}

// FuzzFormattedKeyAccepted: for any key, if formatKey succeeds, bare or
// quoted, the idem middleware accepts the field and hands the handler the
// same key; if it refuses, the server would have refused that form too.
func FuzzFormattedKeyAccepted(f *testing.F) {
	for _, k := range agreementKeys() {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		checkAgreement(t, key)
	})
}
