// Package record holds the stored form of a response that the SQL stores
// share: the status code, the replayed headers as a JSON object of lists,
// and the body, never NULL.
package record

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/idemkit/idem/idemstore"
)

// EncodeHeader returns the stored form of a response's headers: the bytes
// that encoding/json writes for h, which stores compare and decode. Headers
// whose names and values are printable ASCII that JSON writes as it is, as
// replayed headers almost always are, are written here, without
// encoding/json's reflection; any other goes to encoding/json.
//
// It reads the map once: each field is kept as it is read, so that writing
// the fields in order needs no second pass over the map, nor a lookup of
// each name in it.
func EncodeHeader(h http.Header) ([]byte, error) {
	if h == nil {
		return marshalHeader(h)
	}
	var buf [8]field
	fields := buf[:0]
	n := len("{}")
	for name, values := range h {
		if !plain(name) {
			return marshalHeader(h)
		}
		n += len(name) + len(`"":[],`)
		for _, v := range values {
			if !plain(v) {
				return marshalHeader(h)
			}
			n += len(v) + len(`"",`)
		}
		fields = append(fields, field{name, values})
	}
	sortFields(fields)
	out := make([]byte, 0, n)
	out = append(out, '{')
	for i, f := range fields {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(append(append(out, '"'), f.name...), '"', ':')
		if f.values == nil {
			out = append(out, "null"...)
			continue
		}
		out = append(out, '[')
		for j, v := range f.values {
			if j > 0 {
				out = append(out, ',')
			}
			out = append(append(append(out, '"'), v...), '"')
		}
		out = append(out, ']')
	}
	return append(out, '}'), nil
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

// sortFields sorts fields by name, as encoding/json orders a map's keys.
// A response has a few fields: insertion sort, without the calls through
// a comparison function of the slices package, is the fastest here. Names
// are distinct, being a map's keys.
func sortFields(fields []field) {
	for i := 1; i < len(fields); i++ {
		for j := i; j > 0 && fields[j].name < fields[j-1].name; j-- {
			fields[j], fields[j-1] = fields[j-1], fields[j]
		}
	}
}

// plain reports whether every byte of s is printable ASCII that
// encoding/json writes as it is (see escaped). It looks at eight bytes a
// step and ORs their marks, with one test a step instead of one a byte:
// headers are mostly plain, and are read to their end.
func plain(s string) bool {
	switch s {
	case "Content-Type", "Content-Language", "Location",
		"application/json", "application/problem+json", "application/json; charset=utf-8":
		// The names on the replay list by default and the commonest
		// media types, known to be plain, are compared rather than read
		// byte by byte.
		return true
	}
	var bad byte
	for len(s) >= 8 {
		bad |= escaped[s[0]] | escaped[s[1]] | escaped[s[2]] | escaped[s[3]] |
			escaped[s[4]] | escaped[s[5]] | escaped[s[6]] | escaped[s[7]]
		s = s[8:]
	}
	for i := 0; i < len(s); i++ {
		bad |= escaped[s[i]]
	}
	return bad == 0
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
		c := rest[:8:8]
		if stringStop[c[0]]|stringStop[c[1]]|stringStop[c[2]]|stringStop[c[3]]|
			stringStop[c[4]]|stringStop[c[5]]|stringStop[c[6]]|stringStop[c[7]] != 0 {
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
