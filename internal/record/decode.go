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
				i = skipSpace(header, i+1)
				for {
					var v textSpan
					if v, i, ok = scanString(header, i); !ok {
						return nil, false
					}
					values = append(values, v)
					var end bool
					if i, end, ok = afterItem(header, i, ']'); !ok {
						return nil, false
					} else if end {
						break
					}
				}
			}
			f.n = len(values) - f.first
			fields = append(fields, f)
			var end bool
			if i, end, ok = afterItem(header, i, '}'); !ok {
				return nil, false
			} else if end {
				break
			}
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

// afterItem reads what follows an item of a list that closer ends, from
// i: the closer (end), or a comma and the white space after it. It
// returns where what follows begins, and false for anything else.
func afterItem(b []byte, i int, closer byte) (next int, end, ok bool) {
	switch i = skipSpace(b, i); {
	case at(b, i, closer):
		return i + 1, true, true
	case at(b, i, ','):
		return skipSpace(b, i+1), false, true
	}
	return i, false, false
}

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
