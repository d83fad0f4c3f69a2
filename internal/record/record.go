// Package record holds the stored form of a response that the SQL stores
// share: the status code, the replayed headers as a JSON object of lists,
// and the body, never NULL.
package record

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/bits"
	"net/http"

	"github.com/idemkit/idem/idemstore"
)

// EncodeHeader returns the stored form of a response's headers: the bytes
// that encoding/json writes for h, which stores compare and decode. Headers
// whose names and values are printable ASCII that JSON writes as it is, as
// replayed headers almost always are, are written here, without
// encoding/json's reflection; any other goes to encoding/json.
//
// A header whose names are all on the replay list by default, as most
// stored headers are, is read by looking those names up, which costs less
// than a pass over the map, and gives the fields in their order; any other
// is read in one pass (see encodeAny).
func EncodeHeader(h http.Header) ([]byte, error) {
	if h == nil {
		return marshalHeader(h)
	}
	// The values of the fields found, and which are, by the index of
	// their name in defaultNames: kept in memory rather than in
	// registers, that the compiler would shuffle from branch to branch.
	var (
		values [len(defaultNames)][]string
		found  [len(defaultNames)]bool
	)
	const cl, ct, loc = 0, 1, 2
	// The shapes of header looked up are those of most responses: one
	// field, Content-Type or Location; both; and the three. Any other
	// header is read in one pass, after a lookup or two, at most three.
	switch len(h) {
	case 0:
	case 1:
		if values[ct], found[ct] = h[contentType]; !found[ct] {
			if values[loc], found[loc] = h[location]; !found[loc] {
				return encodeAny(h)
			}
		}
	case 3:
		// The rarest first, which tells soonest of a header with another
		// name.
		if values[cl], found[cl] = h[contentLanguage]; !found[cl] {
			return encodeAny(h)
		}
		fallthrough
	case 2:
		// Location first: a header of Content-Type and a name of its own
		// is likelier than one of Location and a name of its own.
		if values[loc], found[loc] = h[location]; !found[loc] {
			return encodeAny(h)
		}
		if values[ct], found[ct] = h[contentType]; !found[ct] {
			return encodeAny(h)
		}
	default:
		return encodeAny(h)
	}
	// The fields are written in the order of their names, with a comma
	// after each but the last, counted in n for each field: n may be one
	// byte more than the output, in its capacity.
	n := len("{}")
	if found[cl] {
		size, ok := valuesSize(values[cl])
		if !ok {
			return marshalHeader(h)
		}
		n += len(`"Content-Language":,`) + size
	}
	if found[ct] {
		size, ok := valuesSize(values[ct])
		if !ok {
			return marshalHeader(h)
		}
		n += len(`"Content-Type":,`) + size
	}
	if found[loc] {
		size, ok := valuesSize(values[loc])
		if !ok {
			return marshalHeader(h)
		}
		n += len(`"Location":,`) + size
	}
	out := make([]byte, 0, n)
	out = append(out, '{')
	if found[cl] {
		out = appendValues(append(out, `"Content-Language":`...), values[cl])
	}
	if found[ct] {
		if found[cl] {
			out = append(out, ',')
		}
		out = appendValues(append(out, `"Content-Type":`...), values[ct])
	}
	if found[loc] {
		if found[cl] || found[ct] {
			out = append(out, ',')
		}
		out = appendValues(append(out, `"Location":`...), values[loc])
	}
	return append(out, '}'), nil
}

// The names on the replay list by default (see replay.Headers).
const (
	contentLanguage = "Content-Language"
	contentType     = "Content-Type"
	location        = "Location"
)

// defaultNames are the names on the replay list by default, in the order
// encoding/json writes them.
var defaultNames = [...]string{contentLanguage, contentType, location}

// encodeAny is EncodeHeader of any header but nil. It reads the map once:
// each field is kept as it is read, so that writing the fields in order
// needs no second pass over the map, nor a lookup of each name in it.
func encodeAny(h http.Header) ([]byte, error) {
	var buf [8]field
	if len(h) > len(buf) {
		// Rare: more fields than replay lists hold but for a long
		// ReplayHeaders.
		return marshalHeader(h)
	}
	k := 0
	n := len("{}") // and a comma after each field, one more than written
	for name, values := range h {
		if !plain(name) {
			return marshalHeader(h)
		}
		size, ok := valuesSize(values)
		if !ok {
			return marshalHeader(h)
		}
		n += len(name) + len(`"":,`) + size
		// Sorted by name as they are read, as encoding/json orders a
		// map's keys: a response has a few fields, and insertion into
		// buf, without a pass of its own, is the cheapest sort here.
		// Names are distinct, being a map's keys. k < len(h) <= len(buf).
		j := k
		for ; j > 0 && before(name, buf[j-1].name); j-- {
			buf[j] = buf[j-1]
		}
		buf[j] = field{name, values}
		k++
	}
	fields := buf[:k]
	out := make([]byte, 0, n)
	out = append(out, '{')
	for i := range fields {
		f := &fields[i] // not a copy of the field a step
		if i > 0 {
			out = append(out, ',')
		}
		out = append(append(append(out, '"'), f.name...), '"', ':')
		out = appendValues(out, f.values)
	}
	return append(out, '}'), nil
}

// valuesSize returns the length of the list of values that appendValues
// writes; false when a value is not plain.
func valuesSize(values []string) (int, bool) {
	if len(values) == 1 { // most fields
		return len(values[0]) + len(`[""]`), plain(values[0])
	}
	return listSize(values)
}

// listSize is valuesSize of nil, none, or more than one value.
func listSize(values []string) (int, bool) {
	if values == nil {
		return len("null"), true
	}
	n := len("[]") + max(len(values)-1, 0) // and the commas between values
	for _, v := range values {
		if !plain(v) {
			return 0, false
		}
		n += len(v) + len(`""`)
	}
	return n, true
}

// appendValues appends the list of values of a field to out, whose
// capacity has room for it (see valuesSize).
func appendValues(out []byte, values []string) []byte {
	if len(values) == 1 { // most fields
		return append(append(append(out, '[', '"'), values[0]...), '"', ']')
	}
	return appendList(out, values)
}

// appendList is appendValues of nil, none, or more than one value.
func appendList(out []byte, values []string) []byte {
	if values == nil {
		return append(out, "null"...)
	}
	out = append(out, '[')
	for i, v := range values {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(append(append(out, '"'), v...), '"')
	}
	return append(out, ']')
}

// marshalHeader is EncodeHeader by encoding/json, for any header.
func marshalHeader(h http.Header) ([]byte, error) {
	b, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encode headers: %w", err)
	}
	return b, nil
}

// field is one field of a header, as EncodeHeader writes it.
type field struct {
	name   string
	values []string
}

// before reports whether a < b. Header names mostly differ in their first
// byte, which decides most comparisons without a call to compare strings.
func before(a, b string) bool {
	if a != "" && b != "" && a[0] != b[0] {
		return a[0] < b[0]
	}
	return a < b
}

// plain reports whether every byte of s is printable ASCII that
// encoding/json writes as it is (see escaped). Headers are mostly plain,
// and are read to their end: it tests eight bytes at a time, as one
// word (see unplainWord), rather than one byte at a time.
func plain(s string) bool {
	switch s {
	case "Content-Type", "Content-Language", "Location",
		"application/json", "application/problem+json", "application/json; charset=utf-8":
		// The names on the replay list by default and the commonest
		// media types, known to be plain, are compared rather than read.
		return true
	}
	if len(s) < 8 {
		var bad byte
		for i := 0; i < len(s); i++ {
			bad |= escaped[s[i]]
		}
		return bad == 0
	}
	// The last eight bytes first, which may overlap those the loops
	// test: a word rather than a loop over the last few bytes. Then two
	// words a step, and the one left, if any.
	bad := unplainWord(word(s[len(s)-8:]))
	for ; len(s) > 16; s = s[16:] {
		bad |= unplainWord(word(s)) | unplainWord(word(s[8:]))
	}
	if len(s) > 8 {
		bad |= unplainWord(word(s))
	}
	return bad&highBits == 0
}

const (
	// lowBits has the low bit of every byte of a word set.
	lowBits = 0x0101010101010101
	// highBits has the high bit of every byte of a word set.
	highBits = 0x8080808080808080
)

// word returns the first eight bytes of s, which has them, as a
// little-endian word. The compiler makes the eight loads one.
func word(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// unplainWord returns a word whose high bits (highBits) are all clear
// when every byte of x is one that escaped does not mark, and not all
// clear otherwise. Each term sets a byte's high bit for one kind of byte
// that escaped marks. An addition or subtraction carries or borrows into
// the next byte only out of a byte that it marks, so the lowest marked
// byte of x is always marked in the result, and no byte is when none is
// marked in x: the test is exact for the word as a whole, which is all
// that plain asks. TestPlainWord compares it with escaped.
func unplainWord(x uint64) uint64 {
	return x | // 0x80 and above
		(x + 0x01*lowBits) | // 0x7f
		(x - 0x20*lowBits) | // below 0x20
		(((x | 0x04*lowBits) ^ 0x26*lowBits) - lowBits) | // '"' (0x22) or '&' (0x26)
		(((x | 0x02*lowBits) ^ 0x3e*lowBits) - lowBits) | // '<' (0x3c) or '>' (0x3e)
		((x ^ 0x5c*lowBits) - lowBits) // '\\'
}

// escaped marks, with 1, the bytes that encoding/json does not write in a
// string as they are: all but printable ASCII, and of that '"', '\\' and
// the characters it escapes for HTML.
var escaped = func() (t [256]byte) {
	for c := range 256 {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			t[c] = 1
		}
	}
	return t
}()

// EncodeBody returns the stored form of a response's body: an empty body
// is stored as zero bytes, not NULL.
func EncodeBody(body []byte) []byte {
	if body == nil {
		return []byte{}
	}
	return body
}

// DecodeResponse returns the response stored as status, header (the
// output of EncodeHeader; empty means no headers) and body. The response
// always has a non-nil Header and Body.
func DecodeResponse(status int, header, body []byte) (*idemstore.Response, error) {
	h, ok := decodePlain(header)
	if !ok {
		var err error
		if h, err = unmarshalHeader(header); err != nil {
			return nil, err
		}
	}
	return &idemstore.Response{StatusCode: status, Header: h, Body: EncodeBody(body)}, nil
}

// unmarshalHeader decodes a stored header by encoding/json, for any
// header. It is apart from DecodeResponse so that the header json.Unmarshal
// fills, which escapes, is allocated only here.
func unmarshalHeader(header []byte) (http.Header, error) {
	h := http.Header{}
	if len(header) > 0 {
		if err := json.Unmarshal(header, &h); err != nil {
			return nil, fmt.Errorf("decode stored headers: %w", err)
		}
	}
	return h, nil
}

// decodePlain returns what json.Unmarshal of header into an empty
// http.Header returns, when header is an object of null or arrays of
// strings whose strings hold only bytes that JSON reads as they are
// (printable ASCII but '"' and '\\'): the form EncodeHeader writes for a
// plain header, and PostgreSQL's jsonb writes back, with a space after
// each ':' and ','. It reports false for any other header, empty ones
// among them, which the caller leaves to encoding/json. It allocates the
// text of every name and value at once, and every value's slot at once,
// rather than each on its own with reflection as encoding/json does.
func decodePlain(header []byte) (http.Header, bool) {
	type fieldSpan struct {
		name        textSpan
		first, n    int // of values
		null, empty bool
	}
	var fieldBuf [8]fieldSpan
	var valueBuf [16]textSpan
	fields, values := fieldBuf[:0], valueBuf[:0]
	i := skipSpace(header, 0)
	if !at(header, i, '{') {
		return nil, false
	}
	i = skipSpace(header, i+1)
	if at(header, i, '}') {
		i++
	} else {
		for {
			var f fieldSpan
			var ok bool
			if f.name, i, ok = scanString(header, i); !ok {
				return nil, false
			}
			if i = skipSpace(header, i); !at(header, i, ':') {
				return nil, false
			}
			f.first = len(values)
			i = skipSpace(header, i+1)
			switch {
			case at(header, i, 'n'):
				if !bytes.HasPrefix(header[i:], []byte("null")) {
					return nil, false
				}
				f.null = true
				i += len("null")
			case !at(header, i, '['):
				return nil, false
			case at(header, skipSpace(header, i+1), ']'):
				f.empty = true
				i = skipSpace(header, i+1) + 1
			default:
				i++
				for {
					var v textSpan
					if v, i, ok = scanString(header, skipSpace(header, i)); !ok {
						return nil, false
					}
					values = append(values, v)
					if i = skipSpace(header, i); at(header, i, ']') {
						i++
						break
					}
					if !at(header, i, ',') {
						return nil, false
					}
					i++
				}
			}
			f.n = len(values) - f.first
			fields = append(fields, f)
			if i = skipSpace(header, i); at(header, i, '}') {
				i++
				break
			}
			if !at(header, i, ',') {
				return nil, false
			}
			i = skipSpace(header, i+1)
		}
	}
	if skipSpace(header, i) != len(header) {
		return nil, false
	}
	text := string(header)
	all := make([]string, len(values))
	for k, v := range values {
		all[k] = text[v.start:v.end]
	}
	h := make(http.Header, len(fields))
	for _, f := range fields {
		name := text[f.name.start:f.name.end]
		switch {
		case f.null:
			h[name] = nil
		case f.empty:
			h[name] = []string{}
		default:
			h[name] = all[f.first : f.first+f.n : f.first+f.n]
		}
	}
	return h, true
}

// textSpan is where a string's text is in a stored header.
type textSpan struct{ start, end int }

// at reports whether b[i] is c.
func at(b []byte, i int, c byte) bool { return i < len(b) && b[i] == c }

// skipSpace returns where the white space that JSON allows between
// tokens, if any, ends at i.
func skipSpace(b []byte, i int) int {
	// One compare tells the bytes of tokens, all above ' ', from white
	// space.
	for i < len(b) && b[i] <= ' ' && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString returns the text of the string at i, whose bytes JSON reads
// as they are (see stringStop), and where it ends; false when there is no
// such string at i. It looks at eight bytes a step while none stops it.
func scanString(b []byte, i int) (textSpan, int, bool) {
	if !at(b, i, '"') {
		return textSpan{}, 0, false
	}
	rest := b[i+1:]
	for len(rest) >= 8 {
		if m := stopWord(binary.LittleEndian.Uint64(rest)) & highBits; m != 0 {
			// The lowest byte marked is the first stop (see stopWord).
			rest = rest[bits.TrailingZeros64(m)/8:]
			break
		}
		rest = rest[8:]
	}
	for len(rest) > 0 && stringStop[rest[0]] == 0 {
		rest = rest[1:]
	}
	end := len(b) - len(rest)
	if !at(b, end, '"') {
		return textSpan{}, 0, false
	}
	return textSpan{i + 1, end}, end + 1, true
}

// stopWord is unplainWord for the bytes that stringStop marks: its high
// bits (highBits) are all clear when x, eight bytes, has none of them.
// As in unplainWord, a carry or borrow goes only out of a marked byte, so
// the lowest byte whose high bit is set is the first that stringStop
// marks. TestStopWord compares it with stringStop.
func stopWord(x uint64) uint64 {
	return x | // 0x80 and above
		(x + 0x01*lowBits) | // 0x7f
		(x - 0x20*lowBits) | // below 0x20
		((x ^ 0x22*lowBits) - lowBits) | // '"'
		((x ^ 0x5c*lowBits) - lowBits) // '\\'
}

// stringStop marks, with 1, the bytes that end a string's text in
// scanString: the quote that closes it, and those that JSON does not read
// as they are (a backslash's escape, bytes outside printable ASCII).
var stringStop = func() (t [256]byte) {
	for c := range 256 {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			t[c] = 1
		}
	}
	return t
}()
