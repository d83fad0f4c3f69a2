package jcs

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf16"
)

func TestCanonicalize(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		in   string
		want string
	}{
		{
			// RFC 8785 section 3.2.2, with the output of section 3.2.3.
			name: "RFCSample",
			in: `{
  "numbers": [333333333.33333329, 1E30, 4.50,
              2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`,
			want: `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`,
		},
		{
			// RFC 8785 section 3.2.3: names sort by UTF-16 code units, so the
			// emoji (D83D DE00) comes before U+FB33.
			name: "RFCSortingSample",
			in: `{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`,
			want: "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\"," +
				"\"\u00f6\":\"Latin Small Letter O With Diaeresis\",\"\u20ac\":\"Euro Sign\"," +
				"\"\U0001f600\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}",
		},
		{name: "RemovesWhitespace", in: " \t\r\n{ \"a\" :\n[ 1 , 2 ] } \n", want: `{"a":[1,2]}`},
		{name: "SortsMembers", in: `{"b":1, "a":2}`, want: `{"a":2,"b":1}`},
		{name: "KeepsSortedMembers", in: `{"a":2,"b":1}`, want: `{"a":2,"b":1}`},
		{name: "SortsNestedMembers", in: `{"z":{"y":[{"d":4,"c":3}],"x":null},"a":[]}`, want: `{"a":[],"z":{"x":null,"y":[{"c":3,"d":4}]}}`},
		{name: "SortsPrefixFirst", in: `{"ab":1,"a":2,"":3}`, want: `{"":3,"a":2,"ab":1}`},
		{name: "SortsByBytesNotCase", in: `{"a":1,"B":2,"_":3}`, want: `{"B":2,"_":3,"a":1}`},
		{name: "SortsUnescapedNames", in: `{"\u0062":1,"a":2}`, want: `{"a":2,"b":1}`},
		{name: "KeepsArrayOrder", in: `[3,1,2]`, want: `[3,1,2]`},
		{name: "EmptyObject", in: `{ }`, want: `{}`},
		{name: "EmptyArray", in: `[ ]`, want: `[]`},
		{name: "EmptyString", in: `""`, want: `""`},
		{name: "EmptyName", in: `{"":""}`, want: `{"":""}`},
		{name: "True", in: `true`, want: `true`},
		{name: "False", in: ` false `, want: `false`},
		{name: "Null", in: `null`, want: `null`},
		{name: "IntegerAsIs", in: `4200`, want: `4200`},
		{name: "FractionOfZeros", in: `4200.0`, want: `4200`},
		{name: "Exponent", in: `4.2e3`, want: `4200`},
		{name: "UpperExponent", in: `42E+2`, want: `4200`},
		{name: "NegativeZero", in: `-0`, want: `0`},
		{name: "NegativeZeroFraction", in: `-0.0e-5`, want: `0`},
		{name: "Negative", in: `-12.50`, want: `-12.5`},
		{name: "Underflow", in: `1e-400`, want: `0`},
		{name: "NegativeUnderflow", in: `-1e-400`, want: `0`},
		{name: "LargestDouble", in: `1.7976931348623157e308`, want: `1.7976931348623157e+308`},
		{name: "BeyondSafeInteger", in: `9007199254740993`, want: `9007199254740992`},
		{name: "FifteenDigits", in: `999999999999999`, want: `999999999999999`},
		{name: "SixteenDigits", in: `1234567890123456`, want: `1234567890123456`},
		{name: "TwentyDigits", in: `12345678901234567890`, want: `12345678901234567000`},
		{name: "ExponentAt21", in: `1000000000000000000000`, want: `1e+21`},
		{name: "LongFraction", in: `0.1000000000000000055511151231257827`, want: `0.1`},
		{name: "SmallFraction", in: `0.000001`, want: `0.000001`},
		{name: "SmallerFraction", in: `0.0000001`, want: `1e-7`},
		{name: "SmallExponentWithDigits", in: `15e-8`, want: `1.5e-7`},
		{name: "LiteralUnicode", in: `"€ö😀"`, want: `"€ö😀"`},
		{name: "UnescapesUnicode", in: `"\u20ac\u00F6"`, want: `"€ö"`},
		{name: "UnescapesSurrogatePair", in: `"\uD83D\uDE00"`, want: `"😀"`},
		{name: "UnescapesSolidus", in: `"a\/b"`, want: `"a/b"`},
		{name: "KeepsShortEscapes", in: `"\b\f\n\r\t\"\\"`, want: `"\b\f\n\r\t\"\\"`},
		{name: "ShortEscapesFromHex", in: `"\u0008\u000C\u000a\u000D\u0009\u0022\u005C"`, want: `"\b\f\n\r\t\"\\"`},
		{name: "LowercaseHexEscapes", in: `"\u001F\u000B\u0000"`, want: `"\u001f\u000b\u0000"`},
		{name: "LiteralDelete", in: `"\u007f"`, want: "\"\x7f\""},
		{name: "LiteralC1Control", in: `"\u0080\u009f"`, want: "\"\u0080\u009f\""},
		{name: "LiteralLineSeparator", in: `"\u2028\u2029"`, want: "\"\u2028\u2029\""},
		{name: "LiteralNoncharacter", in: `"\uffff"`, want: "\"\uffff\""},
		{name: "LiteralHTMLCharacters", in: `"<a&b>"`, want: `"<a&b>"`},
		{name: "EscapedName", in: `{"a\nb":1,"\u0000":2}`, want: `{"\u0000":2,"a\nb":1}`},
		{name: "DeepButAllowed", in: strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth), want: strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Canonicalize([]byte(tt.in))
			if err != nil {
				t.Fatalf("Canonicalize(%q) error = %v", tt.in, err)
			}
			if string(got) != tt.want {
				t.Fatalf("Canonicalize(%q)\n got %s\nwant %s", tt.in, got, tt.want)
			}
			again, err := Canonicalize(got)
			if err != nil || !bytes.Equal(again, got) {
				t.Fatalf("Canonicalize(%q) = %q, %v; want the input back", got, again, err)
			}
		})
	}
}

func TestCanonicalizeEquivalentBodies(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		a, b string
	}{
		{name: "MemberOrder", a: `{"b":1, "a":2}`, b: `{"a":2,"b":1}`},
		{name: "NumberSpelling", a: `{"amount":4200}`, b: `{"amount":4.2e3}`},
		{name: "StringEscapes", a: `{"name":"Jos\u00e9"}`, b: `{"name":"José"}`},
		{name: "NameEscapes", a: `{"\u0063urrency":"EUR"}`, b: `{"currency":"EUR"}`},
		{name: "Whitespace", a: "{\n  \"items\": [ 1, 2 ]\n}\n", b: `{"items":[1,2]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, err := Canonicalize([]byte(tt.a))
			if err != nil {
				t.Fatalf("Canonicalize(%q) error = %v", tt.a, err)
			}
			b, err := Canonicalize([]byte(tt.b))
			if err != nil {
				t.Fatalf("Canonicalize(%q) error = %v", tt.b, err)
			}
			if !bytes.Equal(a, b) {
				t.Fatalf("canonical forms differ: %s != %s", a, b)
			}
		})
	}

	t.Run("DifferentValuesDiffer", func(t *testing.T) {
		t.Parallel()
		a, errA := Canonicalize([]byte(`{"amount":4200}`))
		b, errB := Canonicalize([]byte(`{"amount":4201}`))
		if errA != nil || errB != nil {
			t.Fatalf("errors: %v, %v", errA, errB)
		}
		if bytes.Equal(a, b) {
			t.Fatalf("different amounts share the canonical form %s", a)
		}
	})
}

func TestCanonicalizeErrors(t *testing.T) {
	t.Parallel()

	nest := func(open, close string, n int) string {
		return strings.Repeat(open, n) + "1" + strings.Repeat(close, n)
	}
	tests := []struct {
		name string
		in   string
		want error
		// offset is checked for syntax errors when it is not -1.
		offset int64
		// pointer is checked for duplicate member errors.
		pointer string
	}{
		{name: "Empty", in: ``, want: ErrSyntax, offset: 0},
		{name: "OnlyWhitespace", in: " \n", want: ErrSyntax, offset: 2},
		{name: "TrailingValue", in: `1 2`, want: ErrSyntax, offset: 2},
		{name: "TrailingObject", in: `{}{}`, want: ErrSyntax, offset: 2},
		{name: "TrailingGarbage", in: `{"a":1} x`, want: ErrSyntax, offset: 8},
		{name: "TrailingNUL", in: "true\x00", want: ErrSyntax, offset: 4},
		{name: "TrailingComma", in: `[1,]`, want: ErrSyntax, offset: 3},
		{name: "TrailingCommaInObject", in: `{"a":1,}`, want: ErrSyntax, offset: 7},
		{name: "MissingColon", in: `{"a" 1}`, want: ErrSyntax, offset: 5},
		{name: "MissingComma", in: `[1 2]`, want: ErrSyntax, offset: 3},
		{name: "UnquotedName", in: `{a:1}`, want: ErrSyntax, offset: 1},
		{name: "NumberName", in: `{1:1}`, want: ErrSyntax, offset: 1},
		{name: "SingleQuotes", in: `'a'`, want: ErrSyntax, offset: 0},
		{name: "Comment", in: `[1 /* c */]`, want: ErrSyntax, offset: 3},
		{name: "UnclosedArray", in: `[1`, want: ErrSyntax, offset: 2},
		{name: "UnclosedObject", in: `{"a":1`, want: ErrSyntax, offset: 6},
		{name: "MissingValue", in: `{"a":}`, want: ErrSyntax, offset: 5},
		{name: "ByteOrderMark", in: "\ufeff{}", want: ErrSyntax, offset: 0},
		{name: "LeadingZero", in: `01`, want: ErrSyntax, offset: 1},
		{name: "LeadingZeroInArray", in: `[-012]`, want: ErrSyntax, offset: 3},
		{name: "LeadingPlus", in: `+1`, want: ErrSyntax, offset: 0},
		{name: "LeadingDot", in: `.5`, want: ErrSyntax, offset: 0},
		{name: "TrailingDot", in: `1.`, want: ErrSyntax, offset: 2},
		{name: "EmptyExponent", in: `1e`, want: ErrSyntax, offset: 2},
		{name: "SignOnlyExponent", in: `1e+`, want: ErrSyntax, offset: 3},
		{name: "LoneMinus", in: `-`, want: ErrSyntax, offset: 1},
		{name: "MinusLetter", in: `-a`, want: ErrSyntax, offset: 1},
		{name: "NaN", in: `NaN`, want: ErrSyntax, offset: 0},
		{name: "Infinity", in: `-Infinity`, want: ErrSyntax, offset: 1},
		{name: "HexNumber", in: `0x10`, want: ErrSyntax, offset: 1},
		{name: "ShortLiteral", in: `tru`, want: ErrSyntax, offset: 0},
		{name: "UppercaseLiteral", in: `NULL`, want: ErrSyntax, offset: 0},
		{name: "UnclosedString", in: `"abc`, want: ErrSyntax, offset: 4},
		{name: "BackslashAtEnd", in: `"abc\`, want: ErrSyntax, offset: 5},
		{name: "UnknownEscape", in: `"a\x"`, want: ErrSyntax, offset: 2},
		{name: "ShortUnicodeEscape", in: `"\u12"`, want: ErrSyntax, offset: 1},
		{name: "BadHexEscape", in: `"\u12g4"`, want: ErrSyntax, offset: 1},
		{name: "RawTab", in: "\"a\tb\"", want: ErrSyntax, offset: 2},
		{name: "RawNewline", in: "\"a\nb\"", want: ErrSyntax, offset: 2},
		{name: "RawNUL", in: "\"\x00\"", want: ErrSyntax, offset: 1},
		{name: "InvalidUTF8", in: "\"a\xffb\"", want: ErrSyntax, offset: 2},
		{name: "TruncatedUTF8", in: "\"\xe2\x82\"", want: ErrSyntax, offset: 1},
		{name: "OverlongUTF8", in: "\"\xc0\xaf\"", want: ErrSyntax, offset: 1},
		{name: "UTF8Surrogate", in: "\"\xed\xa0\x80\"", want: ErrSyntax, offset: 1},
		{name: "InvalidUTF8InName", in: "{\"\xff\":1}", want: ErrSyntax, offset: 2},
		{name: "InvalidUTF8OutsideString", in: "[\xff]", want: ErrSyntax, offset: 1},
		{name: "LoneHighSurrogate", in: `"\ud800"`, want: ErrSyntax, offset: 1},
		{name: "LoneLowSurrogate", in: `"ab\udc00"`, want: ErrSyntax, offset: 3},
		{name: "HighSurrogateThenLetter", in: `"\ud800x"`, want: ErrSyntax, offset: 1},
		{name: "HighSurrogateThenBMPEscape", in: `"\ud800\u0041"`, want: ErrSyntax, offset: 1},
		{name: "TwoHighSurrogates", in: `"\ud800\ud800"`, want: ErrSyntax, offset: 1},
		{name: "ReversedPair", in: `"\ude00\ud83d"`, want: ErrSyntax, offset: 1},
		{name: "LoneSurrogateInName", in: `{"\udfff":1}`, want: ErrSyntax, offset: 2},
		{name: "HighSurrogateThenShortEscape", in: `"\ud800\n"`, want: ErrSyntax, offset: 1},

		{name: "NumberOverflow", in: `1e400`, want: ErrNumber, offset: -1},
		{name: "NegativeNumberOverflow", in: `[-1e400]`, want: ErrNumber, offset: -1},
		{name: "JustAboveLargestDouble", in: `{"a":1.7976931348623159e308}`, want: ErrNumber, offset: -1},
		{name: "HugeInteger", in: "1" + strings.Repeat("0", 400), want: ErrNumber, offset: -1},

		{name: "ArraysTooDeep", in: nest("[", "]", MaxDepth+1), want: ErrTooDeep, offset: -1},
		{name: "ObjectsTooDeep", in: nest(`{"a":`, "}", MaxDepth+1), want: ErrTooDeep, offset: -1},
		{name: "UnclosedTooDeep", in: strings.Repeat("[", 100000), want: ErrTooDeep, offset: -1},

		{name: "DuplicateAtTop", in: `{"customer":"a","amount":1,"customer":"b"}`, want: ErrDuplicateMember, pointer: "/customer"},
		{name: "DuplicateNested", in: `{"meta":{"a":1,"b":2,"a":1}}`, want: ErrDuplicateMember, pointer: "/meta/a"},
		{name: "DuplicateInArray", in: `{"items":[{"sku":"x"},{"sku":"y","qty":1,"sku":"y"}]}`, want: ErrDuplicateMember, pointer: "/items/1/sku"},
		{name: "DuplicateInTopArray", in: `[0,[1,{"k":1,"k":1}]]`, want: ErrDuplicateMember, pointer: "/1/1/k"},
		{name: "DuplicateAfterUnescaping", in: `{"a":1,"\u0061":2}`, want: ErrDuplicateMember, pointer: "/a"},
		{name: "DuplicateEmptyName", in: `{"":1,"":2}`, want: ErrDuplicateMember, pointer: "/"},
		{name: "DuplicateNameWithSlashAndTilde", in: `{"a/b~c":1,"a/b~c":2}`, want: ErrDuplicateMember, pointer: "/a~1b~0c"},
		{name: "DuplicateSupplementaryName", in: `{"\ud83d\ude00":1,"😀":2}`, want: ErrDuplicateMember, pointer: "/😀"},
		{name: "DuplicateInNamedMember", in: `{"x~":{"y/":{"z":1,"z":2}}}`, want: ErrDuplicateMember, pointer: "/x~0/y~1/z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Canonicalize([]byte(tt.in))
			if !errors.Is(err, tt.want) {
				t.Fatalf("Canonicalize(%.40q) = %.40q, %v; want error %v", tt.in, got, err, tt.want)
			}
			if got != nil {
				t.Errorf("Canonicalize returned output %q with an error", got)
			}
			switch tt.want {
			case ErrSyntax:
				var se *SyntaxError
				if !errors.As(err, &se) {
					t.Fatalf("error %v is not a *SyntaxError", err)
				}
				if tt.offset >= 0 && se.Offset != tt.offset {
					t.Errorf("Offset = %d, want %d (%v)", se.Offset, tt.offset, err)
				}
			case ErrDuplicateMember:
				var de *DuplicateMemberError
				if !errors.As(err, &de) {
					t.Fatalf("error %v is not a *DuplicateMemberError", err)
				}
				if de.Pointer != tt.pointer {
					t.Errorf("Pointer = %q, want %q", de.Pointer, tt.pointer)
				}
			}
			// Members reports the same error for bad input, never ErrNotObject.
			if _, merr := Members([]byte(tt.in)); !errors.Is(merr, tt.want) {
				t.Errorf("Members error = %v, want %v", merr, tt.want)
			}
		})
	}
}

func TestErrorMessages(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		in   string
		want string
	}{
		{name: "Syntax", in: `[1,]`, want: "jcs: syntax error at offset 3: invalid character at start of value"},
		{name: "Duplicate", in: `{"meta":{"a":1,"a":2}}`, want: `jcs: duplicate object member "/meta/a"`},
		{name: "Number", in: `[1e400]`, want: "jcs: number out of range: 1e400 at offset 1"},
		{name: "Depth", in: strings.Repeat("[", MaxDepth+1), want: "jcs: nesting too deep: more than 256 levels at offset 256"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Canonicalize([]byte(tt.in))
			if err == nil || err.Error() != tt.want {
				t.Fatalf("error = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestMembers(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		in   string
		want []Member
	}{
		{
			name: "SortedAndCanonical",
			in:   `{"b":[2, 1.0],"a":{"y":1,"x":2e0}, "\u00e9":"\u0041"}`,
			want: []Member{
				{Name: "a", Value: []byte(`{"x":2,"y":1}`)},
				{Name: "b", Value: []byte(`[2,1]`)},
				{Name: "é", Value: []byte(`"A"`)},
			},
		},
		{
			name: "UnescapedNames",
			in:   `{"a\"b":true,"\ud83d\ude00":null,"\ufb33":"x","line\nbreak":-0}`,
			want: []Member{
				{Name: "a\"b", Value: []byte(`true`)},
				{Name: "line\nbreak", Value: []byte(`0`)},
				{Name: "😀", Value: []byte(`null`)},
				{Name: "\ufb33", Value: []byte(`"x"`)},
			},
		},
		{name: "Empty", in: ` { } `, want: []Member{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Members([]byte(tt.in))
			if err != nil {
				t.Fatalf("Members(%q) error = %v", tt.in, err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("Members(%q) = %q, want %q", tt.in, got, tt.want)
			}
			for i := range got {
				if got[i].Name != tt.want[i].Name || !bytes.Equal(got[i].Value, tt.want[i].Value) {
					t.Errorf("member %d = %q: %s, want %q: %s", i, got[i].Name, got[i].Value, tt.want[i].Name, tt.want[i].Value)
				}
			}
		})
	}

	t.Run("NotObject", func(t *testing.T) {
		t.Parallel()
		for _, in := range []string{`[]`, `[{"a":1}]`, `1`, `"{}"`, `null`, `true`} {
			if got, err := Members([]byte(in)); !errors.Is(err, ErrNotObject) || got != nil {
				t.Errorf("Members(%q) = %q, %v; want ErrNotObject", in, got, err)
			}
		}
	})

	t.Run("ValuesDoNotAlias", func(t *testing.T) {
		t.Parallel()
		got, err := Members([]byte(`{"a":1,"b":2}`))
		if err != nil {
			t.Fatal(err)
		}
		_ = append(got[0].Value, "999"...)
		if string(got[1].Value) != "2" {
			t.Fatalf("appending to one value changed the next to %q", got[1].Value)
		}
	})
}

// paymentJSON is a typical 200-byte payment request body.
const paymentJSON = `{"amount": 4200, "currency": "EUR", "customer": "cus_8f3a2b1c",
 "description": "Order #1234", "capture": true,
 "metadata": {"order_id": "1234", "channel": "web"},
 "payment_method": "pm_card_visa"}`

func BenchmarkCanonicalize(b *testing.B) {
	src := []byte(paymentJSON)
	b.ReportAllocs()
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if _, err := Canonicalize(src); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMembers(b *testing.B) {
	src := []byte(paymentJSON)
	b.ReportAllocs()
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if _, err := Members(src); err != nil {
			b.Fatal(err)
		}
	}
}

// TestMembersSortedWhateverTheirNumber checks both ways objects are sorted:
// by insertion when they have few members, and otherwise not.
func TestMembersSortedWhateverTheirNumber(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2, 3, 12, 13, 40} {
		var src strings.Builder
		src.WriteByte('{')
		for i := n; i > 0; i-- {
			if i < n {
				src.WriteByte(',')
			}
			fmt.Fprintf(&src, `"m%03d":{"z":%d,"a":[%d]}`, i, i, i)
		}
		src.WriteByte('}')
		members, err := Members([]byte(src.String()))
		if err != nil {
			t.Fatalf("Members(%d members) error = %v", n, err)
		}
		for i, m := range members {
			if want := fmt.Sprintf("m%03d", i+1); m.Name != want || string(m.Value) != fmt.Sprintf(`{"a":[%d],"z":%d}`, i+1, i+1) {
				t.Fatalf("%d members: member %d = %s %s, want %s sorted", n, i, m.Name, m.Value, want)
			}
		}
	}
}

// TestMembersSortedByCodeUnits checks the order of names that share their
// first bytes, differ in length, hold non-ASCII characters or escapes, or
// sort differently in UTF-16 than in UTF-8, in objects small enough to be
// sorted by insertion and large enough not to be.
func TestMembersSortedByCodeUnits(t *testing.T) {
	t.Parallel()
	names := []string{
		`abcdefgh2`, `abcdefgh1`, `abcdefg`, `abcdef`, `abc`, `ab`, `a`, `b`,
		`abcdefg\u0000`, `\u0061bcdefgh3`, `z`, `é`, `\uffff`, `😀`, `abcdefgé`, `abcdefé`,
		"\ue000", "x\uffff", "x😀", // raw: after 😀 in UTF-16, before it in UTF-8
	}
	for _, n := range []int{3, 8, 12, len(names)} {
		var src strings.Builder
		src.WriteByte('{')
		for i, name := range names[:n] {
			if i > 0 {
				src.WriteByte(',')
			}
			fmt.Fprintf(&src, `"%s":%d`, name, i)
		}
		src.WriteByte('}')
		members, err := Members([]byte(src.String()))
		if err != nil {
			t.Fatalf("Members(%s) error = %v", src.String(), err)
		}
		for i := 1; i < len(members); i++ {
			a, b := utf16.Encode([]rune(members[i-1].Name)), utf16.Encode([]rune(members[i].Name))
			if slices.Compare(a, b) >= 0 {
				t.Errorf("%d names: %q before %q, out of UTF-16 order", n, members[i-1].Name, members[i].Name)
			}
		}
	}
}

// TestPlainValueEnd checks the values that PlainValueEnd accepts, and
// that each is its own canonical form, in both forms of numbers.
func TestPlainValueEnd(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		src  string
		want int // the end of the value at 1, after a '['
	}{
		{`["usd"]`, 6}, {`[""]`, 3}, {`["` + "\x7f" + `~/<&>"]`, 9}, {`["abcdefghijklmnopqrstuvwxyz"]`, 29},
		{`[0]`, 2}, {`[7]`, 2}, {`[4200]`, 5}, {`[123456789012345]`, 16},
		{`[true]`, 5}, {`[false]`, 6}, {`[null]`, 5},
		{`["a\"b"]`, -1}, {`["\u0041"]`, -1}, {`["é"]`, -1}, {"[\"a\tb\"]", -1}, {`["abc`, -1},
		{`[1234567890123456]`, -1}, {`[01]`, -1}, {`[00]`, -1}, {`[0.5]`, -1}, {`[1.5]`, -1},
		{`[1e5]`, -1}, {`[1E5]`, -1}, {`[-1]`, -1}, {`[-0]`, -1},
		{`[tru]`, -1}, {`[fals`, -1}, {`[nul]`, -1}, {`[{}]`, -1}, {`[[]]`, -1}, {`[ 1]`, -1}, {`[`, -1},
	} {
		src := []byte(tt.src)
		got := PlainValueEnd(src, 1)
		if got != tt.want {
			t.Errorf("PlainValueEnd(%s, 1) = %d, want %d", tt.src, got, tt.want)
			continue
		}
		if got < 0 {
			continue
		}
		value := src[1:got]
		for _, o := range []Options{{}, {ExactNumbers: true}} {
			if c, err := o.Canonicalize(value); err != nil || !bytes.Equal(c, value) {
				t.Errorf("Canonicalize(%s), exact %v = %s, %v; PlainValueEnd takes it as canonical", value, o.ExactNumbers, c, err)
			}
		}
	}
}

// TestPlainValueEndStrings checks PlainValueEnd's first step over a
// string, which reads its first eight bytes without plainEnd, against the
// byte-by-byte rule: a string ends at its first quote if no byte before
// it is below 0x20, a backslash or not ASCII. Each string of up to 12
// bytes drawn from a few kinds of byte is read at each offset of a longer
// buffer, so that eight bytes are and are not left after its quote.
func TestPlainValueEndStrings(t *testing.T) {
	t.Parallel()
	want := func(src []byte, i int) int {
		for j := i + 1; j < len(src); j++ {
			switch c := src[j]; {
			case c == '"':
				return j + 1
			case c < 0x20 || c == '\\' || c >= 0x80:
				return -1
			}
		}
		return -1
	}
	bytesOf := []byte{'a', '"', '\\', 0x1f, 0x7f, 0xc3, '~'}
	for n := 0; n <= 12; n++ {
		for k := range 200 {
			text := make([]byte, n)
			for x := range text {
				text[x] = bytesOf[(k*7+x*x*3+x*k)%len(bytesOf)]
				if k%3 == 0 {
					text[x] = 'a' + byte(x)
				}
			}
			for pad := range 10 {
				src := append(append([]byte(`"`), text...), strings.Repeat(`"`, min(pad, 1))+strings.Repeat("x", pad)...)
				if got, w := PlainValueEnd(src, 0), want(src, 0); got != w {
					t.Fatalf("PlainValueEnd(%q, 0) = %d, want %d", src, got, w)
				}
			}
		}
	}
	if got := PlainValueEnd([]byte(`"a"`), -1); got != -1 {
		t.Errorf("PlainValueEnd at -1 = %d, want -1", got)
	}
}

// TestDuplicatesInAnyOrder checks that an object that names a member
// twice is rejected whatever the order of its members, for every list of
// up to six names drawn from four: the insertion sort finds the pair.
func TestDuplicatesInAnyOrder(t *testing.T) {
	t.Parallel()
	names := []string{"a", "b", "ab", "\u00e9"}
	var walk func(list []string)
	walk = func(list []string) {
		if len(list) > 0 {
			var b strings.Builder
			b.WriteByte('{')
			seen, dup := map[string]bool{}, false
			for i, n := range list {
				if i > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, "%q:%d", n, i)
				dup = dup || seen[n]
				seen[n] = true
			}
			b.WriteByte('}')
			_, err := Canonicalize([]byte(b.String()))
			var de *DuplicateMemberError
			if gotDup := errors.As(err, &de); gotDup != dup || !dup && err != nil {
				t.Fatalf("Canonicalize(%s) error = %v, want a duplicate: %v", b.String(), err, dup)
			}
		}
		if len(list) == 6 {
			return
		}
		for _, n := range names {
			walk(append(list, n))
		}
	}
	walk(nil)
}
