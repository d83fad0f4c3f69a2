package jcs

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"unicode/utf16"
)

// fuzzSeeds are the corpus both fuzz targets start from.
var fuzzSeeds = []string{
	``,
	`{}`,
	`[]`,
	`null`,
	`-0`,
	`0.1`,
	`1e400`,
	`1e-400`,
	`-1.5e-7`,
	`9007199254740993`,
	`123456789012345678901234567890`,
	`4200.0`,
	`"\u20ac\ud83d\ude00\u0000\u001F\u007f\/"`,
	`"\ud800"`,
	`"\ud800\udc00"`,
	"\"\xff\"",
	"\xef\xbb\xbf{}",
	`{"b":1, "a":2}`,
	`{"a":1,"a":2}`,
	`{"a":1,"\u0061":2}`,
	`{"meta":{"y":[1,{"k":true,"j":false}],"x":null}}`,
	`{"\u20ac":1,"\r":2,"\ufb33":3,"1":4,"\ud83d\ude00":5,"\u0080":6,"\u00f6":7}`,
	`{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001]}`,
	`[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]`,
	`{"a":1} x`,
	`[1,]`,
	paymentJSON,
}

// FuzzCanonicalize checks that Canonicalize never panics and that whatever it
// accepts is valid JSON, is a fixed point, and means what the input meant.
func FuzzCanonicalize(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		out, err := Canonicalize(src)
		if err != nil {
			if out != nil {
				t.Fatalf("output %q returned with error %v", out, err)
			}
			if !isKnownError(err) {
				t.Fatalf("error %v matches no sentinel", err)
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("Canonicalize(%q) = %q, which is not valid JSON", src, out)
		}
		again, err := Canonicalize(out)
		if err != nil {
			t.Fatalf("Canonicalize(%q) error = %v on its own output", out, err)
		}
		if !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %q -> %q -> %q", src, out, again)
		}
		want, err := decodeFloat(src)
		if err != nil {
			t.Fatalf("encoding/json rejects accepted input %q: %v", src, err)
		}
		got, err := decodeFloat(out)
		if err != nil {
			t.Fatalf("encoding/json rejects output %q: %v", out, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("meaning changed: %q decodes to %#v, its canonical form %q to %#v", src, want, out, got)
		}
	})
}

// FuzzMembers checks that Members agrees with Canonicalize.
func FuzzMembers(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		members, err := Members(src)
		canonical, cerr := Canonicalize(src)
		switch {
		case errors.Is(err, ErrNotObject):
			if cerr != nil || len(canonical) == 0 || canonical[0] == '{' {
				t.Fatalf("Members(%q) = ErrNotObject, but Canonicalize = %q, %v", src, canonical, cerr)
			}
			return
		case err != nil:
			if cerr == nil || err.Error() != cerr.Error() {
				t.Fatalf("Members(%q) error = %v, Canonicalize error = %v", src, err, cerr)
			}
			return
		case cerr != nil:
			t.Fatalf("Members(%q) succeeded, Canonicalize error = %v", src, cerr)
		}

		var joined []byte
		joined = append(joined, '{')
		for i, m := range members {
			if i > 0 {
				joined = append(joined, ',')
				prev := utf16.Encode([]rune(members[i-1].Name))
				if slices.Compare(prev, utf16.Encode([]rune(m.Name))) >= 0 {
					t.Fatalf("members %q and %q are out of UTF-16 order", members[i-1].Name, m.Name)
				}
			}
			joined = append(joined, quoteName(m.Name)...)
			joined = append(joined, ':')
			joined = append(joined, m.Value...)
		}
		joined = append(joined, '}')
		if !bytes.Equal(joined, canonical) {
			t.Fatalf("members of %q join to %q, Canonicalize gives %q", src, joined, canonical)
		}
	})
}

func isKnownError(err error) bool {
	for _, target := range []error{ErrSyntax, ErrDuplicateMember, ErrTooDeep, ErrNumber} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// decodeFloat decodes a JSON text with encoding/json, reading every number as
// a float64 the way RFC 8785 does (magnitudes too small for a double read as
// zero).
func decodeFloat(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return toFloat(v)
}

func toFloat(v any) (any, error) {
	switch v := v.(type) {
	case json.Number:
		return strconv.ParseFloat(v.String(), 64)
	case []any:
		for i := range v {
			var err error
			if v[i], err = toFloat(v[i]); err != nil {
				return nil, err
			}
		}
	case map[string]any:
		for k := range v {
			var err error
			if v[k], err = toFloat(v[k]); err != nil {
				return nil, err
			}
		}
	}
	return v, nil
}

// quoteName writes s as an RFC 8785 string, independently of appendQuoted.
func quoteName(s string) string {
	var b bytes.Buffer
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\f':
			b.WriteString(`\f`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte("0123456789abcdef"[r>>4])
			b.WriteByte("0123456789abcdef"[r&0xf])
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
