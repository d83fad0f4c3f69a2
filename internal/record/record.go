// Package record holds the stored form of a response that the SQL stores
// share: the status code, the replayed headers as a JSON object of lists,
// and the body, never NULL.
package record

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/idemkit/idem/internal/replay"
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

// The names on the replay list by default.
const (
	contentLanguage = replay.ContentLanguage
	contentType     = replay.ContentType
	location        = replay.Location
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
