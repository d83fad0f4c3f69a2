package fingerprint

import (
	"bytes"
	"math"

	"github.com/idemkit/idem/internal/jcs"
)

// maxFlatFields is the most fields that flatJSON reads; a body with more
// goes to the encoder.
const maxFlatFields = 32

// flatJSON leaves in s the pointers and digests of the fields of src, as
// canonicalJSON does, when src is its own canonical form in the simplest
// way, as most bodies that clients send are: an object without
// whitespace, of at most maxFlatFields members that come in canonical
// order, whose names are printable ASCII that pointers and encoded fields
// hold as they are (see pointerOdd), and whose values jcs.PlainValueEnd
// accepts. It reads src once to check that and note where each name and
// value ends, and takes the digests after: a body that is not flat costs
// the scan, not the digests. It reports false, with s as it was, for any
// other src, which canonicalJSON then reads with the encoder.
func (s *scratch) flatJSON(src []byte) bool {
	n := len(src)
	if n < 2 || n > math.MaxInt32 || src[0] != '{' || src[n-1] != '}' || src[1] == '}' {
		return false
	}
	// The members are `"name":value` after one another, with a ',' between
	// them: each name starts two bytes after the last value ends, and each
	// value two bytes after its name ends.
	var spans [2 * maxFlatFields]int32 // where each name and each value ends
	m := 0                             // the number of spans
	lastStart, lastEnd := 0, 0         // the last name's, in src
	for i := 1; ; {
		// i is at the quote that opens a name.
		if src[i] != '"' || m == len(spans) {
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
			// ASCII names sort by their bytes, as by their UTF-16 code
			// units; the first byte decides for most.
			last, name := src[lastStart:lastEnd], src[start:j]
			if last[0] > name[0] || last[0] == name[0] && bytes.Compare(last, name) >= 0 {
				return false
			}
		}
		lastStart, lastEnd = start, j
		k := jcs.PlainValueEnd(src, j+2)
		if k < 0 || k >= n {
			return false
		}
		spans[m], spans[m+1] = int32(j), int32(k)
		m += 2
		if src[k] == '}' {
			if k != n-1 {
				return false
			}
			break
		}
		if src[k] != ',' {
			return false
		}
		i = k + 1
	}
	s.hasFields = true
	pointers, ends := s.pointers[:0], s.ends[:0]
	start := 2 // where the first name starts
	for f := 0; f < m; f += 2 {
		j, k := int(spans[f]), int(spans[f+1])
		pointers = append(append(pointers, '/'), src[start:j]...)
		ends = append(ends, len(pointers))
		s.digestField(pointers[len(pointers)-(j-start)-1:], src[j+2:k])
		start = k + 2
	}
	s.pointers, s.ends = pointers, ends
	return true
}
