package fingerprint

// The fingerprint as it was computed before the middleware's hot path was
// made to allocate less, over the canonical JSON as it was before the
// one-pass fingerprint (refjcs_test.go): a reference that the faster code
// must match byte for byte, hash and stored field digests alike, because
// stores keep both, and error for error.

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"math/rand/v2"
	"mime"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemkit/idem/internal/jcs"
)

// refFingerprintOf computes the fingerprint of a request, as [Encoded]
// describes.
func refFingerprintOf(p Params) (Fingerprint, error) {
	f, _, err := refFingerprint(p, false)
	return f, err
}

// refFingerprint computes the fingerprint of a request, with the values of
// each form or query name in the order they came, or, with sortValues, sorted
// as they were before their order became part of the request. moved reports
// whether sorting put some name's values in another order.
func refFingerprint(p Params, sortValues bool) (f Fingerprint, moved bool, err error) {
	query, err := refCanonicalPairs(p.RawQuery, nil, sortValues)
	if err != nil {
		return Fingerprint{}, false, &BodyError{err: ErrMalformedQuery, reason: "the query string does not parse"}
	}
	kind, body, fields, bodyMoved, err := refCanonicalBody(p, sortValues)
	if err != nil {
		return Fingerprint{}, false, err
	}
	h := sha256.New()
	for _, part := range []string{"idem-fingerprint-v1", p.Method, p.Path, query.encoded, kind} {
		refWritePart(h, []byte(part))
	}
	refWritePart(h, body)
	h.Sum(f.Sum[:0])
	f.Kind, f.fields = kind, fields
	return f, query.moved || bodyMoved, nil
}

func refWritePart(h hash.Hash, b []byte) {
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(b)))])
	h.Write(b)
}

func refCanonicalBody(p Params, sortValues bool) (kind string, body []byte, fields []fieldDigest, moved bool, err error) {
	if len(p.Body) == 0 {
		return kindEmpty, nil, nil, false, nil
	}
	media, charset := "", ""
	if p.ContentType != "" {
		m, params, perr := mime.ParseMediaType(p.ContentType)
		if perr != nil && !p.Raw {
			return "", nil, nil, false, &BodyError{err: ErrUnsupportedMediaType, reason: "the Content-Type header does not parse"}
		}
		media, charset = m, params["charset"]
	}
	isJSON := media == "application/json" || strings.HasSuffix(media, "+json")
	isForm := media == "application/x-www-form-urlencoded"
	if (isJSON || isForm) && charset != "" && !strings.EqualFold(charset, "utf-8") {
		// JSON is UTF-8 (RFC 8259), and the form's percent-encoding is
		// decoded as UTF-8; a body in another charset would be compared, and
		// handed to the handler, as bytes it does not hold.
		if p.Raw {
			return kindRaw, p.Body, nil, false, nil
		}
		return "", nil, nil, false, &BodyError{err: ErrUnsupportedMediaType, reason: fmt.Sprintf("charset %q is not supported; send the body in UTF-8 (charset=utf-8, or no charset)", charset)}
	}
	switch {
	case isJSON:
		body, fields, err = refCanonicalJSON(p.Body, p.Exclude)
		return kindJSON, body, fields, false, err
	case isForm:
		exclude := make(map[string]bool, len(p.Exclude))
		for _, ptr := range p.Exclude {
			exclude[refUnescapePointer(ptr)] = true
		}
		form, ferr := refCanonicalPairs(string(p.Body), exclude, sortValues)
		if ferr != nil {
			return "", nil, nil, false, &BodyError{err: ErrMalformedBody, reason: "the form body does not parse"}
		}
		for _, d := range form.fields {
			if !utf8.ValidString(d.pointer) {
				return "", nil, nil, false, &BodyError{err: ErrMalformedBody, reason: "a form field name is not UTF-8 after percent-decoding"}
			}
		}
		return kindForm, []byte(form.encoded), form.fields, form.moved, nil
	case p.Raw:
		return kindRaw, p.Body, nil, false, nil
	case media == "":
		return "", nil, nil, false, &BodyError{err: ErrUnsupportedMediaType, reason: "the request has a body but no Content-Type; send application/json or application/x-www-form-urlencoded"}
	default:
		return "", nil, nil, false, &BodyError{err: ErrUnsupportedMediaType, reason: fmt.Sprintf("content type %q is not supported; send application/json or application/x-www-form-urlencoded", media)}
	}
}

// refCanonicalForm is the canonical form the reference used.
var refCanonicalForm = rjOptions{ExactNumbers: true}

func refCanonicalJSON(src []byte, exclude []string) ([]byte, []fieldDigest, error) {
	members, err := refCanonicalForm.Members(src)
	if errors.Is(err, errRjNotObject) {
		out, err := refCanonicalForm.Canonicalize(src)
		if err != nil {
			return nil, nil, refJsonError(err)
		}
		return out, nil, nil
	}
	if err != nil {
		return nil, nil, refJsonError(err)
	}
	var buf bytes.Buffer
	buf.WriteByte('{')
	fields := make([]fieldDigest, 0, len(members))
	for _, m := range members {
		ptr := refEscapePointer(m.Name)
		if slices.Contains(exclude, ptr) {
			continue
		}
		if len(fields) > 0 {
			buf.WriteByte(',')
		}
		name, _ := json.Marshal(m.Name) // the name is valid UTF-8: it came from the parser
		canonName, err := refCanonicalForm.Canonicalize(name)
		if err != nil {
			return nil, nil, refJsonError(err)
		}
		buf.Write(canonName)
		buf.WriteByte(':')
		buf.Write(m.Value)
		fields = append(fields, refDigestField(ptr, m.Value))
	}
	buf.WriteByte('}')
	refSortFields(fields)
	return buf.Bytes(), fields, nil
}

func refJsonError(err error) error {
	var dup *rjDuplicateMemberError
	if errors.As(err, &dup) {
		return &BodyError{err: ErrDuplicateMember, reason: fmt.Sprintf("the JSON body names %s more than once", dup.Pointer)}
	}
	if errors.Is(err, errRjTooDeep) {
		return &BodyError{err: ErrMalformedBody, reason: "the JSON body is nested too deeply"}
	}
	if errors.Is(err, errRjNumber) {
		return &BodyError{err: ErrMalformedBody, reason: "the JSON body has a number out of range"}
	}
	var syn *rjSyntaxError
	if errors.As(err, &syn) {
		return &BodyError{err: ErrMalformedBody, reason: fmt.Sprintf("the body is not valid JSON (offset %d: %s)", syn.Offset, syn.Msg)}
	}
	return &BodyError{err: ErrMalformedBody, reason: "the body is not valid JSON"}
}

type refPairs struct {
	encoded string
	fields  []fieldDigest
	moved   bool // sortValues put some name's values in another order
}

// refCanonicalPairs parses URL-encoded refPairs and encodes them with names sorted
// and, for each name, values in the order they came, or sorted with sortValues.
func refCanonicalPairs(raw string, exclude map[string]bool, sortValues bool) (refPairs, error) {
	if raw == "" {
		return refPairs{}, nil
	}
	values, err := url.ParseQuery(raw)
	if err != nil {
		return refPairs{}, err
	}
	names := make([]string, 0, len(values))
	for name := range values {
		if !exclude[name] {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var b strings.Builder
	fields := make([]fieldDigest, 0, len(names))
	moved := false
	for _, name := range names {
		vs := slices.Clone(values[name])
		if sortValues {
			sort.Strings(vs)
			moved = moved || !slices.Equal(vs, values[name])
		}
		var fb strings.Builder
		for _, v := range vs {
			if b.Len() > 0 {
				b.WriteByte('&')
			}
			b.WriteString(url.QueryEscape(name))
			b.WriteByte('=')
			b.WriteString(url.QueryEscape(v))
			fb.WriteString(url.QueryEscape(v))
			fb.WriteByte('&')
		}
		ptr := refEscapePointer(name)
		fields = append(fields, refDigestField(ptr, []byte(fb.String())))
	}
	refSortFields(fields)
	return refPairs{encoded: b.String(), fields: fields, moved: moved}, nil
}

func refDigestField(ptr string, value []byte) fieldDigest {
	h := sha256.New()
	refWritePart(h, []byte("idem-field-v1"))
	refWritePart(h, []byte(ptr))
	refWritePart(h, value)
	var sum [32]byte
	h.Sum(sum[:0])
	var d fieldDigest
	d.pointer = ptr
	copy(d.digest[:], sum[:16])
	return d
}

func refSortFields(fields []fieldDigest) {
	sort.Slice(fields, func(i, j int) bool { return fields[i].pointer < fields[j].pointer })
}

func refEscapePointer(name string) string {
	return "/" + strings.ReplaceAll(strings.ReplaceAll(name, "~", "~0"), "/", "~1")
}

func refUnescapePointer(ptr string) string {
	name := strings.TrimPrefix(ptr, "/")
	return strings.ReplaceAll(strings.ReplaceAll(name, "~1", "/"), "~0", "~")
}

// refEncodeFields encodes the field digests for storage, as a small JSON object
// of pointer to base64url digest, with the body's kind under kindMember.
// Stores keep it as opaque bytes.
func refEncodeFields(f Fingerprint) []byte {
	if f.fields == nil { // not an object; an empty object encodes as {"media":...}
		return nil
	}
	m := make(map[string]string, len(f.fields)+1)
	for _, d := range f.fields {
		m[d.pointer] = base64.RawURLEncoding.EncodeToString(d.digest[:])
	}
	m[kindMember] = f.Kind
	out, _ := json.Marshal(m) // a map of strings always marshals
	return out
}

// refSeed is a request of the differential tests' seed corpus.
type refSeed struct {
	query, contentType, body string
	exclude                  []string
}

// refSeeds are the requests FuzzFingerprintMatchesReference starts from
// and TestFingerprintMatchesReferenceMutated mutates: payments as clients
// send them, and the cases where a canonical form is easy to get wrong.
func refSeeds() []refSeed {
	seeds := []refSeed{
		{"", "application/json", fpPaymentJSON, nil},
		{"", "application/json", fpPaymentJSON, []string{"/client_ts", "/absent"}},
		{"", "application/json", `{"amount":4200,"currency":"usd","customer":"cus_bench"}`, nil},
		{"", "application/json", `{"customer":"cus_bench","currency":"usd","amount":4200}`, nil},
		{"", "application/json", "{\n  \"amount\": 4200,\n  \"currency\": \"usd\"\n}\n", nil},
		{"expand=customer&dry_run=1", "application/json; charset=utf-8", `{"amount":4200,"currency":"eur"}`, nil},
		{"", "application/json", `{"amount":4.2e3,"currency":"\u0065ur","metadata":{"b":[1,2.50,{"y":null,"x":true}],"a":"\ud83d\ude00"}}`, nil},
		{"", "application/merchant+json", `{"payment":{"amount":{"value":"42.00","currency":"EUR"}},"reference":"ord-1234","return_url":"https://shop.example/return?x=1&y=2"}`, nil},
		// Names that escape, sort by UTF-16 code units, or need escaping
		// in a pointer or in encoded fields.
		{"", "application/json", `{"a/b":1,"c~d":2,"":3,"\u00e9":4,"\ud83d\ude00":5,"\u20ac":6,"\uff01":7,"a0":8,"<&>":9,"\u2028":10,"q\"\\":11}`, []string{"/a~1b", "/c~0d"}},
		{"", "application/json", `{"\u0000\u001f":1,"a\u007f":2,"a~":3,"a\/b":4}`, []string{"/a~0"}},
		{"", "application/json", `{"\ufb33":1,"\ud83d\ude00":2,"\u00f6":3,"\u0080":4,"1":5,"\r":6}`, nil},
		{"", "application/json", `{"b":{"\ud83d\ude00":1,"\ufb33":2},"a":["\u0000","\"","\\","\/","\b\f\n\r\t","\u001F\u007f\u00e9"]}`, nil},
		// Duplicate names: at the top, nested, in arrays, spelled
		// otherwise, next to a syntax error that comes later.
		{"", "application/json", `{"amount":4200,"amount":1}`, nil},
		{"", "application/json", `{"a":1,"\u0061":2}`, nil},
		{"", "application/json", `{"b":1,"b":2,"a":1,"a":2}`, nil},
		{"", "application/json", `{"x":[{"k":1},{"a/b~":1,"a\/b~":2}]}`, nil},
		{"", "application/json", `{"x":{"y":[0,{"z":1,"z":2}]},"w":1}`, nil},
		{"", "application/json", `{"a":1,"a":2,"b":}`, nil},
		{"", "application/json", `{"m":{"a":1,"a":2},"n":[1,}`, nil},
		{"", "application/json", `[{"sku":"a","qty":2},{"qty":1,"sku":"b"}]`, nil},
		// Flat bodies (see flatJSON), and bodies one step from flat.
		{"", "application/json", `{"a":0,"b":true,"c":false,"d":null,"e":"","f":123456789012345,"g":"` + "\x7f" + `}{"}`, nil},
		{"", "application/json", `{"a":1234567890123456}`, nil},
		{"", "application/json", `{"a":01}`, nil},
		{"", "application/json", `{"a":0.5,"b":1e5,"c":-1,"d":-0}`, nil},
		{"", "application/json", `{"a":1,"ab":2,"b":3}`, nil},
		{"", "application/json", `{"ab":1,"a":2}`, nil},
		{"", "application/json", `{"a}":1,"b{":"}","c,":":"}`, nil},
		{"", "application/json", "{\"a\x7f\":1,\"a~\":2,\"a/\":3,\"<\":4}", nil},
		{"", "application/json", `{"a":"\u0041","b":"\u00e9","c":"é"}`, nil},
		{"", "application/json", `{"a":"x"} `, nil},
		{"", "application/json", `{"a":"x",}`, nil},
		{"", "application/json", `{"a":tru}`, nil},
		{"", "application/json", `{"a":nul}`, nil},
		{"", "application/json", `{"a":fals}`, nil},
		{"", "application/json", `{"a":"x""b":1}`, nil},
		{"", "application/json", `{"a":1}}`, nil},
		{"", "application/json", `{"a":1,"b":2}`, []string{"/a"}},
		{"x=1", "application/json", `{"a":1,"b":2}`, nil},
		{"", "application/json; charset=utf-8", `{"a":1,"b":2}`, nil},
		{"", "application/problem+json", `{"a":1,"b":2}`, nil},
		{"", "application/json", flatFields(maxFlatFields), nil},
		{"", "application/json", flatFields(maxFlatFields + 1), nil},
		// Numbers: -0, out of range, exact, exponents, the short paths.
		{"", "application/json", `{"amount":1e400}`, nil},
		{"", "application/json", `{"amount":-1e400,"b":1}`, nil},
		{"", "application/json", `{"amount":9007199254740993,"b":0.1000000000000000055511151231257827,"c":1e-400,"d":-0.0,"e":100.50,"f":1E+2,"g":0.0000001,"h":123456789012345678901234}`, nil},
		{"", "application/json", `[-0,0,-0.0,0e5,1e21,1e20,123456789012345,1234567890123456,999999999999999999999,1.5e-7,0.000001,1E-7,5e-324,2e-324,1.7976931348623157e308,1.7976931348623159e308]`, nil},
		{"", "application/json", `[1.0,1.50,100.25,0.1,-0.5,12.,.5,01,1e,1e+,-,--1,1.e5,+1]`, nil},
		{"", "application/json", `{"n":1e99999999999999999999}`, nil},
		// Syntax: every place a text can end or go wrong.
		{"", "application/json", `{"amount":`, nil},
		{"", "application/json", " \t\n{ } \n", nil},
		{"", "application/json", "\xef\xbb\xbf{}", nil},
		{"", "application/json", `"just a string"`, nil},
		{"", "application/json", `{"a":1} x`, nil},
		{"", "application/json", `{"a" 1}`, nil},
		{"", "application/json", `{"a":1 "b":2}`, nil},
		{"", "application/json", `{a:1}`, nil},
		{"", "application/json", `[1 2]`, nil},
		{"", "application/json", `[tru]`, nil},
		{"", "application/json", `{"a":"\ud800"}`, nil},
		{"", "application/json", `{"\udc00":1}`, nil},
		{"", "application/json", `{"a":"\ud800\u0041"}`, nil},
		{"", "application/json", `{"a":"\x"}`, nil},
		{"", "application/json", `{"a":"\u12G4"}`, nil},
		{"", "application/json", "{\"a\":\"\xff\"}", nil},
		{"", "application/json", "{\"\xc3\":1}", nil},
		{"", "application/json", "{\"a\":\"x\ty\"}", nil},
		{"", "application/json", `{"a":"\`, nil},
		{"", "application/json", `{"client_ts":1}`, []string{"/client_ts"}},
		// Nesting at the limit and past it.
		{"", "application/json", strings.Repeat("[", 256) + strings.Repeat("]", 256), nil},
		{"", "application/json", strings.Repeat("[", 257) + strings.Repeat("]", 257), nil},
		{"", "application/json", strings.Repeat(`{"a":`, 255) + `{"b":1,"b":2}` + strings.Repeat("}", 255), nil},
		// Forms and queries.
		{"", "application/x-www-form-urlencoded", fpPaymentForm, nil},
		{"", "application/x-www-form-urlencoded", fpPaymentForm + "&client_ts=1", []string{"/client_ts"}},
		{"a=1&a=2", "application/x-www-form-urlencoded; charset=utf-8", `amount=4200&currency=eur&metadata[note]=a+b%26c`, nil},
		{"a=2&b=1&a=1", "application/x-www-form-urlencoded", `dest=A&amount=100&dest=B&amount=1`, nil},
		{"", "application/x-www-form-urlencoded", `dest=A&amount=1&dest=B&amount=100&amount=1`, []string{"/dest"}},
		{"", "application/x-www-form-urlencoded", `a=%zz`, nil},
		{"", "application/x-www-form-urlencoded", `a%2Fb=1&c~d=2&&x&=y&z=&z=%3C%26%3E&%C3%A9=%E2%82%AC&%FF=1`, nil},
		{"", "application/x-www-form-urlencoded", `a;b=1`, nil},
		{strings.Repeat("q=%41&", 70), "application/x-www-form-urlencoded", strings.Repeat("b=2&a=1&a+b=%7E&", 30), []string{"/a b"}},
		{"", "application/x-www-form-urlencoded", strings.Repeat("b=2&a=1&", 40) + "%zz", nil},
		// Media types.
		{"a=1;b=2", "application/json", `{}`, nil},
		{"b=2&a=1&a=0&c", "", ``, nil},
		{"", "", `{"amount":1}`, nil},
		{"", "text/plain", `amount=1`, nil},
		{"", "application/json; charset=latin1", `{}`, nil},
		{"", ";;;", `{}`, nil},
	}
	// Big bodies: many members out of order (sorted otherwise than by
	// insertion), long strings, a long array of objects.
	var many, items strings.Builder
	many.WriteByte('{')
	items.WriteString(`{"items":[`)
	for i := range 300 {
		if i > 0 {
			many.WriteByte(',')
			items.WriteByte(',')
		}
		fmt.Fprintf(&many, `"k%03d":%d`, (i*7919)%300, i)
		fmt.Fprintf(&items, `{"sku":"SKU-%05d","qty":%d,"unit_price":%d.%02d,"note":"%s"}`, i, i%7+1, 100+i, i%100, strings.Repeat("x\u00e9", i%5))
	}
	many.WriteByte('}')
	items.WriteString(`],"currency":"eur","amount":1}`)
	seeds = append(seeds,
		refSeed{"", "application/json", many.String(), []string{"/k007"}},
		refSeed{"", "application/json", items.String(), nil},
		refSeed{"", "application/json", `{"s":"` + strings.Repeat("abcdefgh", 4096) + `","t":"` + strings.Repeat("\u20ac", 1000) + `"}`, nil},
		refSeed{"", "application/json", `{"s":"` + strings.Repeat("abcdefgh", 4096) + `"` + `,"s":1}`, nil},
	)
	return seeds
}

// FuzzFingerprintMatchesReference checks that the fingerprint is the
// reference's, byte for byte: the hash, the kind, the field digests, the
// encoded fields a store keeps, and the error; and that the canonical form
// of a body is the reference's, with and without exact numbers.
// TestFingerprintMatchesReferenceMutated runs it on a fixed number of
// mutations of its seeds in every test run; go test -fuzz runs it for as
// long as it is given.
func FuzzFingerprintMatchesReference(f *testing.F) {
	for _, s := range refSeeds() {
		for _, raw := range []bool{false, true} {
			f.Add(s.query, s.contentType, []byte(s.body), strings.Join(s.exclude, ","), raw)
		}
	}
	f.Fuzz(func(t *testing.T, query, contentType string, body []byte, exclude string, raw bool) {
		checkMatchesReference(t, query, contentType, body, exclude, raw)
	})
}

// checkMatchesReference is FuzzFingerprintMatchesReference's check of one
// request.
func checkMatchesReference(t *testing.T, query, contentType string, body []byte, exclude string, raw bool) {
	t.Helper()
	p := Params{Method: "POST", Path: "/v1/payments", RawQuery: query, ContentType: contentType, Body: body, Raw: raw}
	if exclude != "" {
		p.Exclude = strings.Split(exclude, ",")
	}
	for _, exact := range []bool{true, false} {
		got, err := jcs.Options{ExactNumbers: exact}.Canonicalize(body)
		want, wantErr := rjOptions{ExactNumbers: exact}.Canonicalize(body)
		if !bytes.Equal(got, want) || fmt.Sprint(err) != fmt.Sprint(wantErr) {
			t.Fatalf("Canonicalize(%q), exact %v = %q, %v; reference %q, %v", body, exact, got, err, want, wantErr)
		}
		if jcsErrorKind(err) != refJCSErrorKind(wantErr) {
			t.Fatalf("Canonicalize(%q) error %v (%T), reference %v (%T)", body, err, err, wantErr, wantErr)
		}
	}
	want, wantErr := refFingerprintOf(p)
	got, err := fingerprintOf(p)
	if fmt.Sprint(err) != fmt.Sprint(wantErr) {
		t.Fatalf("fingerprintOf(%+v) error = %v, reference %v", p, err, wantErr)
	}
	encGot, encFields, encErr := Encoded(p)
	if fmt.Sprint(encErr) != fmt.Sprint(wantErr) {
		t.Fatalf("Encoded(%+v) error = %v, reference %v", p, encErr, wantErr)
	}
	if err != nil {
		if errors.Is(err, ErrUnsupportedMediaType) != errors.Is(wantErr, ErrUnsupportedMediaType) ||
			errors.Is(err, ErrMalformedBody) != errors.Is(wantErr, ErrMalformedBody) ||
			errors.Is(err, ErrDuplicateMember) != errors.Is(wantErr, ErrDuplicateMember) ||
			errors.Is(err, ErrMalformedQuery) != errors.Is(wantErr, ErrMalformedQuery) {
			t.Fatalf("fingerprintOf(%+v) error = %v, reference %v: another sentinel", p, err, wantErr)
		}
		return
	}
	if got.Sum != want.Sum || got.Kind != want.Kind || !slices.Equal(got.fields, want.fields) {
		t.Fatalf("fingerprintOf(%+v) = %x %s %v, reference %x %s %v", p, got.Sum, got.Kind, got.fields, want.Sum, want.Kind, want.fields)
	}
	wantEnc := refEncodeFields(want)
	if enc := got.encodeFields(); !bytes.Equal(enc, wantEnc) {
		t.Fatalf("encodeFields of %+v = %s, reference %s", p, enc, wantEnc)
	}
	if encGot.Sum != want.Sum || encGot.Kind != want.Kind || !bytes.Equal(encFields, wantEnc) || (encFields == nil) != (wantEnc == nil) {
		t.Fatalf("Encoded(%+v) = %x %s %q, reference %x %s %q", p, encGot.Sum, encGot.Kind, encFields, want.Sum, want.Kind, wantEnc)
	}
	// Stores hold fingerprints computed when a name's values were sorted:
	// a request whose values sorting leaves in place keeps its
	// fingerprint, and one whose values it moves gets another.
	old, moved, _ := refFingerprint(p, true)
	switch {
	case !moved && (old.Sum != want.Sum || !slices.Equal(old.fields, want.fields)):
		t.Fatalf("fingerprintOf(%+v) = %x %v, with sorted values %x %v: a request whose values came sorted changed its Fingerprint", p, want.Sum, want.fields, old.Sum, old.fields)
	case moved && old.Sum == want.Sum:
		t.Fatalf("fingerprintOf(%+v) = %x, the same with its values sorted: their order is not part of the request", p, want.Sum)
	}
}

// flatFields returns a flat body of n fields.
func flatFields(n int) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"f%03d":%d`, i, i)
	}
	b.WriteByte('}')
	return b.String()
}

// jcsErrorKind names the kind of an error of package jcs.
func jcsErrorKind(err error) string {
	var syn *jcs.SyntaxError
	var dup *jcs.DuplicateMemberError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &syn) && errors.Is(err, jcs.ErrSyntax):
		return "syntax"
	case errors.As(err, &dup) && errors.Is(err, jcs.ErrDuplicateMember):
		return "duplicate"
	case errors.Is(err, jcs.ErrTooDeep):
		return "depth"
	case errors.Is(err, jcs.ErrNumber):
		return "number"
	}
	return fmt.Sprintf("%T", err)
}

// refJCSErrorKind is jcsErrorKind for the reference's errors.
func refJCSErrorKind(err error) string {
	var syn *rjSyntaxError
	var dup *rjDuplicateMemberError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &syn) && errors.Is(err, errRjSyntax):
		return "syntax"
	case errors.As(err, &dup) && errors.Is(err, errRjDuplicateMember):
		return "duplicate"
	case errors.Is(err, errRjTooDeep):
		return "depth"
	case errors.Is(err, errRjNumber):
		return "number"
	}
	return fmt.Sprintf("%T", err)
}

// refMutations is the number of mutated requests that
// TestFingerprintMatchesReferenceMutated checks in every test run.
const refMutations = 20000

// TestFingerprintMatchesReferenceMutated runs FuzzFingerprintMatchesReference's
// check on refMutations requests made from its seeds by a fixed sequence
// of mutations, the same in every run: bytes and JSON tokens inserted,
// replaced and deleted, pieces of two seeds spliced, members repeated.
func TestFingerprintMatchesReferenceMutated(t *testing.T) {
	t.Parallel()
	seeds := refSeeds()
	tokens := []string{`"`, `\`, `\u`, `\ud83d`, `\ude00`, `\u0000`, `{`, `}`, `[`, `]`, `,`, `:`, ` `, "\n", `-`, `0`, `1`, `.`, `e`, `E+`, `e-`,
		`1e400`, `-0`, `9007199254740993`, `null`, `true`, `"a"`, `"a":1`, `"a":1,"a":2`, `~`, `/`, `%`, `&`, `=`, "\xc3\xa9", "\xf0\x9f\x98\x80", "\xff", "\x7f", "\x01"}
	rng := rand.New(rand.NewPCG(30, 2026))
	var body []byte
	for n := range refMutations {
		s := seeds[rng.IntN(len(seeds))]
		body = append(body[:0], s.body...)
		for range 1 + rng.IntN(3) {
			at := 0
			if len(body) > 0 {
				at = rng.IntN(len(body) + 1)
			}
			switch rng.IntN(6) {
			case 0: // insert a token
				body = slices.Insert(body, at, []byte(tokens[rng.IntN(len(tokens))])...)
			case 1: // replace a byte with a token's
				if at < len(body) {
					tok := tokens[rng.IntN(len(tokens))]
					body[at] = tok[rng.IntN(len(tok))]
				}
			case 2: // delete a run
				end := min(len(body), at+1+rng.IntN(8))
				body = slices.Delete(body, at, end)
			case 3: // splice in a piece of another seed
				other := seeds[rng.IntN(len(seeds))].body
				if len(other) > 0 {
					from := rng.IntN(len(other))
					to := min(len(other), from+1+rng.IntN(64))
					body = slices.Insert(body, at, []byte(other[from:to])...)
				}
			case 4: // repeat a piece of this body
				if at < len(body) {
					end := min(len(body), at+1+rng.IntN(32))
					body = slices.Insert(body, end, body[at:end]...)
				}
			case 5: // flip a bit
				if at < len(body) {
					body[at] ^= 1 << rng.IntN(8)
				}
			}
		}
		contentType := s.contentType
		if rng.IntN(4) == 0 {
			contentType = []string{"application/json", "application/x-www-form-urlencoded", "application/problem+json"}[rng.IntN(3)]
		}
		exclude := strings.Join(s.exclude, ",")
		raw := n%2 == 1
		if t.Failed() {
			return
		}
		checkMatchesReference(t, s.query, contentType, slices.Clone(body), exclude, raw)
	}
}

func TestQueryEscapingIsURLs(t *testing.T) {
	t.Parallel()
	for c := range 256 {
		b := []byte{'a', byte(c), 'z'}
		if got, want := string(appendQueryEscape(nil, b)), url.QueryEscape(string(b)); got != want {
			t.Errorf("appendQueryEscape(%q) = %q, url.QueryEscape %q", b, got, want)
		}
		for _, text := range []string{string(b), "%" + string(b), "%4" + string(b), "x%" + string(b) + "1", "+" + string(b) + "%41"} {
			got, ok := appendQueryUnescape(nil, text)
			want, err := url.QueryUnescape(text)
			if ok != (err == nil) || ok && string(got) != want {
				t.Errorf("appendQueryUnescape(%q) = %q, %v; url.QueryUnescape %q, %v", text, got, ok, want, err)
			}
		}
	}
}
