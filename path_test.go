package idem

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
)

func TestCanonicalPath(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, target, want string
	}{
		// A path without escapes is its own canonical form: the fingerprint
		// of every such request is what it always was.
		{"Plain", "/v1/payments", "/v1/payments"},
		{"PlainWildcardValue", "/v1/payments/pay_1/capture", "/v1/payments/pay_1/capture"},
		{"PlainSubDelims", "/v1/a!b$c&d'e(f)g*h+i,j;k=l:m@n[o]p~q", "/v1/a!b$c&d'e(f)g*h+i,j;k=l:m@n[o]p~q"},
		{"PlainRoot", "/", "/"},
		{"PlainAsterisk", "*", "*"},
		// Escapes that are needed, spelled as url.URL spells them, stay.
		{"NeededEscapes", "/v1/a%20b/caf%C3%A9/100%25/q%3F", "/v1/a%20b/caf%C3%A9/100%25/q%3F"},
		{"EscapedSlash", "/v1/a%2Fb", "/v1/a%2Fb"},
		// Other spellings become that one.
		{"NeedlessEscape", "/v1/%70ayments", "/v1/payments"},
		{"NeedlessEscapes", "/%76%31/%70%61%79%6D%65%6E%74%73", "/v1/payments"},
		{"NeedlessEscapeOfSubDelim", "/v1/a%21b%2Bc", "/v1/a!b+c"},
		{"LowerCaseHex", "/v1/caf%c3%a9/a%2fb", "/v1/caf%C3%A9/a%2Fb"},
		{"RawNonASCII", "/v1/café", "/v1/caf%C3%A9"},
		// Segments are kept, dot and empty ones too: only a mux cleans them,
		// by redirecting before any handler runs.
		{"EscapedDotSegment", "/v1/%2E%2E/x", "/v1/../x"},
		{"DotSegment", "/v1/x/../payments", "/v1/x/../payments"},
		{"DoubleSlash", "/v1//payments", "/v1//payments"},
		{"DoubleSlashEscaped", "/v1//%70ayments", "/v1//payments"},
		{"EscapedSlashNextToDots", "/v1/..%2Fx", "/v1/..%2Fx"},
		{"TrailingSlash", "/v1/%70ayments/", "/v1/payments/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u, err := url.ParseRequestURI(tt.target)
			if err != nil {
				t.Fatalf("ParseRequestURI(%q): %v", tt.target, err)
			}
			if got := canonicalPath(u.EscapedPath()); got != tt.want {
				t.Errorf("canonicalPath of %q = %q, want %q", tt.target, got, tt.want)
			}
		})
	}
}

// TestCanonicalPathSpellingsOfEveryByte: every spelling of a byte in a
// segment, raw where a client may send it so, escaped in either case, has
// one canonical form, and the bytes that stand for themselves are those
// url.URL leaves alone in a path it is sent.
func TestCanonicalPathSpellingsOfEveryByte(t *testing.T) {
	t.Parallel()
	for c := range 256 {
		b := byte(c)
		upper, lower := fmt.Sprintf("/a%%%02Xz", b), fmt.Sprintf("/a%%%02xz", b)
		want := canonicalPath(upper)
		if got := canonicalPath(lower); got != want {
			t.Errorf("byte 0x%02x: %q is %q, %q is %q", b, upper, want, lower, got)
		}
		raw := "/a" + string([]byte{b}) + "z"
		u, err := url.ParseRequestURI(raw)
		if err != nil || b == '/' || b == '%' || b == '?' || b == '#' {
			continue // not a path a client can send this byte raw in
		}
		sent := u.EscapedPath() // what the middleware reads
		if got := canonicalPath(sent); got != want {
			t.Errorf("byte 0x%02x: raw %q (escaped path %q) is %q, escaped %q is %q", b, raw, sent, got, upper, want)
		}
		if isPathChar(b) != (sent == raw) {
			t.Errorf("byte 0x%02x: isPathChar = %v, but url.URL's escaped path of %q is %q", b, isPathChar(b), raw, sent)
		}
	}
}

// FuzzCanonicalPath checks that the canonical path names the same segments
// as the request's path, that it is its own canonical form and the escaped
// path of a request that sends it, that a path without escapes is left as
// it is, and that spelling every byte escaped changes nothing.
func FuzzCanonicalPath(f *testing.F) {
	for _, s := range []string{"/v1/payments", "/v1/%70ayments", "/v1/a%2Fb", "/v1/a/b", "/v1/%2E%2E//x/", "/v1/caf%c3%a9", "/v1/a!b[c]", "/v1/100%25", "/%FF%00", "//x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		u, err := url.ParseRequestURI(target)
		if err != nil || !strings.HasPrefix(target, "/") || u.Host != "" || u.RawQuery != "" || u.ForceQuery {
			return // not the path of an origin-form request target
		}
		escaped := u.EscapedPath()
		got := canonicalPath(escaped)
		if !strings.Contains(escaped, "%") && got != escaped {
			t.Fatalf("canonicalPath(%q) = %q: a path without escapes changed", escaped, got)
		}
		if want := pathSegments(t, escaped); !slices.Equal(pathSegments(t, got), want) {
			t.Fatalf("canonicalPath(%q) = %q: segments %q, want %q", escaped, got, pathSegments(t, got), want)
		}
		if again := canonicalPath(got); again != got {
			t.Fatalf("canonicalPath(%q) = %q, and of that %q", escaped, got, again)
		}
		sent, err := url.ParseRequestURI(got)
		if err != nil {
			t.Fatalf("canonicalPath(%q) = %q, which does not parse: %v", escaped, got, err)
		}
		if sent.EscapedPath() != got || sent.Path != u.Path {
			t.Fatalf("canonicalPath(%q) = %q, which a request sends as %q (path %q, want %q)", escaped, got, sent.EscapedPath(), sent.Path, u.Path)
		}
		var all strings.Builder
		for i, segment := range pathSegments(t, escaped) {
			if i > 0 {
				all.WriteByte('/')
			}
			for j := 0; j < len(segment); j++ {
				fmt.Fprintf(&all, "%%%02x", segment[j])
			}
		}
		if other := canonicalPath(all.String()); other != got {
			t.Fatalf("canonicalPath(%q) = %q, but of %q, its every byte escaped, %q", escaped, got, all.String(), other)
		}
	})
}

// pathSegments returns the decoded segments of an escaped path.
func pathSegments(t *testing.T, escaped string) []string {
	t.Helper()
	segments := strings.Split(escaped, "/")
	for i, s := range segments {
		d, err := url.PathUnescape(s)
		if err != nil {
			t.Fatalf("segment %q of %q: %v", s, escaped, err)
		}
		segments[i] = d
	}
	return segments
}
