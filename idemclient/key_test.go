package idemclient

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func TestNewKey(t *testing.T) {
	t.Parallel()
	pattern := regexp.MustCompile(`^[A-Z2-7]{26}$`)
	seen := make(map[string]bool)
	for range 1000 {
		k := NewKey()
		if !pattern.MatchString(k) {
			t.Fatalf("NewKey() = %q, want 26 base32 characters", k)
		}
		if seen[k] {
			t.Fatalf("NewKey() returned %q twice", k)
		}
		seen[k] = true
	}
}

func TestWithKey(t *testing.T) {
	t.Parallel()
	if _, ok := KeyFromContext(context.Background()); ok {
		t.Error("KeyFromContext found a key in a bare context")
	}
	ctx := WithKey(context.Background(), "order-42")
	if k, ok := KeyFromContext(ctx); !ok || k != "order-42" {
		t.Errorf("KeyFromContext = %q, %v; want order-42, true", k, ok)
	}
}

func TestFormatKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		key     string
		bare    bool
		want    string
		wantErr bool
	}{
		{name: "Quoted", key: "8e03978e-40d5-43e8-bc93-6894a57f9324", want: `"8e03978e-40d5-43e8-bc93-6894a57f9324"`},
		{name: "QuotedEscapes", key: `a"b\c`, want: `"a\"b\\c"`},
		{name: "QuotedSpace", key: "a b", want: `"a b"`},
		{name: "Bare", key: "order-42", bare: true, want: "order-42"},
		{name: "LongestKey", key: strings.Repeat("k", 255), want: `"` + strings.Repeat("k", 255) + `"`},
		{name: "Empty", key: "", wantErr: true},
		{name: "TooLong", key: strings.Repeat("k", 256), wantErr: true},
		{name: "NotASCII", key: "clé", wantErr: true},
		{name: "ControlCharacter", key: "a\nb", wantErr: true},
		{name: "BareQuote", key: `a"b`, bare: true, wantErr: true},
		{name: "BareSpace", key: "a b", bare: true, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := formatKey(tt.key, tt.bare)
			if tt.wantErr {
				if !errors.Is(err, ErrInvalidKey) {
					t.Errorf("formatKey(%q) = %q, %v; want ErrInvalidKey", tt.key, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("formatKey(%q) = %q, %v; want %q", tt.key, got, err, tt.want)
			}
			if back := parseKey(got); back != tt.key {
				t.Errorf("parseKey(%q) = %q, want %q", got, back, tt.key)
			}
		})
	}
}

func TestInvalidContextKeyNotSent(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("a request with an invalid key reached the server")
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv, newFakeClock(), Config{})
	for _, key := range []string{"", "clé", strings.Repeat("k", 256)} {
		ctx := WithKey(context.Background(), key)
		resp, err := c.Post(ctx, srv.URL, "text/plain", []byte("x"))
		if resp != nil || !errors.Is(err, ErrInvalidKey) {
			t.Errorf("Post with key %q = %v, %v; want ErrInvalidKey", key, resp, err)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("x"))
		resp, err = (&http.Client{Transport: c.Transport()}).Do(req)
		if resp != nil || !errors.Is(err, ErrInvalidKey) {
			t.Errorf("Transport with key %q = %v, %v; want ErrInvalidKey", key, resp, err)
		}
	}
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	tests := []struct{ field, want string }{
		{`"abc"`, "abc"},
		{` "a\"b" `, `a"b`},
		{`"abc";p=1`, "abc"},
		{"bare-token", "bare-token"},
		{`"unterminated`, "unterminated"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := parseKey(tt.field); got != tt.want {
			t.Errorf("parseKey(%q) = %q, want %q", tt.field, got, tt.want)
		}
	}
}

func FuzzFormatKey(f *testing.F) {
	for _, s := range []string{"abc", `a"b\c`, "8e03978e-40d5-43e8-bc93-6894a57f9324", "", "é", " lead"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, key string, bare bool) {
		field, err := formatKey(key, bare)
		if err != nil {
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("formatKey(%q) error %v is not ErrInvalidKey", key, err)
			}
			return
		}
		for i := 0; i < len(field); i++ {
			if field[i] < 0x20 || field[i] > 0x7e {
				t.Fatalf("formatKey(%q) = %q holds a byte that is not printable ASCII", key, field)
			}
		}
		if got := parseKey(field); got != key {
			t.Fatalf("parseKey(formatKey(%q)) = %q", key, got)
		}
		parseKey(key) // never panics on arbitrary input
	})
}
