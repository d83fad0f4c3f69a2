package jcs

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"strings"
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
		if PlainValueEnd(src, 0) == len(src) && (err != nil || !bytes.Equal(out, src)) {
			t.Fatalf("Canonicalize(%q) = %q, %v; PlainValueEnd takes it as canonical", src, out, err)
		}
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

// FuzzCanonicalizeExact checks the ExactNumbers form: it accepts what
// Canonicalize accepts, is valid JSON and a fixed point, differs from RFC
// 8785 only where RFC 8785 changes a number's value, and keeps every
// number's exact value.
func FuzzCanonicalizeExact(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	exact := Options{ExactNumbers: true}
	f.Fuzz(func(t *testing.T, src []byte) {
		out, err := exact.Canonicalize(src)
		rfc, rfcErr := Canonicalize(src)
		if err != nil {
			if rfcErr == nil && !errors.Is(err, ErrNumber) {
				t.Fatalf("exact form of %q failed with %v; RFC 8785 form %q", src, err, rfc)
			}
			return
		}
		if rfcErr != nil {
			t.Fatalf("exact form of %q is %q, but RFC 8785 fails with %v", src, out, rfcErr)
		}
		if !json.Valid(out) {
			t.Fatalf("exact form of %q is %q, which is not valid JSON", src, out)
		}
		if again, err := exact.Canonicalize(out); err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %q -> %q -> %q, %v", src, out, again, err)
		}
		want, err := decodeExact(src)
		if err != nil {
			return // a number beyond what big.Rat should be asked to read
		}
		got, err := decodeExact(out)
		if err != nil {
			t.Fatalf("exact form %q of %q does not decode: %v", out, src, err)
		}
		if !equalExact(got, want) {
			t.Fatalf("value changed: %q -> %q", src, out)
		}
		if !bytes.Equal(out, rfc) {
			if rfcValue, err := decodeExact(rfc); err == nil && equalExact(rfcValue, want) {
				t.Fatalf("exact form %q differs from RFC 8785's %q, which keeps the value of %q", out, rfc, src)
			}
		}
	})
}

// decodeExact decodes a JSON text with every number as a big.Rat. It fails
// for exponents beyond ±10000, which would make big.Rat slow.
func decodeExact(src []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(src))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return toRat(v)
}

func toRat(v any) (any, error) {
	switch v := v.(type) {
	case json.Number:
		s := string(v)
		if i := strings.IndexAny(s, "eE"); i >= 0 {
			if e, err := strconv.Atoi(s[i+1:]); err != nil || e > 10000 || e < -10000 {
				return nil, errors.New("exponent out of range")
			}
		}
		r, ok := new(big.Rat).SetString(s)
		if !ok {
			return nil, errors.New("bad number " + s)
		}
		return r, nil
	case []any:
		for i := range v {
			var err error
			if v[i], err = toRat(v[i]); err != nil {
				return nil, err
			}
		}
	case map[string]any:
		for k := range v {
			r, err := toRat(v[k])
			if err != nil {
				return nil, err
			}
			v[k] = r
		}
	}
	return v, nil
}

func equalExact(a, b any) bool {
	switch a := a.(type) {
	case *big.Rat:
		b, ok := b.(*big.Rat)
		return ok && a.Cmp(b) == 0
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !equalExact(a[i], b[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, av := range a {
			if bv, ok := b[k]; !ok || !equalExact(av, bv) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

// FuzzAppend checks that Append agrees with Canonicalize and Members, with
// and without exact numbers, and leaves what its buffers held in place.
func FuzzAppend(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, src []byte, exact bool) {
		o := Options{ExactNumbers: exact}
		prefix := []byte("prefix:")
		held := []MemberSpan{{Name: []byte("held")}}
		got, err := o.Append(slices.Clip(prefix), src, slices.Clip(held))
		canonical, cerr := o.Canonicalize(src)
		if (err == nil) != (cerr == nil) || err != nil && err.Error() != cerr.Error() {
			t.Fatalf("Append(%q) error = %v, Canonicalize error = %v", src, err, cerr)
		}
		if err != nil {
			return
		}
		if !bytes.HasPrefix(got.Text, prefix) || !bytes.Equal(got.Text[len(prefix):], canonical) {
			t.Fatalf("Append(%q) text = %q, want %q after %q", src, got.Text, canonical, prefix)
		}
		members, merr := o.Members(src)
		if got.IsObject != (merr == nil) {
			t.Fatalf("Append(%q) IsObject = %v, Members error = %v", src, got.IsObject, merr)
		}
		if !got.IsObject {
			if got.Members != nil {
				t.Fatalf("Append(%q) Members = %v for a text that is not an object", src, got.Members)
			}
			return
		}
		if len(got.Members) != len(held)+len(members) || string(got.Members[0].Name) != "held" {
			t.Fatalf("Append(%q) Members = %v, want %d after the one held", src, got.Members, len(members))
		}
		for i, m := range got.Members[len(held):] {
			want := members[i]
			pair := append([]byte(quoteName(want.Name)), ':')
			pair = append(pair, want.Value...)
			if string(m.Name) != want.Name || !bytes.Equal(got.Text[m.ValueStart:m.End], want.Value) || !bytes.Equal(got.Text[m.Start:m.End], pair) {
				t.Fatalf("Append(%q) member %d = %q %q %q, want %q %q", src, i, m.Name, got.Text[m.ValueStart:m.End], got.Text[m.Start:m.End], want.Name, pair)
			}
		}
	})
}
