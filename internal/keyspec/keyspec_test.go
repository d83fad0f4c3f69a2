package keyspec

import (
	"errors"
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", MaxLength)
	tests := []struct {
		name string
		key  string
		bare bool
		want string
		kind Kind // 0 when Format succeeds
	}{
		{"Quoted", "order#7", false, `"order#7"`, 0},
		{"QuotedEscapes", `a"b\c`, false, `"a\"b\\c"`, 0},
		{"Bare", "a_b-c.d:e~f/g+h=", true, "a_b-c.d:e~f/g+h=", 0},
		{"BareAtLimit", long, true, long, 0},
		{"BareRefusesHash", "order#7", true, "", Malformed},
		{"BareRefusesSpace", "a b", true, "", Malformed},
		{"Empty", "", false, "", Empty},
		{"TooLong", long + "k", false, "", TooLong},
		{"NotASCII", "clé", false, "", Malformed},
		{"Control", "a\tb", false, "", Malformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Format(tt.key, tt.bare)
			var kerr *Error
			switch {
			case tt.kind == 0 && (err != nil || got != tt.want):
				t.Fatalf("Format(%q, %v) = %q, %v; want %q", tt.key, tt.bare, got, err, tt.want)
			case tt.kind != 0 && (!errors.As(err, &kerr) || kerr.Kind != tt.kind):
				t.Fatalf("Format(%q, %v) = %q, %v; want an error of kind %d", tt.key, tt.bare, got, err, tt.kind)
			case tt.kind == 0:
				if back, err := Parse(got); err != nil || back != tt.key {
					t.Fatalf("Parse(%q) = %q, %v; want %q", got, back, err, tt.key)
				}
			}
		})
	}
}

// FuzzParse checks that every parsed key is a valid key, and that Format
// writes every valid key in a form Parse reads back.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`"abc"`, "abc", `"a\"b"`, `"abc";x=1`, "order#7", `""`, " \t", "\"a\x01\""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if key, err := Parse(s); err == nil {
			if err := Check(key); err != nil {
				t.Fatalf("Parse(%q) = %q, which Check refuses: %v", s, key, err)
			}
		}
		for _, bare := range []bool{false, true} {
			field, err := Format(s, bare)
			if err != nil {
				continue
			}
			if key, err := Parse(field); err != nil || key != s {
				t.Fatalf("Parse(Format(%q, %v) = %q) = %q, %v", s, bare, field, key, err)
			}
		}
	})
}
