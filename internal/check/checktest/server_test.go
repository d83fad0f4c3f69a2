package checktest

import (
	"errors"
	"strings"
	"testing"
)

func TestParseKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		value string
		want  string
		err   error
	}{
		{"QuotedString", `"8e03978e-40d5"`, "8e03978e-40d5", nil},
		{"BareToken", `1795977227879855426_mjGTYA`, "1795977227879855426_mjGTYA", nil},
		{"SurroundingSpace", ` "abc" `, "abc", nil},
		{"Escapes", `"a\"b\\c"`, `a"b\c`, nil},
		{"QuotedSpaces", `"a b"`, "a b", nil},
		{"Unterminated", `"abc`, "", ErrMalformedKey},
		{"List", `"a", "b"`, "", ErrMalformedKey},
		{"Parameters", `"a";p=1`, "a", nil},
		{"JunkAfterString", `"a"b`, "", ErrMalformedKey},
		{"BareHash", "order#7", "", ErrMalformedKey},
		{"BadEscape", `"a\n"`, "", ErrMalformedKey},
		{"Tab", "\"a\tb\"", "", ErrMalformedKey},
		{"NonASCII", "\"caf\xe9\"", "", ErrMalformedKey},
		{"UnquotedSpace", "a b", "", ErrMalformedKey},
		{"Empty", "", "", ErrEmptyKey},
		{"EmptyString", `""`, "", ErrEmptyKey},
		{"MaxLength", strings.Repeat("k", MaxKeyLength), strings.Repeat("k", MaxKeyLength), nil},
		{"TooLong", `"` + strings.Repeat("k", MaxKeyLength+1) + `"`, "", ErrKeyTooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseKey(tt.value)
			if got != tt.want || !errors.Is(err, tt.err) {
				t.Errorf("ParseKey(%q) = %q, %v; want %q, %v", tt.value, got, err, tt.want, tt.err)
			}
		})
	}
}

// FuzzParseKey checks that every accepted key is non-empty printable ASCII
// within the length limit, and that quoting a token key round-trips.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`"abc"`, "abc", `"a\"b"`, `"`, `""`, "\"a\tb\"", `"a", "b"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, err := ParseKey(v)
		if err != nil {
			return
		}
		if key == "" || len(key) > MaxKeyLength {
			t.Fatalf("ParseKey(%q) = %q: empty or too long", v, key)
		}
		for i := range len(key) {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("ParseKey(%q) = %q: byte 0x%02x", v, key, key[i])
			}
		}
		if !strings.ContainsAny(key, `"\ `) {
			if again, err := ParseKey(`"` + key + `"`); err != nil || again != key {
				t.Fatalf("quoted %q parses to %q, %v", key, again, err)
			}
		}
	})
}
