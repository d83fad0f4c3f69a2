package check

import (
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/keyspec"
)

func TestExcerpt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
	}{
		{`{"id": "pay_1"}`, `{"id": "pay_1"}`},
		{"a\n\n  b\tc", "a b c"},
		{"bad\xffbyte\x01", `bad\xffbyte\x01`},
		{strings.Repeat("x", 200), strings.Repeat("x", excerptMax) + "…"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := excerpt([]byte(tt.in)); got != tt.want {
			t.Errorf("excerpt(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestShowKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
	}{
		{`"abc"`, `"abc"`},
		{"\"a\tb\xe9\"", `"a\tb\xe9"`},
		{strings.Repeat("k", 300), strings.Repeat("k", 40) + "… (300 chars)"},
	}
	for _, tt := range tests {
		if got := showKey(tt.in); got != tt.want {
			t.Errorf("showKey(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestNewKey(t *testing.T) {
	t.Parallel()
	seen := make(map[string]bool)
	for range 100 {
		k := newKey()
		if len(k) != 36 || k[14] != '4' || !strings.ContainsRune("89ab", rune(k[19])) || seen[k] {
			t.Fatalf("newKey() = %q: not a fresh version 4 UUID", k)
		}
		seen[k] = true
	}
	for _, n := range []int{1, 2, 255, 256} {
		if k := newKeyOfLength(n); len(k) != n || !isToken(k) {
			t.Errorf("newKeyOfLength(%d) = %q", n, k)
		}
	}
}

// TestProbesFollowTheKeyRules checks the checker's keys against the one
// definition of a valid key: every fresh key is sent as a field the rules
// accept, in both forms, and every malformed case is refused by them.
func TestProbesFollowTheKeyRules(t *testing.T) {
	t.Parallel()
	for _, bare := range []bool{false, true} {
		r := &runner{cfg: Config{BareKeys: bare}}
		for _, key := range []string{newKey(), newKeyOfLength(1), newKeyOfLength(MaxKeyLengthDefault)} {
			if got, err := keyspec.Parse(r.wire(key)); err != nil || got != key {
				t.Errorf("bare=%v: wire(%q) = %q parses to %q, %v", bare, key, r.wire(key), got, err)
			}
		}
		if _, err := keyspec.Parse(r.wire(newKeyOfLength(MaxKeyLengthDefault + 1))); err == nil {
			t.Errorf("bare=%v: a key one over the default maximum is valid", bare)
		}
	}
	for _, c := range malformedCases() {
		if len(c.values) != 1 {
			continue // two fields: refused by count, not by the rules of one
		}
		if key, err := keyspec.Parse(c.values[0]); err == nil {
			t.Errorf("malformed case %q (%q) is a valid key %q", c.name, c.values[0], key)
		}
	}
}
