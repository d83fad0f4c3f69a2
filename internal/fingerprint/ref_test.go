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
	"mime"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"
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
	if errors.Is(err, rjErrNotObject) {
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
	if errors.Is(err, rjErrTooDeep) {
		return &BodyError{err: ErrMalformedBody, reason: "the JSON body is nested too deeply"}
	}
	if errors.Is(err, rjErrNumber) {
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

// FuzzFingerprintMatchesReference checks that the fingerprint is the
// reference's, byte for byte: the hash, the kind, the field digests, the
// encoded fields a store keeps, and the error.
func FuzzFingerprintMatchesReference(f *testing.F) {
	seeds := []struct {
		query, contentType, body string
		exclude                  []string
	}{
		{"", "application/json", fpPaymentJSON, nil},
		{"", "application/json", fpPaymentJSON, []string{"/client_ts", "/absent"}},
		{"expand=customer&dry_run=1", "application/json; charset=utf-8", `{"amount":4200,"currency":"eur"}`, nil},
		{"", "application/json", `{"amount":4.2e3,"currency":"\u0065ur","metadata":{"b":[1,2.50,{"y":null,"x":true}],"a":"\ud83d\ude00"}}`, nil},
		{"", "application/merchant+json", `{"payment":{"amount":{"value":"42.00","currency":"EUR"}},"reference":"ord-1234","return_url":"https://shop.example/return?x=1&y=2"}`, nil},
		{"", "application/json", `{"a/b":1,"c~d":2,"":3,"\u00e9":4,"\ud83d\ude00":5,"\u20ac":6,"\uff01":7,"a0":8,"<&>":9,"\u2028":10,"q\"\\":11}`, []string{"/a~1b", "/c~0d"}},
		{"", "application/json", `{"\u0000\u001f":1,"a\u007f":2,"a~":3,"a\/b":4}`, []string{"/a~0"}},
		{"", "application/json", `{"amount":4200,"amount":1}`, nil},
		{"", "application/json", `[{"sku":"a","qty":2},{"qty":1,"sku":"b"}]`, nil},
		{"", "application/json", `{"amount":1e400}`, nil},
		{"", "application/json", `{"amount":9007199254740993,"b":0.1000000000000000055511151231257827,"c":1e-400,"d":-0.0,"e":100.50,"f":1E+2,"g":0.0000001,"h":123456789012345678901234}`, nil},
		{"", "application/json", `{"amount":`, nil},
		{"", "application/json", " \t\n{ } \n", nil},
		{"", "application/json", `"just a string"`, nil},
		{"", "application/json", `{"client_ts":1}`, []string{"/client_ts"}},
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
		{"a=1;b=2", "application/json", `{}`, nil},
		{"b=2&a=1&a=0&c", "", ``, nil},
		{"", "", `{"amount":1}`, nil},
		{"", "text/plain", `amount=1`, nil},
		{"", "application/json; charset=latin1", `{}`, nil},
		{"", ";;;", `{}`, nil},
	}
	for _, s := range seeds {
		for _, raw := range []bool{false, true} {
			f.Add(s.query, s.contentType, []byte(s.body), strings.Join(s.exclude, ","), raw)
		}
	}
	f.Fuzz(func(t *testing.T, query, contentType string, body []byte, exclude string, raw bool) {
		p := Params{Method: "POST", Path: "/v1/payments", RawQuery: query, ContentType: contentType, Body: body, Raw: raw}
		if exclude != "" {
			p.Exclude = strings.Split(exclude, ",")
		}
		want, wantErr := refFingerprintOf(p)
		got, err := fingerprintOf(p)
		if fmt.Sprint(err) != fmt.Sprint(wantErr) {
			t.Fatalf("fingerprintOf(%+v) error = %v, reference %v", p, err, wantErr)
		}
		if err != nil {
			if errors.Is(err, ErrUnsupportedMediaType) != errors.Is(wantErr, ErrUnsupportedMediaType) {
				t.Fatalf("fingerprintOf(%+v) error = %v, reference %v: another sentinel", p, err, wantErr)
			}
			return
		}
		if got.Sum != want.Sum || got.Kind != want.Kind || !slices.Equal(got.fields, want.fields) {
			t.Fatalf("fingerprintOf(%+v) = %x %s %v, reference %x %s %v", p, got.Sum, got.Kind, got.fields, want.Sum, want.Kind, want.fields)
		}
		if enc, wantEnc := got.encodeFields(), refEncodeFields(want); !bytes.Equal(enc, wantEnc) {
			t.Fatalf("encodeFields of %+v = %s, reference %s", p, enc, wantEnc)
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
	})
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
