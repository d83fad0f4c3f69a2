package fingerprint

import (
	"bytes"

	"github.com/idemkit/idem/internal/jcs"
)

// flatJSON leaves in s the pointers and digests of the fields of src, as
// canonicalJSON does, when src is its own canonical form in the simplest
// way, as most bodies that clients send are: an object without
// whitespace, whose members come in canonical order, whose names are
// printable ASCII that pointers and encoded fields hold as they are (see
// pointerOdd), and whose values jcs.PlainValueEnd accepts. It reads src
// once to check that and note the spans, and takes the digests after: a
// body that is not flat costs the scan, not the digests. It reports false
// for any other src, with s's pointers, ends and spans in any state, which
// canonicalJSON then reads with the encoder.
func (s *scratch) flatJSON(src []byte) bool {
	n := len(src)
	if n < 2 || src[0] != '{' || src[n-1] != '}' || src[1] == '}' {
		return false
	}
	pointers, ends, spans := s.pointers[:0], s.ends[:0], s.spans[:0]
	lastStart, lastEnd := 0, 0 // the span in src of the last name
	for i := 1; ; {
		// i is at the quote that opens a name.
		if src[i] != '"' {
			return false
		}
		start := i + 1
		j := start
		for j < n && pointerOdd[src[j]] == 0 {
			j++
		}
		if j == start || j+2 >= n || src[j] != '"' || src[j+1] != ':' {
			return false
		}
		if lastEnd > 0 {
			// ASCII names sort by their bytes, as their UTF-16 code
			// units; the first byte decides for most.
			last, name := src[lastStart:lastEnd], src[start:j]
			if last[0] > name[0] || last[0] == name[0] && bytes.Compare(last, name) >= 0 {
				return false
			}
		}
		lastStart, lastEnd = start, j
		pointers = append(append(pointers, '/'), src[start:j]...)
		ends = append(ends, len(pointers))
		k := jcs.PlainValueEnd(src, j+2)
		if k < 0 || k >= n {
			return false
		}
		spans = append(spans, j+2, k)
		if src[k] == '}' {
			if k != n-1 {
				return false
			}
			break
		}
		if src[k] != ',' || k+1 >= n {
			return false
		}
		i = k + 1
	}
	s.pointers, s.ends, s.spans = pointers, ends, spans
	s.hasFields = true
	start := 0
	for f, end := range ends {
		s.digestField(pointers[start:end], src[spans[2*f]:spans[2*f+1]])
		start = end
	}
	return true
}
