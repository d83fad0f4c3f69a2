package keyspec

import (
	"bytes"
	"errors"
	"fmt"
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

// The alphabets of the key and of RFC 9651's parameters, spelled out as
// the documentation and the RFC give them, to check each byte against.
const (
	lcalpha   = "abcdefghijklmnopqrstuvwxyz"
	ucalpha   = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	digits    = "0123456789"
	bareChars = lcalpha + ucalpha + digits + "_-.:~/+="
	// tchar (RFC 9110) with ":" and "/": the characters of an sf-token
	// after its first.
	tokenChars  = lcalpha + ucalpha + digits + "!#$%&'*+-.^_`|~:/"
	base64Chars = lcalpha + ucalpha + digits + "+/="
)

// printable reports whether c is printable ASCII, from space to tilde.
func printable(c byte) bool { return c >= ' ' && c <= '~' }

func TestCharacterClasses(t *testing.T) {
	t.Parallel()
	for i := range 256 {
		c := byte(i)
		if got, want := IsStringChar(c), printable(c); got != want {
			t.Errorf("IsStringChar(%q) = %v, want %v", c, got, want)
		}
		if got, want := IsBareChar(c), strings.IndexByte(bareChars, c) >= 0; got != want {
			t.Errorf("IsBareChar(%q) = %v, want %v", c, got, want)
		}
		if err := Check("k" + string(c)); (err == nil) != printable(c) {
			t.Errorf("Check(%q) = %v, want an error exactly when %q is not printable ASCII", "k"+string(c), err, c)
		}
		if err := CheckBare("k" + string(c)); (err == nil) != (strings.IndexByte(bareChars, c) >= 0) {
			t.Errorf("CheckBare(%q) = %v, want an error exactly when %q is not a bare-key character", "k"+string(c), err, c)
		}
		if _, err := Parse("k" + string(c) + "k"); (err == nil) != (strings.IndexByte(bareChars, c) >= 0) {
			t.Errorf("Parse(%q) = %v, want an error exactly when %q is not a bare-key character", "k"+string(c)+"k", err, c)
		}
	}
}

func TestCheckLength(t *testing.T) {
	t.Parallel()
	if err := Check(strings.Repeat("k", MaxLength)); err != nil {
		t.Errorf("Check(a key of %d characters) = %v, want nil", MaxLength, err)
	}
	var kerr *Error
	if err := Check(strings.Repeat("k", MaxLength+1)); !errors.As(err, &kerr) || kerr.Kind != TooLong {
		t.Errorf("Check(a key of %d characters) = %v, want a TooLong error", MaxLength+1, err)
	}
	if err := Check(""); !errors.As(err, &kerr) || kerr.Kind != Empty {
		t.Errorf(`Check("") = %v, want an Empty error`, err)
	}
}

// TestQuoteEveryKeyCharacter writes each one-character key as an
// sf-string and reads it back.
func TestQuoteEveryKeyCharacter(t *testing.T) {
	t.Parallel()
	for c := byte(' '); c <= '~'; c++ {
		key := string(c)
		want := `"` + key + `"`
		if c == '"' || c == '\\' {
			want = `"\` + key + `"`
		}
		got, err := Format(key, false)
		if err != nil || got != want {
			t.Fatalf("Format(%q, false) = %q, %v; want %q", key, got, err, want)
		}
		if back, err := Parse(got); err != nil || back != key {
			t.Fatalf("Parse(%q) = %q, %v; want %q", got, back, err, key)
		}
	}
}

func TestParseAccepts(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", MaxLength)
	tests := []struct {
		name  string
		field string
		want  string
	}{
		{"Bare", "8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{"BareEveryPunctuation", "a_b-c.d:e~f/g+h=", "a_b-c.d:e~f/g+h="},
		{"BareOneCharacter", "k", "k"},
		{"Quoted", `"order 42"`, "order 42"},
		{"QuotedOneCharacter", `"k"`, "k"},
		{"QuotedEscapes", `"a\"b\\c"`, `a"b\c`},
		{"QuotedOnlyEscapes", `"\\\""`, `\"`},
		{"QuotedTilde", `"~"`, "~"},
		{"QuotedSpaceOnly", `" "`, " "},
		{"TrimsSpaces", `   "abc"   `, "abc"},
		{"TrimsTabs", "\t\"abc\"\t", "abc"},
		{"TrimsAroundBare", " \t abc \t ", "abc"},
		{"TrimsAroundParameters", ` "abc";x=1 `, "abc"},
		{"BareAtLimit", long, long},
		{"BareAtLimitWithSpaces", "  " + long + "\t", long},
		{"QuotedAtLimit", `"` + long + `"`, long},
		{"QuotedAtLimitAfterUnescaping", `"` + long[:MaxLength-1] + `\""`, long[:MaxLength-1] + `"`},
		{"QuotedAtLimitWithParameter", `"` + long + `";x=1`, long},

		{"ParameterBoolean", `"abc";retry`, "abc"},
		{"ParameterBooleanThenAnother", `"abc";a;b=1`, "abc"},
		{"ParameterSpaceAfterSemicolon", `"abc";  x=1`, "abc"},
		{"ParameterNameEveryCharacter", `"abc";az09_-.*=1`, "abc"},
		{"ParameterNameStar", `"abc";*=1`, "abc"},
		{"ParameterNameZ", `"abc";z=1`, "abc"},
		{"ParameterIntegers", `"abc";a=0;b=9;c=-1;d=1090;e=9.5`, "abc"},
		{"ParameterString", `"abc";s="x\"y\\"`, "abc"},
		{"ParameterLongString", `"abc";s="` + strings.Repeat("n", 300) + `"`, "abc"},
		{"ParameterEmptyString", `"abc";s=""`, "abc"},
		{"ParameterTokens", `"abc";a=a;b=z;c=A;d=Z;e=*;f=tok/en:1`, "abc"},
		{"ParameterBooleans", `"abc";t=?1;f=?0`, "abc"},
		{"ParameterByteSequences", `"abc";b=:AQID+/==:;e=::`, "abc"},
		{"ParameterDates", `"abc";a=@0;b=@9;c=@-62135596800;d=@1659578233`, "abc"},
		{"ParameterOneDigitDateLast", `"abc";d=@1`, "abc"},
		{"ParameterDisplayString", `"abc";d=%"caf%c3%a9 ~"`, "abc"},
		{"ParameterEmptyDisplayString", `"abc";d=%""`, "abc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse(tt.field)
			if err != nil || got != tt.want {
				t.Fatalf("Parse(%q) = %q, %v; want %q", tt.field, got, err, tt.want)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", MaxLength+1)
	tests := []struct {
		name  string
		field string
		kind  Kind
	}{
		{"EmptyField", "", Empty},
		{"OnlySpacesAndTabs", " \t \t ", Empty},
		{"EmptyString", `""`, Empty},
		{"EmptyStringWithParameter", `"";x=1`, Empty},

		{"BareOverLimit", long, TooLong},
		{"QuotedOverLimit", `"` + long + `"`, TooLong},
		{"QuotedOverLimitAfterUnescaping", `"` + long[:MaxLength] + `\\"`, TooLong},
		{"QuotedOverLimitUnterminated", `"` + long, TooLong},
		{"QuotedFarOverLimit", `"` + strings.Repeat("k", 10000) + `"`, TooLong},
		{"BareOverLimitAndMalformed", long + " x", Malformed},

		{"OnlyOpeningQuote", `"`, Malformed},
		{"Unterminated", `"abc`, Malformed},
		{"UnterminatedAfterEscape", `"a\"bc`, Malformed},
		{"EndsInsideEscape", `"abc\`, Malformed},
		{"EscapedClosingQuote", `"abc\"`, Malformed},
		{"BadEscape", `"a\nb"`, Malformed},
		{"QuotedControlCharacter", "\"a\x01b\"", Malformed},
		{"QuotedControlCharacterAfterEscape", "\"a\\\\\x01b\"", Malformed},
		{"QuotedDEL", "\"a\x7fb\"", Malformed},
		{"QuotedNonASCII", `"café"`, Malformed},
		{"BareSpaceInside", "a b", Malformed},
		{"BareComma", "a,b", Malformed},
		{"BareWithParameter", "abc;x=1", Malformed},
		{"BareControlCharacter", "a\x01b", Malformed},
		{"BareNonASCII", "café", Malformed},
		{"TrailingJunk", `"abc"x`, Malformed},
		{"TrailingSecondString", `"abc""def"`, Malformed},
		{"SpaceBeforeParameter", `"abc" ;x=1`, Malformed},
		{"List", `"a", "b"`, Malformed},
		{"Dictionary", `key="abc"`, Malformed},

		{"ParameterEmpty", `"abc";`, Malformed},
		{"ParameterOnlySpace", `"abc"; `, Malformed},
		{"ParameterWithoutName", `"abc";=1`, Malformed},
		{"ParameterTabBeforeName", "\"abc\";\tx=1", Malformed},
		{"ParameterUppercaseName", `"abc";X=1`, Malformed},
		{"ParameterNameStartsWithDigit", `"abc";1x=1`, Malformed},
		{"ParameterNameStartsWithUnderscore", `"abc";_x=1`, Malformed},
		{"ParameterSpaceBeforeEquals", `"abc";x =1`, Malformed},
		{"ParameterEmptyValue", `"abc";x=`, Malformed},
		{"ParameterEmptyValueThenAnother", `"abc";x=;y=1`, Malformed},
		{"ParameterBadValue", `"abc";x=(1 2)`, Malformed},
		{"ParameterBadBoolean", `"abc";x=?2`, Malformed},
		{"ParameterTruncatedBoolean", `"abc";x=?`, Malformed},
		{"ParameterUnterminatedByteSequence", `"abc";x=:AQID`, Malformed},
		{"ParameterBadByteSequence", `"abc";x=:AQ!D:`, Malformed},
		{"ParameterUnterminatedString", `"abc";x="y`, Malformed},
		{"ParameterStringBadEscape", `"abc";x="\y"`, Malformed},
		{"ParameterFollowedByJunk", `"abc";x=1"def"`, Malformed},
		{"ParameterNumberFollowedByLetter", `"abc";x=12a`, Malformed},
		{"ParameterTokenFollowedByJunk", `"abc";x=tok"en"`, Malformed},
		{"ParameterDateWithoutInteger", `"abc";ts=@`, Malformed},
		{"ParameterDateWithToken", `"abc";ts=@tok`, Malformed},
		{"ParameterDateWithString", `"abc";ts=@"1"`, Malformed},
		{"ParameterDisplayStringWithoutQuote", `"abc";d=%caf`, Malformed},
		{"ParameterDisplayStringPercentOnly", `"abc";d=%`, Malformed},
		{"ParameterUnterminatedDisplayString", `"abc";d=%"caf`, Malformed},
		{"ParameterDisplayStringNonASCII", `"abc";d=%"café"`, Malformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse(tt.field)
			var kerr *Error
			if !errors.As(err, &kerr) || kerr.Kind != tt.kind || got != "" {
				t.Fatalf("Parse(%q) = %q, %v; want an error of kind %d", tt.field, got, err, tt.kind)
			}
			if kerr.Reason == "" {
				t.Errorf("Parse(%q) error has no reason", tt.field)
			}
		})
	}
}

// TestParseEveryByte puts each byte in each place of a field: a bare key,
// a quoted key, a parameter's name, and each kind of parameter value, and
// checks that Parse accepts the field exactly when the byte is allowed
// there.
func TestParseEveryByte(t *testing.T) {
	t.Parallel()
	in := func(set string) func(byte) bool {
		return func(c byte) bool { return strings.IndexByte(set, c) >= 0 }
	}
	places := []struct {
		name    string
		field   func(c string) string
		allowed func(c byte) bool
	}{
		{"BareKey", func(c string) string { return "k" + c + "k" }, in(bareChars)},
		{"QuotedKey", func(c string) string { return `"k` + c + `k"` }, func(c byte) bool { return printable(c) && c != '"' && c != '\\' }},
		{"EscapedInKey", func(c string) string { return `"k\` + c + `"` }, in(`"\`)},
		{"ParameterNameFirst", func(c string) string { return `"k";` + c + `=1` }, in(lcalpha + "*")},
		{"ParameterNameNext", func(c string) string { return `"k";a` + c + `=1` }, in(lcalpha + digits + "_-.*")},
		{"TokenFirst", func(c string) string { return `"k";p=` + c + "a" }, func(c byte) bool {
			// A digit or '-' starts a number, which a letter may not follow.
			return in(lcalpha + ucalpha + "*")(c)
		}},
		// A parameter follows, so that a space is not trimmed as trailing.
		{"TokenNext", func(c string) string { return `"k";p=a` + c + ";q" }, in(tokenChars)},
		{"Number", func(c string) string { return `"k";p=1` + c + ";q" }, in(digits + ".")},
		{"Boolean", func(c string) string { return `"k";p=?` + c }, in("01")},
		{"ByteSequence", func(c string) string { return `"k";p=:` + c + `:` }, in(base64Chars)},
		{"Date", func(c string) string { return `"k";p=@` + c + "1" }, in(digits + "-")},
		{"DisplayString", func(c string) string { return `"k";p=%"` + c + `"` }, func(c byte) bool { return printable(c) && c != '"' }},
		{"String", func(c string) string { return `"k";p="` + c + `"` }, func(c byte) bool { return printable(c) && c != '"' && c != '\\' }},
	}
	for _, p := range places {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			for i := range 256 {
				c := byte(i)
				field := p.field(string(c))
				_, err := Parse(field)
				if allowed := p.allowed(c); (err == nil) != allowed {
					t.Errorf("Parse(%q) = %v; the byte %q is allowed there: %v", field, err, c, allowed)
				}
			}
		})
	}
}

func TestNonIdempotent(t *testing.T) {
	t.Parallel()
	for _, m := range []string{"POST", "PATCH"} {
		if !NonIdempotent(m) {
			t.Errorf("NonIdempotent(%q) = false, want true", m)
		}
	}
	for _, m := range []string{"GET", "HEAD", "PUT", "DELETE", "OPTIONS", "post"} {
		if NonIdempotent(m) {
			t.Errorf("NonIdempotent(%q) = true, want false", m)
		}
	}
}

// TestParseBareEveryPosition: a bare key is refused for a byte not allowed
// in it at every position, under and over the eight bytes that parseBare
// reads a step, with the reason that names that byte and position; and
// accepted, up to MaxLength, when every byte is allowed.
func TestParseBareEveryPosition(t *testing.T) {
	t.Parallel()
	for n := 1; n <= MaxLength+1; n++ {
		key := strings.Repeat("a", n)
		got, err := Parse(key)
		if n <= MaxLength && (err != nil || got != key) {
			t.Fatalf("Parse(%d bytes) = %q, %v", n, got, err)
		}
		if n > MaxLength && !isKind(err, TooLong) {
			t.Fatalf("Parse(%d bytes) = %v; want TooLong", n, err)
		}
		if n > 40 && n < MaxLength {
			continue
		}
		for i := range n {
			for _, c := range []byte{'!', 0x7f, 0x00, '"'} {
				field := key[:i] + string(c) + key[i+1:]
				if i == 0 && c == '"' {
					continue // an sf-string
				}
				_, err := Parse(field)
				var kerr *Error
				if !errors.As(err, &kerr) || kerr.Kind != Malformed {
					t.Fatalf("Parse(%q) = %v; want Malformed", field, err)
				}
				want := fmt.Sprintf("character %q at position %d is not allowed", c, i)
				if !printable(c) {
					want = fmt.Sprintf("byte 0x%02x at position %d is not printable ASCII", c, i)
				}
				if !strings.HasPrefix(kerr.Reason, want) {
					t.Fatalf("Parse(%q) = %q; want %q", field, kerr.Reason, want)
				}
			}
		}
	}
}

func isKind(err error, k Kind) bool {
	var kerr *Error
	return errors.As(err, &kerr) && kerr.Kind == k
}

func BenchmarkParseBare(b *testing.B) {
	for b.Loop() {
		Parse("8e03978e-40d5-43e8-bc93-6894a57f9324")
	}
}

// TestCommonWords compares commonWords with IsBareChar: for every byte in
// every position of a word of common bytes, and for words of two bytes
// each from a set that holds the edges of common's ranges. It may
// report false for a word of bare bytes, never true for a word with a
// byte that is not bare or not one of its common bytes.
func TestCommonWords(t *testing.T) {
	t.Parallel()
	common := func(c byte) bool {
		return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '-' <= c && c <= ':'
	}
	for _, fill := range []string{"aaaaaaaa", "Zz09-./:", "A-z:0/9."} {
		for i := range 8 {
			for c := range 256 {
				b := []byte(fill)
				b[i] = byte(c)
				want := true
				for _, d := range b {
					want = want && common(d)
				}
				x, f := word(string(b)), word(fill)
				if got := commonWords(x, f); got != want {
					t.Fatalf("commonWords(%q, %q) = %v; want %v", b, fill, got, want)
				}
				if got := commonWords(f, x); got != want {
					t.Fatalf("commonWords(%q, %q) = %v; want %v", fill, b, got, want)
				}
				if want && !allBare(string(b)) {
					t.Fatalf("allBare(%q) = false for common bytes", b)
				}
			}
		}
	}
	edges := []byte{0x00, 0x20, ',', '-', ':', ';', '@', 'A', 'Z', '[', '`', 'a', 'z', '{', 0x7f, 0x80, 0xad, 0xba, 0xc1, 0xe1, 0xfa, 0xff}
	for _, c := range edges {
		for _, d := range edges {
			b := []byte{'a', c, 'b', d, 'c', c, 'd', d}
			want := common(c) && common(d)
			if got := commonWords(word(string(b)), word(string(b))); got != want {
				t.Fatalf("commonWords(%q) = %v; want %v", b, got, want)
			}
		}
	}
}

// TestAllBareMatchesEveryByte compares allBare with IsBareChar read byte
// by byte, on keys of every length to 40 with each byte value at each
// position, the rest being common or other bare bytes.
func TestAllBareMatchesEveryByte(t *testing.T) {
	t.Parallel()
	slow := func(s string) bool {
		for i := 0; i < len(s); i++ {
			if !IsBareChar(s[i]) {
				return false
			}
		}
		return true
	}
	for _, fill := range []string{"a", "Z9", "_~+=", "bench-Q2"} {
		for n := 1; n <= 40; n++ {
			key := []byte(strings.Repeat(fill, n)[:n])
			for i := range n {
				for c := range 256 {
					b := bytes.Clone(key)
					b[i] = byte(c)
					if got, want := allBare(string(b)), slow(string(b)); got != want {
						t.Fatalf("allBare(%q) = %v; want %v", b, got, want)
					}
				}
			}
		}
	}
}
