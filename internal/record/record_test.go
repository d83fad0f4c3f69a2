package record

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/bits"
	"math/rand/v2"
	"net/http"
	"reflect"
	"slices"
	"testing"

	"github.com/idemkit/idem/internal/replay"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	h := http.Header{"Content-Type": {"application/json"}, "X-Multi": {"one", "two"}}
	enc, err := EncodeHeader(h)
	if err != nil {
		t.Fatalf("EncodeHeader: %v", err)
	}
	resp, err := DecodeResponse(201, enc, EncodeBody(nil))
	if err != nil {
		t.Fatalf("DecodeResponse: %v", err)
	}
	if resp.StatusCode != 201 || resp.Body == nil || len(resp.Body) != 0 ||
		resp.Header.Get("Content-Type") != "application/json" || len(resp.Header.Values("X-Multi")) != 2 {
		t.Errorf("DecodeResponse = %+v", resp)
	}
	if resp, err := DecodeResponse(200, nil, []byte("x")); err != nil || resp.Header == nil || !bytes.Equal(resp.Body, []byte("x")) {
		t.Errorf("DecodeResponse without headers = %+v, %v", resp, err)
	}
	if _, err := DecodeResponse(200, []byte("{"), nil); err == nil {
		t.Error("DecodeResponse accepted broken headers")
	}
}

// TestEncodeHeaderIsEncodingJSON: the stored form is the bytes
// encoding/json writes, for plain headers (written without it) and for
// any other (left to it).
func TestEncodeHeaderIsEncodingJSON(t *testing.T) {
	t.Parallel()
	headers := []http.Header{
		nil,
		{},
		{"Content-Type": {"application/json"}},
		{"Content-Type": {"application/json"}, "Location": {"/v1/payments/pay_1"}, "X-Multi": {"one", "two", ""}},
		{"X-Nil": nil, "X-Empty": {}, "A": {"b"}},
		{"X-Html": {"<a href='x'>&amp;</a>"}},
		{"X-Quote": {`say "hi"\now`}},
		{"X-Control": {"a\tb\x01"}},
		{"X-Unicode": {"café ☕ \u2028"}},
		{"X-Bad-Utf8": {"\xff\xfe"}},
		{"Content-Type": {"application/problem+json"}, "Content-Language": {"application/json; charset=utf-8"}, "Location": {"Location"}},
		{"Z": {"1"}, "Y": {"2"}, "X": {"3"}, "W": {"4"}, "V": {"5"}, "U": {"6"}, "T": {"7"}, "S": {"8"}, "R": {"9"}, "Q": {"10"}},
	}
	for _, h := range headers {
		checkEncodeHeader(t, h)
	}
}

// FuzzEncodeHeader checks EncodeHeader against encoding/json on any name
// and values.
func FuzzEncodeHeader(f *testing.F) {
	f.Add("Content-Type", "application/json", "x")
	f.Add("X-A", "<>&", "\x00")
	f.Fuzz(func(t *testing.T, name, v1, v2 string) {
		h := http.Header{name: {v1, v2}, "Location": {v2}}
		checkEncodeHeader(t, h)
	})
}

// TestEncodeHeaderRandom compares EncodeHeader with encoding/json on many
// random headers: up to a dozen fields, nil, empty and repeated values, and
// names and values mostly plain, sometimes with a byte that encoding/json
// escapes at any position.
func TestEncodeHeaderRandom(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(1, 2))
	text := randomText(rnd, 40, "abcXYZ019-_/;=:., *+%", "\"\\<>&\x00\x1f\x7f\xc3\xa9\xe2\x80\xa8")
	for range 20000 {
		h := randomHeader(rnd, text, text, 13, 3)
		checkEncodeHeader(t, h)
	}
}

// TestEncodeHeaderDefaultNames compares EncodeHeader with encoding/json on
// random headers whose names are mostly those on the replay list by
// default, which it looks up, with any other among them sometimes.
func TestEncodeHeaderDefaultNames(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(5, 6))
	names := []string{contentLanguage, contentType, location, contentLanguage, contentType, location, "X-Id", "Content-Typf", "", "Locatio"}
	text := randomText(rnd, 50, "abcXYZ019-_/;=:., *+%", "\"\\<>&\x00\x1f\x7f\xc3\xa9")
	value := func() string {
		if rnd.IntN(4) == 0 {
			return []string{"application/json", "application/problem+json", "application/json; charset=utf-8", ""}[rnd.IntN(4)]
		}
		return text()
	}
	name := func() string { return names[rnd.IntN(len(names))] }
	for range 20000 {
		h := randomHeader(rnd, name, value, 5, 3)
		checkEncodeHeader(t, h)
	}
}

// TestDefaultNames: the names EncodeHeader looks up are those on the
// replay list by default, in encoding/json's order.
func TestDefaultNames(t *testing.T) {
	t.Parallel()
	want := replay.Headers(nil)
	slices.Sort(want)
	if !slices.Equal(defaultNames[:], want) {
		t.Errorf("defaultNames = %q; want %q", defaultNames, want)
	}
}

// TestEncodeHeaderAllocs: a plain header is encoded in one allocation, its
// output, for up to eight fields.
func TestEncodeHeaderAllocs(t *testing.T) {
	h := http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/payments/pay_1"}, "X-Multi": {"one", "two"}}
	if n := testing.AllocsPerRun(100, func() { EncodeHeader(h) }); n != 1 {
		t.Errorf("EncodeHeader allocates %v times; want 1", n)
	}
}

func BenchmarkEncodeHeader(b *testing.B) {
	h := http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/payments/pay_8e03978e40d543e8bc93"}}
	b.ReportAllocs()
	for b.Loop() {
		EncodeHeader(h)
	}
}

// decodeJSON is DecodeResponse's header by encoding/json alone, as it was
// decoded before decodePlain.
func decodeJSON(header []byte) (http.Header, error) {
	h := http.Header{}
	if len(header) > 0 {
		if err := json.Unmarshal(header, &h); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// checkDecode fails the test unless DecodeResponse decodes header as
// encoding/json does: the same header, nil and empty values told apart,
// or an error for both.
func checkDecode(t *testing.T, header []byte) {
	t.Helper()
	want, wantErr := decodeJSON(header)
	resp, err := DecodeResponse(200, header, nil)
	switch {
	case (err != nil) != (wantErr != nil):
		t.Fatalf("DecodeResponse(%q) error = %v; encoding/json's = %v", header, err, wantErr)
	case err == nil && !reflect.DeepEqual(resp.Header, want):
		t.Fatalf("DecodeResponse(%q) = %#v; encoding/json's = %#v", header, resp.Header, want)
	}
}

// TestDecodeResponseIsEncodingJSON: stored headers, those EncodeHeader
// writes and any other text, decode as encoding/json decodes them.
func TestDecodeResponseIsEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, header := range []string{
		``, `{}`, `null`, `{"A":null}`, `{"A":[]}`, `{"A":[""]}`, `{"A":["x","y"],"B":["z"]}`,
		`{"A":["x"],"A":null}`, `{"A":null,"A":["x"]}`, `{"A":["1"],"a":["2"]}`,
		`{"A":["<>&"]}`, `{"A":["\u003c"]}`, `{"A":["a\"b"]}`, `{"A":["caf\u00e9"]}`, "{\"A\":[\"caf\xc3\xa9\"]}", "{\"A\":[\"\xff\"]}",
		`{ "A":["x"]}`, `{"A": ["x"]}`, `{"A":["x"] }`, `{"A":["x"]} `, ` {"A":["x"]}`,
		`{"A":["x",]}`, `{"A":["x"],}`, `{"A":[,"x"]}`, `{"A":["x"]`, `{"A":["x]}`, `{"A":"x"}`, `{"A":[1]}`,
		`{"A":nul}`, `{"A":nullx}`, `{"A":[null]}`, `{"A":[]]}`, `{"A":["x"]}}`, `{"A":["x"]}x`, `{"A"}`, `{"A":}`, `{:["x"]}`, `[]`, `{`, `}`, `"x"`,
		"{\"A\":[\"tab\there\"]}", `{"":["x"]}`, `{"A":["x"],"B":[],"C":null,"D":["1","2","3"]}`,
		// As PostgreSQL's jsonb writes them back, and with other white space.
		`{"Location": ["/v1/payments/pay_1"], "Content-Type": ["application/json"]}`, `{"A": null, "B": [], "C": ["x", "y"]}`,
		" { \"A\" :\t[ \"x\" ,\n\"y\" ] ,\r\n\"B\" : null } \n", `{ }`, `{"A": [ ]}`, `{"A":["x"]}` + "\x00", `{"A":["x"]} {}`,
	} {
		checkDecode(t, []byte(header))
	}
	rnd := rand.New(rand.NewPCG(3, 4))
	text := randomText(rnd, 30, "abcXYZ019-_/;=:., *+%<>&", "")
	for range 20000 {
		h := randomHeader(rnd, text, text, 20, 4)
		enc, err := EncodeHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		indented, err := json.MarshalIndent(h, " ", "\t")
		if err != nil {
			t.Fatal(err)
		}
		for _, enc := range [][]byte{enc, indented} {
			checkDecode(t, enc)
			if _, ok := decodePlain(enc); !ok && !bytes.Contains(enc, []byte(`\u`)) {
				t.Fatalf("decodePlain refused %s, a plain header", enc)
			}
		}
	}
}

// FuzzDecodeResponse checks DecodeResponse against encoding/json on any
// stored header.
func FuzzDecodeResponse(f *testing.F) {
	f.Add([]byte(`{"Content-Type":["application/json"],"Location":["/v1/payments/pay_1"]}`))
	f.Add([]byte(`{"A":null,"B":[],"C":["x","y"]}`))
	f.Fuzz(func(t *testing.T, header []byte) { checkDecode(t, header) })
}

// TestDecodeResponseAllocs: a plain stored header of two fields decodes
// in five allocations: the response, the text of its names and values,
// their slots, and the map (two).
func TestDecodeResponseAllocs(t *testing.T) {
	for _, header := range [][]byte{
		[]byte(`{"Content-Type":["application/json"],"Location":["/v1/payments/pay_1"]}`),
		[]byte(`{"Location": ["/v1/payments/pay_1"], "Content-Type": ["application/json"]}`), // jsonb's
	} {
		if _, ok := decodePlain(header); !ok {
			t.Fatalf("decodePlain refused %s", header)
		}
		if n := testing.AllocsPerRun(100, func() { DecodeResponse(201, header, nil) }); n > 5 {
			t.Errorf("DecodeResponse(%s) allocates %v times; want at most 5", header, n)
		}
	}
}

func BenchmarkDecodeResponse(b *testing.B) {
	header := []byte(`{"Content-Type":["application/json"],"Location":["/v1/payments/pay_8e03978e40d543e8bc93"]}`)
	b.ReportAllocs()
	for b.Loop() {
		DecodeResponse(201, header, nil)
	}
}

// plainByByte is plain read one byte at a time with escaped, as it was
// before unplainWord.
func plainByByte(s string) bool {
	for i := 0; i < len(s); i++ {
		if escaped[s[i]] != 0 {
			return false
		}
	}
	return true
}

// TestPlainWord: unplainWord tells, for a whole word, what escaped tells
// byte by byte: for every byte at every place in a word of plain bytes,
// and for every pair of bytes side by side, where a carry or borrow out
// of one byte reaches the next.
func TestPlainWord(t *testing.T) {
	t.Parallel()
	check := func(w [8]byte) {
		s := string(w[:])
		if got, want := unplainWord(word(s))&highBits == 0, plainByByte(s); got != want {
			t.Fatalf("unplainWord(%q) tells plain %v; escaped tells %v", s, got, want)
		}
	}
	eachTestWord(check)
}

// TestPlainRandom: plain is plainByByte for strings of every length up
// to 40, mostly plain and sometimes with one or two bytes that are not,
// anywhere: in the word loop, and in the last word that overlaps it.
func TestPlainRandom(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(3, 4))
	const plainBytes = "abcXYZ019-_/;=:., *+%~!#$'()?@[]^`{|}"
	for range 50000 {
		b := make([]byte, rnd.IntN(41))
		for i := range b {
			b[i] = plainBytes[rnd.IntN(len(plainBytes))]
		}
		for k := rnd.IntN(3); k > 0 && len(b) > 0; k-- {
			b[rnd.IntN(len(b))] = byte(rnd.IntN(256))
		}
		if got, want := plain(string(b)), plainByByte(string(b)); got != want {
			t.Fatalf("plain(%q) = %v; want %v", b, got, want)
		}
	}
}

// TestBefore: before is the order of strings, for names that differ in
// their first byte, share it, or are empty.
func TestBefore(t *testing.T) {
	t.Parallel()
	names := []string{"", "A", "Location", "Content-Type", "Content-Language", "X-Id", "X-Idempotent", "a", "\xff", "Cache-Control"}
	for _, a := range names {
		for _, b := range names {
			if got, want := before(a, b), a < b; got != want {
				t.Errorf("before(%q, %q) = %v; want %v", a, b, got, want)
			}
		}
	}
}

// TestStopWord: stopWord tells, for a whole word, what stringStop tells
// byte by byte, as TestPlainWord does for unplainWord.
func TestStopWord(t *testing.T) {
	t.Parallel()
	check := func(w [8]byte) {
		first := 8 // the first stop, or 8 for none
		for i, c := range w {
			if stringStop[c] != 0 {
				first = i
				break
			}
		}
		if got := bits.TrailingZeros64(stopWord(binary.LittleEndian.Uint64(w[:]))&highBits) / 8; got != first {
			t.Fatalf("stopWord(%q) tells the first stop at %d; stringStop tells %d", w, got, first)
		}
	}
	eachTestWord(check)
}

// randomHeader returns a header of fewer than fields names from name,
// each with a nil value, an empty one, or 1 to values values from value.
func randomHeader(rnd *rand.Rand, name, value func() string, fields, values int) http.Header {
	h := http.Header{}
	for range rnd.IntN(fields) {
		var vs []string
		switch rnd.IntN(10) {
		case 0: // nil
		case 1:
			vs = []string{}
		default:
			for range 1 + rnd.IntN(values) {
				vs = append(vs, value())
			}
		}
		h[name()] = vs
	}
	return h
}

// randomText returns a maker of strings of fewer than max bytes drawn from
// plain, one in eight of them with one byte drawn from other at a random
// place (none when other is empty).
func randomText(rnd *rand.Rand, max int, plain, other string) func() string {
	return func() string {
		b := make([]byte, rnd.IntN(max))
		for i := range b {
			b[i] = plain[rnd.IntN(len(plain))]
		}
		if other != "" && len(b) > 0 && rnd.IntN(8) == 0 {
			b[rnd.IntN(len(b))] = other[rnd.IntN(len(other))]
		}
		return string(b)
	}
}

// checkEncodeHeader fails t unless EncodeHeader writes the bytes that
// encoding/json does for h.
func checkEncodeHeader(t *testing.T, h http.Header) {
	t.Helper()
	want, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := EncodeHeader(h); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("EncodeHeader(%q) = %s, %v; want %s", h, got, err, want)
	}
}

// eachTestWord calls check with every byte at every place in a word of
// plain bytes, and with every pair of bytes side by side, where a carry or
// borrow out of one byte reaches the next: the words that the word-wide
// tests compare with their byte-by-byte tables.
func eachTestWord(check func([8]byte)) {
	for pos := range 8 {
		for c := range 256 {
			w := [8]byte{'a', 'b', 'c', ' ', '~', '!', 'z', '0'}
			w[pos] = byte(c)
			check(w)
		}
	}
	for pos := range 7 {
		for c := range 256 {
			for d := range 256 {
				w := [8]byte{'A', '/', '9', ':', 'y', '=', ';', '}'}
				w[pos], w[pos+1] = byte(c), byte(d)
				check(w)
			}
		}
	}
}
