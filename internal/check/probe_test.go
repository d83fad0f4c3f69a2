package check

import (
	"strings"
	"testing"
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
