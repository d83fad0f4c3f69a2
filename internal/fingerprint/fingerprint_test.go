package fingerprint

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// fpPaymentJSON is a payment request body as a client would send it.
const fpPaymentJSON = `{"amount":4200,"currency":"eur","customer":"cus_9s6XKzkNRiz8i3","description":"Order #1234","metadata":{"order_id":"1234","channel":"web"},"capture":true,"client_ts":"2025-01-02T03:04:05Z"}`

// fpPaymentForm is a payment request body as Stripe's SDKs send it.
const fpPaymentForm = `amount=4200&currency=eur&customer=cus_9s6XKzkNRiz8i3&metadata%5Border_id%5D=1234&expand%5B%5D=customer&expand%5B%5D=invoice`

// fpJSON returns the parameters of a JSON POST to /v1/payments.
func fpJSON(body string) Params {
	return Params{Method: "POST", Path: "/v1/payments", ContentType: "application/json", Body: []byte(body)}
}

// fpForm returns the parameters of a form POST to /v1/payments.
func fpForm(body string) Params {
	return Params{Method: "POST", Path: "/v1/payments", ContentType: "application/x-www-form-urlencoded", Body: []byte(body)}
}

// fpWith returns p changed by fn.
func fpWith(p Params, fn func(*Params)) Params {
	fn(&p)
	return p
}

// fpMust returns the fingerprint of p and fails the test on an error.
func fpMust(t *testing.T, p Params) Fingerprint {
	t.Helper()
	f, err := fingerprintOf(p)
	if err != nil {
		t.Fatalf("fingerprintOf(%s %s?%s, %q, %q) error = %v", p.Method, p.Path, p.RawQuery, p.ContentType, p.Body, err)
	}
	return f
}

func TestNewFingerprintSameRequest(t *testing.T) {
	t.Parallel()

	exclude := func(p Params, ptrs ...string) Params {
		p.Exclude = ptrs
		return p
	}
	tests := []struct {
		name string
		a, b Params
	}{
		{"JSONMemberOrder", fpJSON(`{"amount":4200,"currency":"eur"}`), fpJSON(`{"currency":"eur","amount":4200}`)},
		{"JSONWhitespace", fpJSON(`{"amount":4200,"currency":"eur"}`), fpJSON(" {\n\t\"amount\" : 4200 ,\r\n \"currency\":\"eur\"\n}\n ")},
		{"JSONNestedMemberOrder", fpJSON(`{"metadata":{"a":1,"b":{"d":2,"c":3}}}`), fpJSON(`{"metadata":{"b":{"c":3,"d":2},"a":1}}`)},
		{"JSONNumberWithFraction", fpJSON(`{"amount":4200}`), fpJSON(`{"amount":4200.0}`)},
		{"JSONNumberWithExponent", fpJSON(`{"amount":4200}`), fpJSON(`{"amount":4.2e3}`)},
		{"JSONNumberWithUppercaseExponent", fpJSON(`{"amount":4200}`), fpJSON(`{"amount":42E+2}`)},
		{"JSONNumberWithTrailingZeros", fpJSON(`{"rate":0.5}`), fpJSON(`{"rate":0.50000}`)},
		{"JSONNegativeZero", fpJSON(`{"fee":0}`), fpJSON(`{"fee":-0}`)},
		{"JSONLongIDSpellings", fpJSON(`{"order_id":1234567890123456789}`), fpJSON(`{"order_id":1.234567890123456789e18}`)},
		{"JSONStringEscapes", fpJSON(`{"currency":"eur","note":"é/"}`), fpJSON(`{"currency":"\u0065ur","note":"\u00e9\/"}`)},
		{"JSONMemberNameEscapes", fpJSON(`{"amount":1}`), fpJSON(`{"\u0061mount":1}`)},
		{"JSONTopLevelArrayWhitespace", fpJSON(`[1,2,{"b":1,"a":2}]`), fpJSON(`[ 1, 2.0, {"a":2, "b":1} ]`)},
		{"JSONCharsetParameter", fpJSON(`{"amount":1}`), fpWith(fpJSON(`{"amount":1}`), func(p *Params) { p.ContentType = "application/json; charset=utf-8" })},
		{"JSONMediaTypeCase", fpJSON(`{"amount":1}`), fpWith(fpJSON(`{"amount":1}`), func(p *Params) { p.ContentType = "Application/JSON" })},
		{"JSONStructuredSuffix", fpJSON(`{"amount":1}`), fpWith(fpJSON(`{ "amount": 1.0 }`), func(p *Params) { p.ContentType = "application/merchant+json" })},
		{"JSONStructuredSuffixWithCharset", fpJSON(`{"amount":1}`), fpWith(fpJSON(`{"amount":1}`), func(p *Params) { p.ContentType = "application/merchant+json;charset=UTF-8" })},
		{"JSONExcludedFieldChanged", exclude(fpJSON(`{"amount":1,"client_ts":"2025-01-01"}`), "/client_ts"), exclude(fpJSON(`{"amount":1,"client_ts":"2025-06-30"}`), "/client_ts")},
		{"JSONExcludedFieldAbsent", exclude(fpJSON(`{"amount":1,"client_ts":"2025-01-01"}`), "/client_ts"), exclude(fpJSON(`{"amount":1}`), "/client_ts")},
		{"JSONExcludedFieldsFirstAndLast", exclude(fpJSON(`{"a":1,"m":2,"z":3}`), "/a", "/z"), exclude(fpJSON(`{"a":9,"m":2,"z":9}`), "/a", "/z")},
		{"JSONExcludedFieldWithSlash", exclude(fpJSON(`{"amount":1,"a/b":1}`), "/a~1b"), exclude(fpJSON(`{"amount":1,"a/b":2}`), "/a~1b")},
		{"JSONExcludedFieldWithTilde", exclude(fpJSON(`{"amount":1,"a~b":1}`), "/a~0b"), exclude(fpJSON(`{"amount":1,"a~b":2}`), "/a~0b")},
		{"FormPairOrder", fpForm(`amount=4200&currency=eur`), fpForm(`currency=eur&amount=4200`)},
		{"FormRepeatedNamesInterleaved", fpForm(`dest=A&amount=100&dest=B&amount=1`), fpForm(`amount=100&amount=1&dest=A&dest=B`)},
		{"FormPercentEncoding", fpForm(`note=a+b&cur=eur`), fpForm(`cur=%65ur&note=a%20b`)},
		{"FormCharsetParameter", fpForm(`amount=1`), fpWith(fpForm(`amount=1`), func(p *Params) { p.ContentType = "application/x-www-form-urlencoded; charset=utf-8" })},
		{"FormExcludedField", exclude(fpForm(`amount=1&client_ts=1`), "/client_ts"), exclude(fpForm(`client_ts=2&amount=1`), "/client_ts")},
		{"FormExcludedFieldWithSlash", exclude(fpForm(`amount=1&a%2Fb=1`), "/a~1b"), exclude(fpForm(`amount=1&a%2Fb=2`), "/a~1b")},
		{"QueryPairOrder", fpWith(fpJSON(`{}`), func(p *Params) { p.RawQuery = "expand=customer&dry_run=1" }), fpWith(fpJSON(`{}`), func(p *Params) { p.RawQuery = "dry_run=1&expand=customer" })},
		{"QueryRepeatedNamesInterleaved", fpWith(fpJSON(`{}`), func(p *Params) { p.RawQuery = "expand=b&dry_run=1&expand=a" }), fpWith(fpJSON(`{}`), func(p *Params) { p.RawQuery = "dry_run=1&expand=b&expand=a" })},
		{"QueryPercentEncoding", fpWith(fpJSON(`{}`), func(p *Params) { p.RawQuery = "q=a+b" }), fpWith(fpJSON(`{}`), func(p *Params) { p.RawQuery = "%71=a%20b" })},
		{"EmptyBodyWithoutContentType", Params{Method: "POST", Path: "/v1/payments/pi_1/capture"}, Params{Method: "POST", Path: "/v1/payments/pi_1/capture", ContentType: "application/json"}},
		{"EmptyBodyWithUnsupportedContentType", Params{Method: "POST", Path: "/v1/payments/pi_1/capture", Body: []byte{}}, Params{Method: "POST", Path: "/v1/payments/pi_1/capture", ContentType: "text/plain"}},
		{"RawSameBytes", Params{Method: "POST", Path: "/upload", ContentType: "text/csv", Body: []byte("a,b\n1,2\n"), Raw: true}, Params{Method: "POST", Path: "/upload", ContentType: "text/csv; charset=utf-8", Body: []byte("a,b\n1,2\n"), Raw: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, b := fpMust(t, tt.a), fpMust(t, tt.b)
			if a.Sum != b.Sum {
				t.Errorf("sum differs for %q and %q", tt.a.Body, tt.b.Body)
			}
			if !slices.Equal(a.fields, b.fields) {
				t.Errorf("Fields differ: %v and %v", a.fields, b.fields)
			}
			if diff := DiffFields(a.encodeFields(), b); len(diff) != 0 {
				t.Errorf("DiffFields = %v, want none", diff)
			}
		})
	}
}

func TestNewFingerprintDifferentRequest(t *testing.T) {
	t.Parallel()

	query := func(q string) Params {
		return fpWith(fpJSON(`{"amount":1}`), func(p *Params) { p.RawQuery = q })
	}
	tests := []struct {
		name string
		a, b Params
	}{
		{"Method", fpJSON(`{"amount":1}`), fpWith(fpJSON(`{"amount":1}`), func(p *Params) { p.Method = "PUT" })},
		{"Path", fpJSON(`{"amount":1}`), fpWith(fpJSON(`{"amount":1}`), func(p *Params) { p.Path = "/v1/refunds" })},
		{"PathTrailingSlash", fpJSON(`{"amount":1}`), fpWith(fpJSON(`{"amount":1}`), func(p *Params) { p.Path = "/v1/payments/" })},
		{"MethodAndPathBoundary", Params{Method: "POST", Path: "/x"}, Params{Method: "POS", Path: "T/x"}},
		{"PathAndQueryBoundary", Params{Method: "POST", Path: "/a", RawQuery: "b=1"}, Params{Method: "POST", Path: "/ab=1"}},
		{"QueryValue", query("dry_run=1"), query("dry_run=2")},
		{"QueryName", query("a=1"), query("b=1")},
		{"QueryPresent", query(""), query("dry_run=1")},
		{"QueryRepeatedValue", query("expand=a"), query("expand=a&expand=a")},
		{"QueryRepeatedValueOrder", query("expand=a&expand=b"), query("expand=b&expand=a")},
		{"QueryValuesSwappedBetweenRepeatedNames", query("dest=A&amount=100&dest=B&amount=1"), query("dest=A&amount=1&dest=B&amount=100")},
		{"QueryMovedToBody", Params{Method: "POST", Path: "/p", RawQuery: "amount=1"}, Params{Method: "POST", Path: "/p", ContentType: "application/x-www-form-urlencoded", Body: []byte("amount=1")}},
		{"JSONAmount", fpJSON(`{"amount":4200,"currency":"eur"}`), fpJSON(`{"amount":4201,"currency":"eur"}`)},
		{"JSONSmallFraction", fpJSON(`{"amount":0.1}`), fpJSON(`{"amount":0.10000000000000002}`)},
		// A double holds neither exactly; RFC 8785 alone would give both the
		// form of 9007199254740992, and 1234567890123456800 to both ids.
		{"JSONIntegerBeyondDouble", fpJSON(`{"amount":9007199254740993}`), fpJSON(`{"amount":9007199254740992}`)},
		{"JSONLongIDs", fpJSON(`{"order_id":1234567890123456789}`), fpJSON(`{"order_id":1234567890123456788}`)},
		{"JSONTinyVersusZero", fpJSON(`{"rate":1e-400}`), fpJSON(`{"rate":0}`)},
		{"JSONCurrency", fpJSON(`{"amount":4200,"currency":"eur"}`), fpJSON(`{"amount":4200,"currency":"usd"}`)},
		{"JSONStringCase", fpJSON(`{"currency":"eur"}`), fpJSON(`{"currency":"EUR"}`)},
		{"JSONNestedValue", fpJSON(`{"metadata":{"order_id":"1"}}`), fpJSON(`{"metadata":{"order_id":"2"}}`)},
		{"JSONAddedMember", fpJSON(`{"amount":1}`), fpJSON(`{"amount":1,"capture":false}`)},
		{"JSONNullMember", fpJSON(`{"amount":1}`), fpJSON(`{"amount":1,"capture":null}`)},
		{"JSONNumberVersusString", fpJSON(`{"amount":1}`), fpJSON(`{"amount":"1"}`)},
		{"JSONTrueVersusFalse", fpJSON(`{"capture":true}`), fpJSON(`{"capture":false}`)},
		{"JSONArrayOrder", fpJSON(`{"items":[1,2]}`), fpJSON(`{"items":[2,1]}`)},
		{"JSONMemberNameCase", fpJSON(`{"amount":1}`), fpJSON(`{"Amount":1}`)},
		{"JSONValueMovedBetweenMembers", fpJSON(`{"a":"1","b":"2"}`), fpJSON(`{"a":"2","b":"1"}`)},
		{"JSONObjectVersusEmpty", fpJSON(`{}`), Params{Method: "POST", Path: "/v1/payments"}},
		{"JSONObjectVersusArray", fpJSON(`{}`), fpJSON(`[]`)},
		{"JSONVersusForm", fpJSON(`{"amount":"1"}`), fpForm(`amount=1`)},
		{"JSONNonExcludedFieldChanged", fpWith(fpJSON(`{"amount":1,"client_ts":1}`), func(p *Params) { p.Exclude = []string{"/client_ts"} }), fpWith(fpJSON(`{"amount":2,"client_ts":1}`), func(p *Params) { p.Exclude = []string{"/client_ts"} })},
		{"JSONNestedPointerNotExcluded", fpWith(fpJSON(`{"meta":{"ts":1}}`), func(p *Params) { p.Exclude = []string{"/meta/ts"} }), fpWith(fpJSON(`{"meta":{"ts":2}}`), func(p *Params) { p.Exclude = []string{"/meta/ts"} })},
		{"FormValue", fpForm(`amount=4200&currency=eur`), fpForm(`amount=4201&currency=eur`)},
		{"FormRepeatedValue", fpForm(`expand[]=a`), fpForm(`expand[]=a&expand[]=a`)},
		{"FormRepeatedValueOrder", fpForm(`expand[]=a&expand[]=b`), fpForm(`expand[]=b&expand[]=a`)},
		// Each amount goes with the dest before it: swapping the amounts
		// pays A 1 and B 100 instead of A 100 and B 1.
		{"FormValuesSwappedBetweenRepeatedNames", fpForm(`dest=A&amount=100&dest=B&amount=1`), fpForm(`dest=A&amount=1&dest=B&amount=100`)},
		{"FormManyPairsRepeatedValueOrder", fpForm(strings.Repeat("x=1&", 70) + "a=1&a=2"), fpForm(strings.Repeat("x=1&", 70) + "a=2&a=1")},
		{"FormValueWithAmpersand", fpForm(`a=1%262&b=3`), fpForm(`a=1&2&b=3`)},
		{"RawBytes", Params{Method: "POST", Path: "/upload", ContentType: "text/csv", Body: []byte("a,b\n1,2\n"), Raw: true}, Params{Method: "POST", Path: "/upload", ContentType: "text/csv", Body: []byte("a,b\n1,3\n"), Raw: true}},
		{"RawVersusJSON", Params{Method: "POST", Path: "/p", ContentType: "text/plain", Body: []byte(`{}`), Raw: true}, Params{Method: "POST", Path: "/p", ContentType: "application/json", Body: []byte(`{}`)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, b := fpMust(t, tt.a), fpMust(t, tt.b)
			if a.Sum == b.Sum {
				t.Errorf("sum is the same for %s %s?%s %q and %s %s?%s %q",
					tt.a.Method, tt.a.Path, tt.a.RawQuery, tt.a.Body, tt.b.Method, tt.b.Path, tt.b.RawQuery, tt.b.Body)
			}
		})
	}
}

func TestNewFingerprintErrors(t *testing.T) {
	t.Parallel()

	withType := func(ct, body string) Params {
		return Params{Method: "POST", Path: "/v1/payments", ContentType: ct, Body: []byte(body)}
	}
	tests := []struct {
		name    string
		p       Params
		wantErr error
	}{
		{"DuplicateTopLevelMember", fpJSON(`{"amount":4200,"amount":1}`), ErrDuplicateMember},
		{"DuplicateMemberWithEqualValues", fpJSON(`{"amount":1,"amount":1}`), ErrDuplicateMember},
		{"DuplicateNestedMember", fpJSON(`{"metadata":{"order_id":"1","order_id":"2"}}`), ErrDuplicateMember},
		{"DuplicateMemberInArray", fpJSON(`{"items":[{"sku":"a","sku":"b"}]}`), ErrDuplicateMember},
		{"DuplicateMemberSpelledWithEscape", fpJSON(`{"amount":1,"\u0061mount":2}`), ErrDuplicateMember},
		{"DuplicateExcludedMember", fpWith(fpJSON(`{"client_ts":1,"client_ts":2}`), func(p *Params) { p.Exclude = []string{"/client_ts"} }), ErrDuplicateMember},
		{"DuplicateMemberInStructuredSuffixType", withType("application/merchant+json", `{"a":1,"a":2}`), ErrDuplicateMember},

		{"TruncatedJSON", fpJSON(`{"amount":`), ErrMalformedBody},
		{"JSONTrailingComma", fpJSON(`{"amount":1,}`), ErrMalformedBody},
		{"JSONTrailingData", fpJSON(`{"amount":1} {}`), ErrMalformedBody},
		{"JSONSingleQuotes", fpJSON(`{'amount':1}`), ErrMalformedBody},
		{"JSONInvalidUTF8", fpJSON("{\"note\":\"\xff\"}"), ErrMalformedBody},
		{"JSONLoneSurrogate", fpJSON(`{"note":"\ud800"}`), ErrMalformedBody},
		{"JSONNumberOutOfRange", fpJSON(`{"amount":1e400}`), ErrMalformedBody},
		{"JSONNaN", fpJSON(`{"amount":NaN}`), ErrMalformedBody},
		{"JSONTooDeep", fpJSON(strings.Repeat("[", 1000) + strings.Repeat("]", 1000)), ErrMalformedBody},
		{"JSONOnlyWhitespace", fpJSON(" \n"), ErrMalformedBody},

		{"FormBadEscape", fpForm(`amount=%zz`), ErrMalformedBody},
		{"FormSemicolon", fpForm(`amount=1;currency=eur`), ErrMalformedBody},

		{"QueryBadEscape", fpWith(fpJSON(`{}`), func(p *Params) { p.RawQuery = "a=%zz" }), ErrMalformedQuery},
		{"QuerySemicolon", fpWith(fpJSON(`{}`), func(p *Params) { p.RawQuery = "a=1;b=2" }), ErrMalformedQuery},
		{"QueryBadEscapeWithEmptyBody", Params{Method: "POST", Path: "/p", RawQuery: "%"}, ErrMalformedQuery},

		{"BodyWithoutContentType", withType("", `{"amount":1}`), ErrUnsupportedMediaType},
		{"TextPlain", withType("text/plain", `{"amount":1}`), ErrUnsupportedMediaType},
		{"Multipart", withType("multipart/form-data; boundary=x", "--x--"), ErrUnsupportedMediaType},
		{"JSONLikeTextType", withType("text/json", `{}`), ErrUnsupportedMediaType},
		{"XML", withType("application/xml", `<a/>`), ErrUnsupportedMediaType},
		{"UnparseableContentType", withType(";;;", `{}`), ErrUnsupportedMediaType},
		{"ContentTypeWithoutSubtype", withType("application", `{}`), ErrUnsupportedMediaType},
		{"JSONInUTF16", withType("application/json; charset=utf-16", `{}`), ErrUnsupportedMediaType},
		{"JSONInUTF16LE", withType("application/json; charset=UTF-16LE", `{}`), ErrUnsupportedMediaType},
		{"StructuredSuffixInLatin1", withType("application/merchant+json; charset=iso-8859-1", `{}`), ErrUnsupportedMediaType},
		{"FormInLatin1", withType("application/x-www-form-urlencoded; charset=iso-8859-1", `amount=1`), ErrUnsupportedMediaType},
		{"FormInUTF8WithoutHyphen", withType("application/x-www-form-urlencoded; charset=utf8", `amount=1`), ErrUnsupportedMediaType},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, err := fingerprintOf(tt.p)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("fingerprintOf(%q, %q) error = %v, want %v", tt.p.ContentType, tt.p.Body, err, tt.wantErr)
			}
			checkBodyError(t, err)
			if f.Sum != ([32]byte{}) || f.fields != nil {
				t.Errorf("fingerprintOf returned %+v with its error", f)
			}
		})
	}
}

// checkBodyError checks that err is a *BodyError that unwraps to exactly one
// of the fingerprint sentinels and carries a reason for the client.
func checkBodyError(t *testing.T, err error) {
	t.Helper()
	var be *BodyError
	if !errors.As(err, &be) {
		t.Fatalf("error %v (%T) is not a *BodyError", err, err)
	}
	if be.reason == "" {
		t.Errorf("BodyError %v has no reason", err)
	}
	matches := 0
	for _, sentinel := range []error{ErrUnsupportedMediaType, ErrMalformedBody, ErrDuplicateMember, ErrMalformedQuery} {
		if errors.Is(err, sentinel) {
			matches++
		}
	}
	if matches != 1 {
		t.Errorf("error %v matches %d Fingerprint sentinels, want exactly 1", err, matches)
	}
	if be.Unwrap() != be.err {
		t.Errorf("Unwrap() = %v, want %v", be.Unwrap(), be.err)
	}
	if want := be.err.Error() + ": " + be.reason; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
	if !strings.HasPrefix(err.Error(), "idem: ") {
		t.Errorf("Error() = %q, want the prefix %q", err.Error(), "idem: ")
	}
}

// TestNewFingerprintErrorsDoNotEchoValues checks that the reason shown to the
// client names fields but never repeats a value of the body.
func TestNewFingerprintErrorsDoNotEchoValues(t *testing.T) {
	t.Parallel()

	const secret = "4242424242424242"
	tests := []struct {
		name    string
		p       Params
		wantErr error
	}{
		{"DuplicateMember", fpJSON(`{"card":"` + secret + `","card":"` + secret + `"}`), ErrDuplicateMember},
		{"MalformedJSON", fpJSON(`{"card":"` + secret + `",}`), ErrMalformedBody},
		{"MalformedJSONNumber", fpJSON(`{"card":` + secret + `x}`), ErrMalformedBody},
		{"MalformedForm", fpForm(`card=` + secret + `%zz`), ErrMalformedBody},
		{"MalformedQuery", fpWith(fpJSON(`{}`), func(p *Params) { p.RawQuery = "card=" + secret + "%zz" }), ErrMalformedQuery},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := fingerprintOf(tt.p)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("fingerprintOf error = %v, want %v", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q repeats a value of the request", err)
			}
		})
	}
}

func TestNewFingerprintRaw(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name        string
		contentType string
	}{
		{"UnsupportedType", "text/plain"},
		{"NoContentType", ""},
		{"UnparseableContentType", ";;;"},
		{"Binary", "application/octet-stream"},
		{"JSONInUTF16", "application/json; charset=utf-16"},
		{"FormInLatin1", "application/x-www-form-urlencoded; charset=iso-8859-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := Params{Method: "POST", Path: "/upload", ContentType: tt.contentType, Body: []byte("\x00\xffnot json"), Raw: true}
			f := fpMust(t, p)
			if len(f.fields) != 0 {
				t.Errorf("Fields = %v, want none for a raw body", f.fields)
			}
			p.Body = []byte("\x00\xffnot json!")
			if g := fpMust(t, p); g.Sum == f.Sum {
				t.Error("sum is the same for different raw bodies")
			}
		})
	}
}

// TestFingerprintSumFormat recomputes the sum from its documented parts: changing
// how the sum is computed would make every stored fingerprint mismatch after an
// upgrade, so such a change needs a new version tag.
func TestFingerprintSumFormat(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name          string
		p             Params
		wantQuery     string
		wantKind      string
		wantCanonical string
	}{
		{
			name:          "JSON",
			p:             fpWith(fpJSON(`{ "currency": "eur", "amount": 4.2e3, "meta": {"z": [1.0, "\u00e9"], "a": null} }`), func(p *Params) { p.RawQuery = "expand=a&dry_run=1&expand=b" }),
			wantQuery:     "dry_run=1&expand=a&expand=b",
			wantKind:      "json",
			wantCanonical: `{"amount":4200,"currency":"eur","meta":{"a":null,"z":[1,"é"]}}`,
		},
		{
			name:          "JSONWithExclusion",
			p:             fpWith(fpJSON(`{"client_ts":"x","amount":1}`), func(p *Params) { p.Exclude = []string{"/client_ts"} }),
			wantKind:      "json",
			wantCanonical: `{"amount":1}`,
		},
		{
			name:          "Form",
			p:             fpForm(`note=a+b&amount=4200&expand[]=a&expand[]=z`),
			wantKind:      "form",
			wantCanonical: `amount=4200&expand%5B%5D=a&expand%5B%5D=z&note=a+b`,
		},
		{
			// The values of a repeated name keep their order: a request
			// whose values came sorted, as every case above, has the
			// fingerprint it had when they were sorted.
			name:          "RepeatedNamesKeepTheirValuesOrder",
			p:             fpWith(fpForm(`dest=B&amount=100&dest=A&amount=1`), func(p *Params) { p.RawQuery = "expand=z&dry_run=1&expand=a" }),
			wantQuery:     "dry_run=1&expand=z&expand=a",
			wantKind:      "form",
			wantCanonical: `amount=100&amount=1&dest=B&dest=A`,
		},
		{
			name:     "Empty",
			p:        Params{Method: "POST", Path: "/v1/payments/pi_1/capture", RawQuery: "q=%20"},
			wantKind: "empty", wantQuery: "q=+",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := sha256.New()
			for _, part := range []string{"idem-fingerprint-v1", tt.p.Method, tt.p.Path, tt.wantQuery, tt.wantKind, tt.wantCanonical} {
				h.Write(binary.AppendUvarint(nil, uint64(len(part))))
				io.WriteString(h, part)
			}
			var want [32]byte
			h.Sum(want[:0])
			if got := fpMust(t, tt.p); got.Sum != want {
				t.Errorf("sum = %x, want %x, SHA-256 over the parts with canonical body %s", got.Sum, want, tt.wantCanonical)
			}
		})
	}
}

func TestFingerprintFields(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		p    Params
		want []string
	}{
		{"JSONTopLevelMembersSorted", fpJSON(`{"z":1,"amount":{"x":1},"b":[1]}`), []string{"/amount", "/b", "/z"}},
		{"JSONNamesEscapedAsPointers", fpJSON(`{"a/b":1,"c~d":2,"~/":3,"":4}`), []string{"/", "/a~1b", "/c~0d", "/~0~1"}},
		{"JSONSortedByPointerNotByName", fpJSON(`{"a/b":1,"a0":2,"a~":3,"a\u007f":4}`), []string{"/a0", "/a~0", "/a~1b", "/a\x7f"}},
		{"JSONSortedByBytesNotByUTF16", fpJSON(`{"\uff01":1,"\ud83d\ude00":2,"\u20ac":3}`), []string{"/\u20ac", "/\uff01", "/\U0001F600"}},
		{"JSONExcludedFieldHasNoDigest", fpWith(fpJSON(`{"amount":1,"client_ts":2}`), func(p *Params) { p.Exclude = []string{"/client_ts", "/absent"} }), []string{"/amount"}},
		{"JSONPayment", fpJSON(fpPaymentJSON), []string{"/amount", "/capture", "/client_ts", "/currency", "/customer", "/description", "/metadata"}},
		{"JSONEmptyObject", fpJSON(`{}`), nil},
		{"JSONArray", fpJSON(`[{"amount":1}]`), nil},
		{"JSONString", fpJSON(`"amount"`), nil},
		{"EmptyBody", Params{Method: "POST", Path: "/p"}, nil},
		{"FormNames", fpForm(fpPaymentForm), []string{"/amount", "/currency", "/customer", "/expand[]", "/metadata[order_id]"}},
		{"FormNameWithSlash", fpForm(`a%2Fb=1&c~d=2`), []string{"/a~1b", "/c~0d"}},
		{"FormExcludedField", fpWith(fpForm(`amount=1&client_ts=2`), func(p *Params) { p.Exclude = []string{"/client_ts"} }), []string{"/amount"}},
		{"Raw", Params{Method: "POST", Path: "/p", ContentType: "text/plain", Body: []byte("amount=1"), Raw: true}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := fpMust(t, tt.p)
			var got []string
			for _, d := range f.fields {
				got = append(got, d.pointer)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("field pointers = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestFingerprintFieldDigests(t *testing.T) {
	t.Parallel()

	digest := func(t *testing.T, p Params, ptr string) [16]byte {
		t.Helper()
		for _, d := range fpMust(t, p).fields {
			if d.pointer == ptr {
				return d.digest
			}
		}
		t.Fatalf("no digest for %s in %q", ptr, p.Body)
		return [16]byte{}
	}
	tests := []struct {
		name     string
		a, b     Params
		ptrA     string
		ptrB     string
		wantSame bool
	}{
		{"SameValueOtherSpelling", fpJSON(`{"amount":4200,"x":1}`), fpJSON(`{"x":2,"amount":4.2e3}`), "/amount", "/amount", true},
		{"SameNestedValueOtherOrder", fpJSON(`{"meta":{"a":1,"b":2}}`), fpJSON(`{"meta":{"b":2,"a":1}}`), "/meta", "/meta", true},
		{"OtherValue", fpJSON(`{"amount":4200}`), fpJSON(`{"amount":4300}`), "/amount", "/amount", false},
		{"SameValueOtherField", fpJSON(`{"a":1,"b":1}`), fpJSON(`{"a":1,"b":1}`), "/a", "/b", false},
		{"FormSameValuesOtherOrder", fpForm(`x=1&x=2`), fpForm(`x=2&x=1`), "/x", "/x", false},
		{"FormSameValuesInterleaved", fpForm(`x=1&y=0&x=2`), fpForm(`y=0&x=1&x=2`), "/x", "/x", true},
		{"FormOtherValueSplit", fpForm(`x=1%262`), fpForm(`x=1&x=2`), "/x", "/x", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			same := digest(t, tt.a, tt.ptrA) == digest(t, tt.b, tt.ptrB)
			if same != tt.wantSame {
				t.Errorf("digests equal = %v, want %v", same, tt.wantSame)
			}
		})
	}
}

func TestEncodeFields(t *testing.T) {
	t.Parallel()

	const secret = "4242424242424242"
	tests := []struct {
		name     string
		p        Params
		wantKeys []string
		wantKind string
	}{
		{"JSON", fpJSON(`{"card":"` + secret + `","amount":4200}`), []string{"/amount", "/card", "media"}, "json"},
		{"JSONEscapedNames", fpJSON(`{"a/b":"` + secret + `","c~d":1}`), []string{"/a~1b", "/c~0d", "media"}, "json"},
		{"JSONEmptyObject", fpJSON(`{}`), []string{"media"}, "json"},
		{"JSONMemberNamedMedia", fpJSON(`{"media":"` + secret + `"}`), []string{"/media", "media"}, "json"},
		{"Form", fpForm(`card=` + secret + `&amount=4200`), []string{"/amount", "/card", "media"}, "form"},
		{"NoFields", fpJSON(`["` + secret + `"]`), nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := fpMust(t, tt.p)
			enc := f.encodeFields()
			if tt.wantKeys == nil {
				if enc != nil {
					t.Fatalf("encodeFields() = %q, want nil", enc)
				}
				return
			}
			if bytes.Contains(enc, []byte(secret)) {
				t.Errorf("encodeFields() = %s, which holds a value of the body", enc)
			}
			var m map[string]string
			if err := json.Unmarshal(enc, &m); err != nil {
				t.Fatalf("encodeFields() = %q, not a JSON object: %v", enc, err)
			}
			var keys []string
			for k := range m {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			if !slices.Equal(keys, tt.wantKeys) {
				t.Errorf("encodeFields() keys = %q, want %q", keys, tt.wantKeys)
			}
			if m["media"] != tt.wantKind {
				t.Errorf("encodeFields()[\"media\"] = %q, want %q", m["media"], tt.wantKind)
			}
			for _, d := range f.fields {
				got, err := base64.RawURLEncoding.DecodeString(m[d.pointer])
				if err != nil || !bytes.Equal(got, d.digest[:]) {
					t.Errorf("encodeFields()[%q] = %q, want the base64url digest %x", d.pointer, m[d.pointer], d.digest)
				}
			}
		})
	}
}

func TestDiffFields(t *testing.T) {
	t.Parallel()

	exclude := func(p Params) Params {
		p.Exclude = []string{"/client_ts"}
		return p
	}
	tests := []struct {
		name     string
		old, new Params
		want     []string
	}{
		{"SameBody", fpJSON(fpPaymentJSON), fpJSON(fpPaymentJSON), nil},
		{"Reformatted", fpJSON(`{"amount":4200,"currency":"eur"}`), fpJSON(`{ "currency" : "eur", "amount" : 4.2e3 }`), nil},
		{"ChangedAmount", fpJSON(`{"amount":4200,"currency":"eur"}`), fpJSON(`{"amount":4300,"currency":"eur"}`), []string{"/amount"}},
		{"AddedField", fpJSON(`{"amount":4200}`), fpJSON(`{"amount":4200,"metadata":{"a":"b"}}`), []string{"/metadata"}},
		{"RemovedField", fpJSON(`{"amount":4200,"description":"x"}`), fpJSON(`{"amount":4200}`), []string{"/description"}},
		{"RemovedLastField", fpJSON(`{"amount":4200}`), fpJSON(`{}`), []string{"/amount"}},
		{"RemovedFieldSortsFirst", fpJSON(`{"a":1,"z":1}`), fpJSON(`{"z":2}`), []string{"/a", "/z"}},
		{"ChangedAddedAndRemoved", fpJSON(`{"amount":1,"b":2,"currency":"eur"}`), fpJSON(`{"a":0,"amount":2,"currency":"eur"}`), []string{"/a", "/amount", "/b"}},
		{"NestedChangeNamesTopLevelField", fpJSON(`{"metadata":{"order_id":"1","channel":"web"}}`), fpJSON(`{"metadata":{"order_id":"2","channel":"web"}}`), []string{"/metadata"}},
		{"TypeChange", fpJSON(`{"amount":1}`), fpJSON(`{"amount":"1"}`), []string{"/amount"}},
		{"NullVersusAbsent", fpJSON(`{"amount":1,"capture":null}`), fpJSON(`{"amount":1}`), []string{"/capture"}},
		{"NamesWithSlashAndTilde", fpJSON(`{"a/b":1,"c~d":1,"e":1}`), fpJSON(`{"a/b":2,"c~d":2,"e":1}`), []string{"/a~1b", "/c~0d"}},
		{"ExcludedFieldChanged", exclude(fpJSON(`{"amount":1,"client_ts":1}`)), exclude(fpJSON(`{"amount":1,"client_ts":2}`)), nil},
		{"ExcludedAndIncludedFieldsChanged", exclude(fpJSON(`{"amount":1,"client_ts":1}`)), exclude(fpJSON(`{"amount":2,"client_ts":2}`)), []string{"/amount"}},
		{"FormChangedAmount", fpForm(fpPaymentForm), fpForm(strings.Replace(fpPaymentForm, "amount=4200", "amount=4300", 1)), []string{"/amount"}},
		{"FormAddedRepeatedValue", fpForm(`amount=1&expand[]=a`), fpForm(`amount=1&expand[]=a&expand[]=b`), []string{"/expand[]"}},
		{"FormReordered", fpForm(`amount=1&currency=eur`), fpForm(`currency=eur&amount=1`), nil},
		// An empty name is the handler's to judge; its pointer is "/".
		{"FormEmptyName", fpForm(`=1&amount=1`), fpForm(`amount=1&=2`), []string{"/"}},
		{"JSONToForm", fpJSON(`{"amount":"1","currency":"eur"}`), fpForm(`amount=1`), []string{"/amount", "/currency"}},
		{"ObjectToArray", fpJSON(`{"amount":1}`), fpJSON(`[1]`), []string{"/amount"}},
		{"ArrayToArray", fpJSON(`[1]`), fpJSON(`[2]`), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			old, next := fpMust(t, tt.old), fpMust(t, tt.new)
			got := DiffFields(old.encodeFields(), next)
			if !slices.Equal(got, tt.want) {
				t.Errorf("DiffFields = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDiffFieldsUnusableStoredDigests(t *testing.T) {
	t.Parallel()

	f := fpMust(t, fpJSON(`{"amount":1}`))
	tests := []struct {
		name   string
		stored []byte
		want   []string
	}{
		{"Nil", nil, nil},
		{"Empty", []byte{}, nil},
		{"NotJSON", []byte("\x00\x01"), nil},
		{"JSONArray", []byte(`["/amount"]`), nil},
		{"WrongDigest", []byte(`{"/amount":"AAAAAAAAAAAAAAAAAAAAAA"}`), []string{"/amount"}},
		{"OnlyOtherField", []byte(`{"/currency":"AAAAAAAAAAAAAAAAAAAAAA"}`), []string{"/amount", "/currency"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := DiffFields(tt.stored, f); !slices.Equal(got, tt.want) {
				t.Errorf("DiffFields(%q) = %q, want %q", tt.stored, got, tt.want)
			}
		})
	}
}

// TestKindChange: the stored fields say whether the first body was JSON or
// form data, so that a retry in the other media type is named as such
// instead of as a change of every field.
func TestKindChange(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name      string
		old, new  Params
		wantFirst string
	}{
		{"FormThenJSON", fpForm(`amount=4200&currency=eur`), fpJSON(`{"amount":4200,"currency":"eur"}`), kindForm},
		{"JSONThenForm", fpJSON(`{"amount":4200}`), fpForm(`amount=4200`), kindJSON},
		{"FormThenJSONArray", fpForm(`amount=4200`), fpJSON(`[4200]`), kindForm},
		{"FormThenEmpty", fpForm(`amount=4200`), Params{Method: "POST", Path: "/v1/payments"}, kindForm},
		{"JSONThenStructuredSuffix", fpJSON(`{"amount":1}`), fpWith(fpJSON(`{"amount":2}`), func(p *Params) { p.ContentType = "application/merchant+json" }), ""},
		{"SameKind", fpForm(`amount=1`), fpForm(`amount=2`), ""},
		{"FirstNotAnObject", fpJSON(`[1]`), fpForm(`amount=1`), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			old, next := fpMust(t, tt.old), fpMust(t, tt.new)
			if got := KindChange(old.encodeFields(), next); got != tt.wantFirst {
				t.Errorf("KindChange = %q, want %q", got, tt.wantFirst)
			}
		})
	}
	t.Run("StoredWithoutKind", func(t *testing.T) {
		t.Parallel()
		// Fields stored before the kind was recorded: no kind to compare,
		// and the fields are still compared one by one.
		stored := []byte(`{"/amount":"AAAAAAAAAAAAAAAAAAAAAA"}`)
		f := fpMust(t, fpJSON(`{"amount":1}`))
		if got := KindChange(stored, f); got != "" {
			t.Errorf("KindChange = %q, want none", got)
		}
		if got := DiffFields(stored, f); !slices.Equal(got, []string{"/amount"}) {
			t.Errorf("DiffFields = %q, want [/amount]", got)
		}
	})
	t.Run("KindIsNoField", func(t *testing.T) {
		t.Parallel()
		// The kind member is not named as a removed field, and a body field
		// named "media" has its own pointer.
		old, next := fpMust(t, fpJSON(`{"amount":1,"media":"x"}`)), fpMust(t, fpJSON(`{"amount":1}`))
		if got := DiffFields(old.encodeFields(), next); !slices.Equal(got, []string{"/media"}) {
			t.Errorf("DiffFields = %q, want [/media]", got)
		}
	})
}

// TestBugFingerprintEmptyObjectHidesAddedFields fails against the current
// code: EncodeFields returns nil for the empty object {}, and DiffFields
// treats nil as "no digests stored", so fields added to an empty object are
// not named.
func TestFingerprintEmptyObjectNamesAddedFields(t *testing.T) {
	t.Parallel()

	old, next := fpMust(t, fpJSON(`{}`)), fpMust(t, fpJSON(`{"amount":4200}`))
	if got, want := DiffFields(old.encodeFields(), next), []string{"/amount"}; !slices.Equal(got, want) {
		t.Errorf("DiffFields(EncodeFields of {}, {\"amount\":4200}) = %q, want %q", got, want)
	}
}

// TestBugFingerprintFormFieldNameNotUTF8 fails against the current code, as
// found by FuzzFingerprint (testdata/fuzz/FuzzFingerprint/db5b7c4f53b7a772):
// a form field name that percent-decodes to bytes that are not UTF-8 becomes
// a pointer that EncodeFields, through encoding/json, stores with U+FFFD in
// place of those bytes, so DiffFields reports the field as changed and as
// removed when it is neither, and names that differ only in such bytes share
// one stored digest.
func TestFingerprintRejectsFormFieldNameNotUTF8(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		body string
	}{
		{"LoneContinuationByte", "amount=1&%80=1"},
		{"TruncatedSequence", "amount=1&caf%C3=1"},
		{"ByteFF", "%FF%FE=1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, err := fingerprintOf(fpForm(tt.body))
			if err != nil {
				return // rejecting such a body is a correct fix too
			}
			if diff := DiffFields(f.encodeFields(), f); len(diff) != 0 {
				t.Errorf("DiffFields(EncodeFields(f), f) for %q = %q, want none", tt.body, diff)
			}
		})
	}
}

// FuzzFingerprint checks that the fingerprint never panics, that it fails only
// with a *BodyError, and that the fingerprint of a JSON body does not change
// when the body is reformatted by encoding/json or its top-level members are
// reordered, nor that of a form body or query when its distinct names are
// reordered.
func FuzzFingerprint(f *testing.F) {
	seeds := []struct {
		query, contentType, body string
	}{
		{"", "application/json", fpPaymentJSON},
		{"expand=customer&dry_run=1", "application/json; charset=utf-8", `{"amount":4200,"currency":"eur"}`},
		{"", "application/json", `{"amount":4.2e3,"currency":"\u0065ur","metadata":{"b":[1,2.50,{"y":null,"x":true}],"a":"\ud83d\ude00"}}`},
		{"", "application/merchant+json", `{"payment":{"amount":{"value":"42.00","currency":"EUR"}},"reference":"ord-1234","return_url":"https://shop.example/return?x=1&y=2"}`},
		{"", "application/json", `{"a/b":1,"c~d":2,"":3,"\u00e9":4,"\ud83d\ude00":5,"\u20ac":6,"\uff01":7,"a0":8}`},
		{"", "application/json", `{"amount":4200,"amount":1}`},
		{"", "application/json", `[{"sku":"a","qty":2},{"qty":1,"sku":"b"}]`},
		{"", "application/json", `{"amount":1e400}`},
		{"", "application/json", `{"amount":9007199254740993}`},
		{"", "application/json", `{"amount":`},
		{"", "application/json", " \t\n{ } \n"},
		{"", "application/json", `"just a string"`},
		{"", "application/x-www-form-urlencoded", fpPaymentForm},
		{"a=1&a=2", "application/x-www-form-urlencoded; charset=utf-8", `amount=4200&currency=eur&metadata[note]=a+b%26c`},
		{"", "application/x-www-form-urlencoded", `a=%zz`},
		{"a=1;b=2", "application/json", `{}`},
		{"", "", ``},
		{"", "", `{"amount":1}`},
		{"", "text/plain", `amount=1`},
		{"", ";;;", `{}`},
	}
	for _, s := range seeds {
		f.Add(s.query, s.contentType, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, query, contentType string, body []byte) {
		p := Params{Method: "POST", Path: "/v1/payments", RawQuery: query, ContentType: contentType, Body: body}
		if _, err := fingerprintOf(p); err != nil {
			checkBodyError(t, err)
		}
		p.Raw = true
		if _, err := fingerprintOf(p); err != nil && errors.Is(err, ErrUnsupportedMediaType) {
			t.Fatalf("fingerprintOf(%q, %q) with Raw error = %v", contentType, body, err)
		}

		p = fpJSON(string(body))
		p.RawQuery = query
		want, err := fingerprintOf(p)
		switch {
		case err != nil:
			checkBodyError(t, err)
		case len(body) > 0:
			fuzzCheckJSON(t, p, want)
		}

		p = fpForm(string(body))
		p.RawQuery = query
		if want, err := fingerprintOf(p); err == nil {
			fuzzCheckSame(t, p, want, func(p *Params) { p.Body = []byte(fpReverseNames(string(p.Body))) })
			fuzzCheckSame(t, p, want, func(p *Params) { p.RawQuery = fpReverseNames(p.RawQuery) })
		}
	})
}

// fuzzCheckJSON checks the fingerprint want of the JSON request p against
// reformatted and reordered copies of its body.
func fuzzCheckJSON(t *testing.T, p Params, want Fingerprint) {
	t.Helper()
	if !json.Valid(p.Body) {
		t.Fatalf("fingerprintOf accepted %q, which encoding/json rejects", p.Body)
	}
	if again := fpMust(t, p); again.Sum != want.Sum || !slices.Equal(again.fields, want.fields) {
		t.Fatalf("fingerprintOf(%q) is not deterministic", p.Body)
	}
	for i := 1; i < len(want.fields); i++ {
		if want.fields[i-1].pointer >= want.fields[i].pointer {
			t.Fatalf("Fields of %q are not sorted and unique: %q before %q", p.Body, want.fields[i-1].pointer, want.fields[i].pointer)
		}
	}
	var indented, compact bytes.Buffer
	if err := json.Indent(&indented, p.Body, "\t", "   "); err != nil {
		t.Fatalf("json.Indent(%q) error = %v", p.Body, err)
	}
	if err := json.Compact(&compact, p.Body); err != nil {
		t.Fatalf("json.Compact(%q) error = %v", p.Body, err)
	}
	for _, reformatted := range []string{indented.String(), compact.String()} {
		fuzzCheckSame(t, p, want, func(p *Params) { p.Body = []byte(reformatted) })
	}

	names, values, ok := fpTopLevelMembers(t, p.Body)
	if !ok {
		if len(want.fields) != 0 {
			t.Fatalf("Fields of the non-object %q = %v, want none", p.Body, want.fields)
		}
		return
	}
	var pointers []string
	for _, name := range names {
		pointers = append(pointers, fpPointer(name))
	}
	slices.Sort(pointers)
	var got []string
	for _, d := range want.fields {
		got = append(got, d.pointer)
	}
	if !slices.Equal(got, pointers) {
		t.Fatalf("Fields of %q name %q, want %q", p.Body, got, pointers)
	}
	order := make([]int, len(names))
	for i := range order {
		order[i] = len(order) - 1 - i
	}
	fuzzCheckSame(t, p, want, func(p *Params) { p.Body = fpJoinMembers(names, values, order) })
	if len(order) > 1 {
		rotated := append(order[1:len(order):len(order)], order[0])
		fuzzCheckSame(t, p, want, func(p *Params) { p.Body = fpJoinMembers(names, values, rotated) })

		// Excluding the first member is the same as leaving it out.
		without := fpWith(p, func(p *Params) { p.Body = fpJoinMembers(names[1:], values[1:], fpRange(len(names)-1)) })
		excluded := fpWith(p, func(p *Params) { p.Exclude = []string{fpPointer(names[0])} })
		if a, b := fpMust(t, excluded), fpMust(t, without); a.Sum != b.Sum {
			t.Fatalf("excluding the first member of %q differs from leaving it out (%q)", p.Body, without.Body)
		}
	}
}

// fuzzCheckSame checks that p changed by fn has the fingerprint want and
// that DiffFields names no field between them.
func fuzzCheckSame(t *testing.T, p Params, want Fingerprint, fn func(*Params)) {
	t.Helper()
	q := fpWith(p, fn)
	got, err := fingerprintOf(q)
	if err != nil {
		t.Fatalf("fingerprintOf(%q?%q) error = %v, but %q?%q was accepted", q.Body, q.RawQuery, err, p.Body, p.RawQuery)
	}
	if got.Sum != want.Sum {
		t.Fatalf("sum of %q?%q differs from that of %q?%q", q.Body, q.RawQuery, p.Body, p.RawQuery)
	}
	if diff := DiffFields(want.encodeFields(), got); len(diff) != 0 {
		t.Fatalf("DiffFields between %q and %q = %q, want none", p.Body, q.Body, diff)
	}
}

// fpTopLevelMembers splits a JSON object into its member names and the raw
// text of their values, in document order, using encoding/json. It reports
// false when body is not an object.
func fpTopLevelMembers(t *testing.T, body []byte) (names []string, values []json.RawMessage, ok bool) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		t.Fatalf("decoding %q: %v", body, err)
	}
	if tok != json.Delim('{') {
		return nil, nil, false
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("decoding %q: %v", body, err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("decoding %q: %v", body, err)
		}
		names = append(names, tok.(string))
		values = append(values, v)
	}
	return names, values, true
}

// fpJoinMembers writes a JSON object of the given members in the given order.
func fpJoinMembers(names []string, values []json.RawMessage, order []int) []byte {
	var b bytes.Buffer
	b.WriteString("{ ")
	for i, j := range order {
		if i > 0 {
			b.WriteString(" ,\n")
		}
		name, _ := json.Marshal(names[j])
		b.Write(name)
		b.WriteString(" : ")
		b.Write(values[j])
	}
	b.WriteString(" }")
	return b.Bytes()
}

// fpPointer returns the RFC 6901 JSON pointer of a top-level member.
func fpPointer(name string) string {
	return "/" + strings.ReplaceAll(strings.ReplaceAll(name, "~", "~0"), "/", "~1")
}

// fpRange returns 0, 1, ..., n-1.
func fpRange(n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	return r
}

// fpReverseNames returns the pairs of s with its distinct names in reverse
// order, each name's values in their order: the same request.
func fpReverseNames(s string) string {
	pairs := strings.Split(s, "&")
	name := func(pair string) string {
		n, _, _ := strings.Cut(pair, "=")
		n, _ = url.QueryUnescape(n) // s parses: every name unescapes
		return n
	}
	slices.SortStableFunc(pairs, func(a, b string) int { return strings.Compare(name(b), name(a)) })
	return strings.Join(pairs, "&")
}

// TestAppendDigest holds appendDigest to base64.RawURLEncoding, which
// encoded fields were written with before it.
func TestAppendDigest(t *testing.T) {
	for i := range 2000 {
		// Bytes of every value, and the two words' extremes.
		sum := sha256.Sum256(binary.AppendUvarint(nil, uint64(i)))
		d := [16]byte(sum[:16])
		switch i {
		case 0:
			d = [16]byte{}
		case 1:
			d = [16]byte(bytes.Repeat([]byte{0xff}, 16))
		}
		got := appendDigest([]byte("x"), &d)
		want := base64.RawURLEncoding.AppendEncode([]byte("x"), d[:])
		if !bytes.Equal(got, want) {
			t.Fatalf("appendDigest(%x) = %q, want %q", d, got, want)
		}
	}
}

// TestQueryEscaped checks that queryEscaped takes a text exactly when
// appendQueryEscape writes it back from what appendQueryUnescape reads in
// it, so that a form value kept as it came is the one written.
func TestQueryEscaped(t *testing.T) {
	t.Parallel()
	const hex = "0123456789ABCDEFabcdef"
	for c := range 256 {
		b := string([]byte{byte(c)})
		texts := []string{b, "a" + b + "z", "%" + b, "%4" + b, "%" + b + "0", "+" + b + "%41"}
		for _, h := range hex {
			texts = append(texts, "%"+string(h)+b, "x%"+b+string(h))
		}
		for _, text := range texts {
			un, ok := appendQueryUnescape(nil, text)
			back := ok && string(appendQueryEscape(nil, un)) == text
			if got := queryEscaped(text); got != back {
				t.Errorf("queryEscaped(%q) = %v, escaped again it is itself: %v", text, got, back)
			}
			if got := queryEscaped([]byte(text)); got != back {
				t.Errorf("queryEscaped([]byte(%q)) = %v, escaped again it is itself: %v", text, got, back)
			}
		}
	}
}
