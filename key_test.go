package idem_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/keyspec"
)

func TestParseKeyAccepts(t *testing.T) {
	t.Parallel()

	long := strings.Repeat("k", idem.MaxKeyLength)
	tests := []struct {
		name  string
		field string
		want  string
	}{
		{"QuotedUUID", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`, "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{"BareStripeToken", `1795977227879855426_mjGTYA`, "1795977227879855426_mjGTYA"},
		{"BareUUID", `8e03978e-40d5-43e8-bc93-6894a57f9324`, "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{"BareWithEveryAllowedPunctuation", `a_b-c.d:e~f/g+h=`, "a_b-c.d:e~f/g+h="},
		{"BareBase64", `dGhpcyBpcyBhIGtleQ==`, "dGhpcyBpcyBhIGtleQ=="},
		{"SingleCharacterBare", `k`, "k"},
		{"SingleCharacterQuoted", `"k"`, "k"},
		{"QuotedEscapedQuote", `"a\"b"`, `a"b`},
		{"QuotedEscapedBackslash", `"a\\b"`, `a\b`},
		{"QuotedOnlyEscapes", `"\\\""`, `\"`},
		{"QuotedSpaceInside", `"order 42"`, "order 42"},
		{"QuotedSpacesOnly", `" "`, " "},
		{"QuotedPunctuationNotAllowedBare", `"a;b,c(d)e<f>g@h[i]j{k}l|m!n#o$p%q&r'*s^t` + "`" + `u?"`, "a;b,c(d)e<f>g@h[i]j{k}l|m!n#o$p%q&r'*s^t`u?"},
		{"QuotedWithIntegerParameter", `"abc";x=1`, "abc"},
		{"QuotedWithParameterWithoutValue", `"abc";retry`, "abc"},
		{"QuotedWithSpaceAfterSemicolon", `"abc"; x=1`, "abc"},
		{"QuotedWithEveryParameterKind", `"abc";n=-12;d=3.25;s="x\"y\\";t=tok/en:1;b=?0;c=?1;y=:AQID+/==:;*star=Tok*;flag`, "abc"},
		{"QuotedWithParameterNamedWithDigitsAndPunctuation", `"abc";a1_-.*=1`, "abc"},
		{"QuotedWithLongStringParameter", `"abc";note="` + strings.Repeat("n", 300) + `"`, "abc"},
		{"QuotedWithDateParameter", `"abc";ts=@1659578233`, "abc"},
		{"QuotedWithNegativeDateParameter", `"abc";ts=@-62135596800`, "abc"},
		{"QuotedWithDisplayStringParameter", `"abc";d=%"caf%c3%a9"`, "abc"},
		{"QuotedWithEveryRFC9651ParameterKind", `"abc";i=1;s="x";t=tok;b=?1;y=:AQ==:;d=@1;p=%"x";f`, "abc"},
		{"TrimsSpaces", `   "abc"   `, "abc"},
		{"TrimsTabs", "\t\"abc\"\t", "abc"},
		{"TrimsAroundBare", " \t abc \t ", "abc"},
		{"TrimsAroundParameters", ` "abc";x=1 `, "abc"},
		{"BareAtLimit", long, long},
		{"QuotedAtLimit", `"` + long + `"`, long},
		{"QuotedAtLimitAfterUnescaping", `"` + long[:idem.MaxKeyLength-1] + `\""`, long[:idem.MaxKeyLength-1] + `"`},
		{"BareAtLimitWithSurroundingSpace", "  " + long + "\t", long},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := idem.ParseKey(tt.field)
			if err != nil {
				t.Fatalf("ParseKey(%q) error = %v, want key %q", tt.field, err, tt.want)
			}
			if got != tt.want {
				t.Fatalf("ParseKey(%q) = %q, want %q", tt.field, got, tt.want)
			}
		})
	}
}

func TestParseKeyRejects(t *testing.T) {
	t.Parallel()

	long := strings.Repeat("k", idem.MaxKeyLength+1)
	tests := []struct {
		name    string
		field   string
		wantErr error
	}{
		{"EmptyField", ``, idem.ErrKeyEmpty},
		{"OnlySpacesAndTabs", " \t \t ", idem.ErrKeyEmpty},
		{"EmptyString", `""`, idem.ErrKeyEmpty},
		{"EmptyStringWithSpaces", `  ""  `, idem.ErrKeyEmpty},
		{"EmptyStringWithParameter", `"";x=1`, idem.ErrKeyEmpty},

		{"BareOverLimit", long, idem.ErrKeyTooLong},
		{"QuotedOverLimit", `"` + long + `"`, idem.ErrKeyTooLong},
		{"QuotedOverLimitAfterUnescaping", `"` + long[:idem.MaxKeyLength] + `\\"`, idem.ErrKeyTooLong},
		{"QuotedFarOverLimit", `"` + strings.Repeat("k", 10000) + `"`, idem.ErrKeyTooLong},

		{"Unterminated", `"abc`, idem.ErrKeyMalformed},
		{"OnlyOpeningQuote", `"`, idem.ErrKeyMalformed},
		{"EndsInsideEscape", `"abc\`, idem.ErrKeyMalformed},
		{"EscapedClosingQuote", `"abc\"`, idem.ErrKeyMalformed},
		{"BadEscapeN", `"a\nb"`, idem.ErrKeyMalformed},
		{"BadEscapeUnicode", `"\u0041"`, idem.ErrKeyMalformed},
		{"BadEscapeSlash", `"a\/b"`, idem.ErrKeyMalformed},
		{"TrailingJunk", `"abc"x`, idem.ErrKeyMalformed},
		{"TrailingSecondString", `"abc""def"`, idem.ErrKeyMalformed},
		{"SpaceBeforeParameter", `"abc" ;x=1`, idem.ErrKeyMalformed},
		{"ListOfStrings", `"a", "b"`, idem.ErrKeyMalformed},
		{"ListWithoutSpace", `"a","b"`, idem.ErrKeyMalformed},
		{"ListWithToken", `"abc",x`, idem.ErrKeyMalformed},
		{"ListOfTokens", `a, b`, idem.ErrKeyMalformed},
		{"InnerList", `("a" "b")`, idem.ErrKeyMalformed},
		{"Dictionary", `key="abc"`, idem.ErrKeyMalformed},
		{"SingleQuoted", `'abc'`, idem.ErrKeyMalformed},

		{"QuotedControlCharacter", "\"a\x01b\"", idem.ErrKeyMalformed},
		{"QuotedTab", "\"a\tb\"", idem.ErrKeyMalformed},
		{"QuotedNewline", "\"a\nb\"", idem.ErrKeyMalformed},
		{"QuotedNUL", "\"a\x00b\"", idem.ErrKeyMalformed},
		{"QuotedDEL", "\"a\x7fb\"", idem.ErrKeyMalformed},
		{"QuotedNonASCII", `"café"`, idem.ErrKeyMalformed},
		{"QuotedInvalidUTF8", "\"a\xffb\"", idem.ErrKeyMalformed},
		{"BareControlCharacter", "a\x01b", idem.ErrKeyMalformed},
		{"BareNewline", "a\nb", idem.ErrKeyMalformed},
		{"BareCarriageReturn", "a\rb", idem.ErrKeyMalformed},
		{"BareNUL", "a\x00b", idem.ErrKeyMalformed},
		{"BareDEL", "a\x7f", idem.ErrKeyMalformed},
		{"BareNonASCII", `café`, idem.ErrKeyMalformed},
		{"BareInvalidUTF8", "\xff\xfe", idem.ErrKeyMalformed},
		{"BareSpaceInside", `a b`, idem.ErrKeyMalformed},
		{"BareTabInside", "a\tb", idem.ErrKeyMalformed},
		{"BareQuoteInside", `ab"c"`, idem.ErrKeyMalformed},
		{"BareComma", `a,b`, idem.ErrKeyMalformed},
		{"BareWithParameter", `abc;x=1`, idem.ErrKeyMalformed},
		{"BareStar", `*abc`, idem.ErrKeyMalformed},
		{"BareOverLimitAndMalformed", long + " x", idem.ErrKeyMalformed},

		{"ParameterWithoutName", `"abc";=1`, idem.ErrKeyMalformed},
		{"ParameterEmpty", `"abc";`, idem.ErrKeyMalformed},
		{"ParameterUppercaseName", `"abc";X=1`, idem.ErrKeyMalformed},
		{"ParameterNameStartsWithDigit", `"abc";1x=1`, idem.ErrKeyMalformed},
		{"ParameterEmptyValue", `"abc";x=`, idem.ErrKeyMalformed},
		{"ParameterBadBoolean", `"abc";x=?2`, idem.ErrKeyMalformed},
		{"ParameterTruncatedBoolean", `"abc";x=?`, idem.ErrKeyMalformed},
		{"ParameterUnterminatedByteSequence", `"abc";x=:AQID`, idem.ErrKeyMalformed},
		{"ParameterBadByteSequence", `"abc";x=:AQ!D:`, idem.ErrKeyMalformed},
		{"ParameterUnterminatedString", `"abc";x="y`, idem.ErrKeyMalformed},
		{"ParameterStringBadEscape", `"abc";x="\y"`, idem.ErrKeyMalformed},
		{"ParameterInnerList", `"abc";x=(1 2)`, idem.ErrKeyMalformed},
		{"ParameterFollowedByJunk", `"abc";x=1"def"`, idem.ErrKeyMalformed},
		{"ParameterFollowedByList", `"abc";x=1, "def"`, idem.ErrKeyMalformed},
		{"ParameterTokenFollowedByJunk", `"abc";x=tok"en"`, idem.ErrKeyMalformed},
		{"ParameterControlCharacter", "\"abc\";x=\"\x01\"", idem.ErrKeyMalformed},
		{"ParameterDateWithoutInteger", `"abc";ts=@`, idem.ErrKeyMalformed},
		{"ParameterDateWithToken", `"abc";ts=@tok`, idem.ErrKeyMalformed},
		{"ParameterDisplayStringWithoutQuote", `"abc";d=%caf`, idem.ErrKeyMalformed},
		{"ParameterUnterminatedDisplayString", `"abc";d=%"caf`, idem.ErrKeyMalformed},
		{"ParameterDisplayStringNonASCII", `"abc";d=%"café"`, idem.ErrKeyMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := idem.ParseKey(tt.field)
			if err == nil {
				t.Fatalf("ParseKey(%q) = %q, want error %v", tt.field, got, tt.wantErr)
			}
			if got != "" {
				t.Errorf("ParseKey(%q) returned key %q with its error", tt.field, got)
			}
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("ParseKey(%q) error = %v, want %v", tt.field, err, tt.wantErr)
			}
			checkKeyError(t, err)
		})
	}
}

// checkKeyError checks that err is a *KeyError that unwraps to one of the
// key sentinels and carries a reason for the client.
func checkKeyError(t *testing.T, err error) {
	t.Helper()
	var ke *idem.KeyError
	if !errors.As(err, &ke) {
		t.Fatalf("error %v (%T) is not a *idem.KeyError", err, err)
	}
	if ke.Reason == "" {
		t.Errorf("KeyError %v has no reason", err)
	}
	matches := 0
	for _, sentinel := range []error{idem.ErrKeyEmpty, idem.ErrKeyTooLong, idem.ErrKeyMalformed, idem.ErrKeyRepeated} {
		if errors.Is(err, sentinel) {
			matches++
		}
	}
	if matches != 1 {
		t.Errorf("error %v matches %d key sentinels, want exactly 1", err, matches)
	}
	if ke.Unwrap() != ke.Err {
		t.Errorf("Unwrap() = %v, want %v", ke.Unwrap(), ke.Err)
	}
	if want := ke.Err.Error() + ": " + ke.Reason; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
	if !strings.HasPrefix(err.Error(), "idem: ") {
		t.Errorf("Error() = %q, want the prefix %q", err.Error(), "idem: ")
	}
}

// TestParseKeyReasonDoesNotEchoKey checks that the reason given to the client
// for an over-long key does not repeat the key.
func TestParseKeyReasonDoesNotEchoKey(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name  string
		field string
	}{
		{"BareOverLimit", strings.Repeat("secret", 50)},
		{"QuotedOverLimit", `"` + strings.Repeat("secret", 50) + `"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := idem.ParseKey(tt.field)
			var ke *idem.KeyError
			if !errors.As(err, &ke) {
				t.Fatalf("ParseKey error = %v, want a *idem.KeyError", err)
			}
			if strings.Contains(ke.Reason, "secretsecret") {
				t.Errorf("Reason %q repeats the key", ke.Reason)
			}
		})
	}
}

func TestKeyFromHeader(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name        string
		fields      []string // values of separate Idempotency-Key fields; nil for none
		headerName  string   // defaults to idem.HeaderKey
		wantKey     string
		wantPresent bool
		wantErr     error
	}{
		{name: "NoField", wantPresent: false},
		{name: "OneQuotedField", fields: []string{`"key-1"`}, wantKey: "key-1", wantPresent: true},
		{name: "OneBareField", fields: []string{`key-1`}, wantKey: "key-1", wantPresent: true},
		{name: "LowercaseHeaderName", fields: []string{`"key-1"`}, headerName: "idempotency-key", wantKey: "key-1", wantPresent: true},
		{name: "EmptyField", fields: []string{""}, wantPresent: true, wantErr: idem.ErrKeyEmpty},
		{name: "MalformedField", fields: []string{`"key-1`}, wantPresent: true, wantErr: idem.ErrKeyMalformed},
		{name: "OverLongField", fields: []string{strings.Repeat("k", 256)}, wantPresent: true, wantErr: idem.ErrKeyTooLong},
		{name: "TwoDifferentFields", fields: []string{`"key-1"`, `"key-2"`}, wantPresent: true, wantErr: idem.ErrKeyRepeated},
		{name: "TwoEqualFields", fields: []string{`"key-1"`, `"key-1"`}, wantPresent: true, wantErr: idem.ErrKeyRepeated},
		{name: "TwoFieldsOneEmpty", fields: []string{`"key-1"`, ``}, wantPresent: true, wantErr: idem.ErrKeyRepeated},
		{name: "ThreeFields", fields: []string{"a", "b", "c"}, wantPresent: true, wantErr: idem.ErrKeyRepeated},
		{name: "ListInOneField", fields: []string{`"key-1", "key-2"`}, wantPresent: true, wantErr: idem.ErrKeyMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{"Content-Type": {"application/json"}}
			name := tt.headerName
			if name == "" {
				name = idem.HeaderKey
			}
			for _, v := range tt.fields {
				h.Add(name, v)
			}
			key, present, err := idem.KeyFromHeader(h)
			if present != tt.wantPresent {
				t.Errorf("present = %v, want %v", present, tt.wantPresent)
			}
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("KeyFromHeader error = %v", err)
				}
				if key != tt.wantKey {
					t.Errorf("key = %q, want %q", key, tt.wantKey)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("KeyFromHeader error = %v, want %v", err, tt.wantErr)
			}
			if key != "" {
				t.Errorf("key = %q returned with error %v", key, err)
			}
			checkKeyError(t, err)
		})
	}
}

// FuzzParseKey checks that ParseKey never panics, that every key it accepts
// is 1 to MaxKeyLength printable ASCII characters, that a bare key is
// accepted exactly when it is made of bare-key characters, that a quoted key
// agrees with an independent sf-string parser, and that every accepted key
// round-trips when written as an sf-string.
func FuzzParseKey(f *testing.F) {
	long := strings.Repeat("k", idem.MaxKeyLength)
	for _, s := range []string{
		``,
		` `,
		`""`,
		`"`,
		`k`,
		`"8e03978e-40d5-43e8-bc93-6894a57f9324"`,
		`8e03978e-40d5-43e8-bc93-6894a57f9324`,
		`1795977227879855426_mjGTYA`,
		`a_b-c.d:e~f/g+h=`,
		`"a\"b\\c"`,
		`"a\nb"`,
		`"abc\`,
		`"abc`,
		`"abc"x`,
		`"a", "b"`,
		`a, b`,
		`("a" "b")`,
		`"abc";x=1`,
		`"abc"; x=1;y`,
		`"abc";n=-12;d=3.25;s="x\"y";t=tok/en:1;b=?0;y=:AQID:;*s=T*`,
		`"abc";x=`,
		`"abc";X=1`,
		`"abc";x=?2`,
		`"abc";x=:AQ`,
		`"abc";ts=@1659578233`,
		`"abc";d=%"caf%c3%a9"`,
		`"abc";note="` + strings.Repeat("n", 300) + `"`,
		`"";x=1`,
		" \t\"abc\"\t ",
		" \tabc\t ",
		"\"a\x01b\"",
		"a\x00b",
		"\"a\x7fb\"",
		"\"caf\xc3\xa9\"",
		"caf\xc3\xa9",
		long,
		long + "k",
		`"` + long + `"`,
		`"` + long + `k"`,
		`"` + long[1:] + `\""`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, field string) {
		key, err := idem.ParseKey(field)
		trimmed := strings.Trim(field, " \t")
		if err != nil {
			if key != "" {
				t.Fatalf("ParseKey(%q) = %q with error %v", field, key, err)
			}
			checkKeyError(t, err)
		} else {
			if len(key) < 1 || len(key) > idem.MaxKeyLength {
				t.Fatalf("ParseKey(%q) = %q, %d characters", field, key, len(key))
			}
			for i := 0; i < len(key); i++ {
				if key[i] < 0x20 || key[i] > 0x7e {
					t.Fatalf("ParseKey(%q) = %q, with byte 0x%02x at %d", field, key, key[i], i)
				}
			}
			quoted := quoteSFString(key)
			if again, err := idem.ParseKey(quoted); err != nil || again != key {
				t.Fatalf("ParseKey(%q) = %q, but its sf-string %q parses as %q, %v", field, key, quoted, again, err)
			}
			withParams := " " + quoted + ";p=1;q \t"
			if again, err := idem.ParseKey(withParams); err != nil || again != key {
				t.Fatalf("ParseKey(%q) = %q, but %q parses as %q, %v", field, key, withParams, again, err)
			}
		}

		if !strings.HasPrefix(trimmed, `"`) {
			// A bare key: accepted exactly when every character is allowed.
			want := trimmed != "" && len(trimmed) <= idem.MaxKeyLength && isBareKey(trimmed)
			if want != (err == nil) {
				t.Fatalf("ParseKey(%q) = %q, %v; bare-key rules say accepted = %v", field, key, err, want)
			}
			if err == nil && key != trimmed {
				t.Fatalf("ParseKey(%q) = %q, want the bare key %q", field, key, trimmed)
			}
			return
		}
		value, rest, ok := referenceSFString(trimmed)
		switch {
		case !ok:
			if err == nil {
				t.Fatalf("ParseKey(%q) = %q, but the field is not an sf-string", field, key)
			}
		case rest == "":
			want := value != "" && len(value) <= idem.MaxKeyLength
			if want != (err == nil) || (want && key != value) {
				t.Fatalf("ParseKey(%q) = %q, %v; the sf-string is %q", field, key, err, value)
			}
		case rest[0] != ';':
			if err == nil {
				t.Fatalf("ParseKey(%q) = %q, but %q follows the string", field, key, rest)
			}
		case err == nil && key != value:
			t.Fatalf("ParseKey(%q) = %q, want the string %q", field, key, value)
		}
	})
}

// quoteSFString writes s as an RFC 9651 sf-string.
func quoteSFString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}

// isBareKey reports whether s is made only of the characters a bare key may
// hold: letters, digits and "_-.:~/+=".
func isBareKey(s string) bool {
	for _, r := range s {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("_-.:~/+=", r)) {
			return false
		}
	}
	return true
}

// referenceSFString parses the sf-string at the start of s by the grammar of
// RFC 9651 section 3.3.3, without a length limit, and returns its value and
// what follows it.
func referenceSFString(s string) (value, rest string, ok bool) {
	if !strings.HasPrefix(s, `"`) {
		return "", "", false
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return b.String(), s[i+1:], true
		case c == '\\':
			if i+1 == len(s) || (s[i+1] != '"' && s[i+1] != '\\') {
				return "", "", false
			}
			i++
			b.WriteByte(s[i])
		case c >= 0x20 && c <= 0x7e:
			b.WriteByte(c)
		default:
			return "", "", false
		}
	}
	return "", "", false
}

// TestHeaderKeyIsCanonical checks that HeaderKey is in canonical form, as
// the middleware looks it up without canonicalising it.
func TestHeaderKeyIsCanonical(t *testing.T) {
	t.Parallel()
	if got := http.CanonicalHeaderKey(idem.HeaderKey); got != idem.HeaderKey {
		t.Errorf("CanonicalHeaderKey(%q) = %q", idem.HeaderKey, got)
	}
}

// FuzzKeyFromPath checks that a path segment names the key it is, or, when
// it starts with '"', the key of the sf-string it is, as ParseKey reads the
// field; and that every key it accepts is named by its sf-string too.
func FuzzKeyFromPath(f *testing.F) {
	for _, s := range []string{"", "k", "order-1", "a/b", "a b", `"k"`, `"a\"b\\c"`, `"k";v=1`, `"k`, `""`, `"k"x`, `k"`, "a\x01b", strings.Repeat("k", idem.MaxKeyLength+1)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, segment string) {
		key, err := idem.KeyFromPath(segment)
		if strings.HasPrefix(segment, `"`) {
			want, wantErr := idem.ParseKey(segment)
			if key != want || (err == nil) != (wantErr == nil) {
				t.Fatalf("KeyFromPath(%q) = %q, %v; ParseKey %q, %v", segment, key, err, want, wantErr)
			}
		} else if checkErr := keyspec.Check(segment); (err == nil) != (checkErr == nil) || err == nil && key != segment {
			t.Fatalf("KeyFromPath(%q) = %q, %v; want the segment itself, or an error as keyspec.Check says (%v)", segment, key, err, checkErr)
		}
		if err != nil {
			var ke *idem.KeyError
			if !errors.As(err, &ke) || ke.Reason == "" {
				t.Fatalf("KeyFromPath(%q) error = %v: want a *KeyError with a reason for the client", segment, err)
			}
			return
		}
		if again, err := idem.KeyFromPath(keyspec.Quote(key)); err != nil || again != key {
			t.Fatalf("KeyFromPath of the sf-string of %q = %q, %v", key, again, err)
		}
	})
}
