package fingerprint

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/bits"

	"github.com/idemkit/idem/internal/jcs"
)

// A flat body is a JSON body that is its own canonical form in the
// simplest way, as most bodies that clients send are: an object without
// whitespace, of at most maxFlatFields members that come in canonical
// order, whose names are printable ASCII that pointers and encoded fields
// hold as they are (see pointerOdd), and whose values jcs.PlainValueEnd
// accepts. Its canonical form is the body itself, each field's pointer is
// "/" and its name, and the fields come in the order of their pointers:
// reading it takes one scan, and no encoder.

// maxFlatFields is the most fields of a flat body; a body with more goes
// to the encoder.
const maxFlatFields = 32

// flatSpans is where each name and each value of a flat body ends, a
// pair of offsets a field. The members are `"name":value` after one another, with
// a ',' between them: each name starts two bytes after the value before it
// ends (the first at 2), and each value two bytes after its name ends.
type flatSpans [maxFlatFields][2]int32

// scanFlat reports whether src is a flat body and, when it is, leaves in
// spans where its names and values end. It returns the number of fields
// and the total length of the names; 0 when src is not flat.
//
// It reads most names and strings eight bytes at a time, and most values
// without a call: a call makes the compiler keep the loop's variables on
// the stack.
func scanFlat(src []byte, spans *flatSpans) (m, names int) {
	n := len(src)
	if n < 2 || n > math.MaxInt32 || src[0] != '{' || src[n-1] != '}' || src[1] == '}' {
		return 0, 0
	}
	lastStart, lastEnd := 0, 0 // the last name's, in src
	for i := 1; ; {
		// i is at the quote that opens a name.
		if src[i] != '"' || m == len(spans) {
			return 0, 0
		}
		start := i + 1
		j := start
		for ; j+8 <= n; j += 8 {
			if stop := notLower(binary.LittleEndian.Uint64(src[j : j+8])); stop != 0 {
				j += bits.TrailingZeros64(stop) >> 3
				break
			}
		}
		for j < n && pointerOdd[src[j]] == 0 {
			j++
		}
		if j == start || j+2 >= n || src[j] != '"' || src[j+1] != ':' {
			return 0, 0
		}
		if lastEnd > 0 {
			// ASCII names sort by their bytes, as by their UTF-16 code
			// units; the first byte decides for most.
			if c, d := src[lastStart], src[start]; c > d || c == d && bytes.Compare(src[lastStart:lastEnd], src[start:j]) >= 0 {
				return 0, 0
			}
		}
		lastStart, lastEnd = start, j
		names += j - start
		// The value: jcs.PlainValueEnd, with its cases for a string and
		// for an integer that does not start with 0 written out.
		k := j + 2
		if c := src[k]; c == '"' {
			for k++; k+8 <= n; k += 8 {
				if stop := jcs.NotPlain(binary.LittleEndian.Uint64(src[k : k+8])); stop != 0 {
					k += bits.TrailingZeros64(stop) >> 3
					break
				}
			}
			for k < n && jcs.PlainByte(src[k]) {
				k++
			}
			if k >= n || src[k] != '"' {
				return 0, 0
			}
			k++
		} else if '1' <= c && c <= '9' {
			// The byte after the digits must be ',' or '}', checked below.
			for k++; k < n && '0' <= src[k] && src[k] <= '9'; k++ {
			}
			if k-j-2 > jcs.MaxPlainDigits {
				return 0, 0
			}
		} else if k = jcs.PlainValueEnd(src, k); k < 0 {
			return 0, 0
		}
		if k >= n {
			return 0, 0
		}
		spans[m] = [2]int32{int32(j), int32(k)}
		m++
		if src[k] == '}' {
			if k != n-1 {
				return 0, 0
			}
			return m, names
		}
		if src[k] != ',' {
			return 0, 0
		}
		i = k + 1
	}
}

// notLower returns the eight bytes x, read little-endian, with the high
// bit of the first one outside ']' to '}' set, and no bit of a byte before
// it; 0 when all eight are in that range, which holds the lowercase
// letters and '_', and none of the bytes that pointerOdd marks. No byte
// before the first one outside carries into the next in either sum.
func notLower(x uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	return (^(x + ones*(0x80-']')) | (x + ones*(0x80-'}'-1)) | x) & highs
}

// flatJSON leaves in s the pointers and digests of the fields of src, as
// canonicalJSON does, when src is a flat body. It reads src once to check
// that and note the spans, and takes the digests after: a body that is not
// flat costs the scan, not the digests. It reports false, with s as it
// was, for any other src, which canonicalJSON then reads with the encoder.
func (s *scratch) flatJSON(src []byte) bool {
	spans := &s.spans
	m, _ := scanFlat(src, spans)
	if m == 0 {
		return false
	}
	s.hasFields = true
	pointers, ends := s.pointers[:0], s.ends[:0]
	start := 2 // where the first name starts
	for _, span := range spans[:m] {
		j, k := int(span[0]), int(span[1])
		pointers = append(append(pointers, '/'), src[start:j]...)
		ends = append(ends, len(pointers))
		s.digestField(pointers[len(pointers)-(j-start)-1:], src[j+2:k])
		start = k + 2
	}
	s.pointers, s.ends = pointers, ends
	return true
}

// encodedFlat is [Encoded] for the requests most clients send: no query,
// no excluded fields, and a flat body sent as application/json, without
// parameters. It writes each field's pointer and digest into the encoded
// fields as it takes the digest, with no list of pointers or digests in
// between; the bytes are those of scratch.encodeFields. It sets f's Sum
// and Kind in place, which spares copies of the Fingerprint. It reports
// false, having computed nothing and left f as it was, for any other
// request, and whether it scanned the body to find it is not flat. A flat
// body with a name or value whose length takes more than one byte in a
// digest's input, rare, it leaves to flatJSON, as not scanned: then each
// field's input fits in s.flatField.
func (s *scratch) encodedFlat(p *Params, f *Fingerprint) (fields []byte, ok, scanned bool) {
	if p.RawQuery != "" || len(p.Exclude) > 0 || p.ContentType != "application/json" || len(p.Body) == 0 {
		return nil, false, false
	}
	src := p.Body
	spans := &s.spans // in s, which saves clearing an array on the stack
	m, names := scanFlat(src, spans)
	if m == 0 {
		return nil, false, true
	}
	if len(src) > 0x7f {
		// A name or value may be long enough for its length to take
		// more than a byte in its digest's input: rare enough to leave to
		// the general path, which reads flat bodies too.
		start := 2
		for _, span := range spans[:m] {
			j, k := int(span[0]), int(span[1])
			if j-start >= 0x7f || k-j-2 >= 0x80 {
				return nil, false, false
			}
			start = k + 2
		}
	}
	// Each field is `"/name":"digest",` (see encodedFieldLen); then the
	// kind, which needs no escapes. out and the digests' inputs are
	// written with appends, which never grow them: unlike copy, an append
	// leaves no branch to join after its call, where the compiler would
	// load each of the loop's variables back into a register.
	const kind = `"` + kindMember + `":"` + kindJSON + `"}`
	const restLen = len(`":"",`) + digestLen // a field's bytes after its pointer
	out := append(make([]byte, 0, 1+m*(2+restLen)+names+len(kind)), '{')
	start := 2 // where the first name starts
	for _, span := range spans[:m] {
		j, k := int(span[0]), int(span[1])
		name, value := src[start:j], src[j+2:k]
		// The digest's input, as digestField writes it, in one piece.
		in := append(s.flatField[:len(fieldHead)], byte(1+len(name)), '/')
		in = append(in, name...)
		in = append(append(in, byte(len(value))), value...)
		// s.hash, written out: the call costs more than its lines here.
		s.h.Reset()
		s.h.Write(in)
		s.h.Sum(s.sums[:0]) // into s.sums, which has room
		// The field in out: its pointer, then a part of fixed length.
		out = append(append(out, '"', '/'), name...)
		out = out[:len(out)+restLen]
		rest := (*[restLen]byte)(out[len(out)-restLen:])
		rest[0], rest[1], rest[2] = '"', ':', '"'
		putDigest((*[digestLen]byte)(rest[3:]), (*[16]byte)(s.sums[:16]))
		rest[len(rest)-2], rest[len(rest)-1] = '"', ','
		start = k + 2
	}
	out = append(out, kind...)
	head := s.head[:len(fingerprintHead)]
	head = appendPart(head, p.Method)
	head = appendPart(head, p.Path)
	// The empty query, and the kind after its length: one constant.
	head = append(head, "\x00"+string(rune(len(kindJSON)))+kindJSON...)
	// s.sum, written out: its call and s.hash's cost more than these
	// lines, on every request.
	head = appendLen(head, len(src))
	s.h.Reset()
	if len(src) <= maxJoinedTail {
		head = append(head, src...)
		s.h.Write(head)
	} else {
		s.h.Write(head)
		s.h.Write(src)
	}
	if cap(head) > cap(s.head) {
		s.head = head
	}
	f.Sum, f.Kind = [32]byte(s.h.Sum(s.sums[:0])), kindJSON
	return out, true, true
}
