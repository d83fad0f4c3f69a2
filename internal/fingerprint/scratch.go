package fingerprint

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"slices"
	"sync"

	"github.com/idemkit/idem/internal/jcs"
)

// scratch holds the hash and the buffers that one fingerprint reuses from
// the last.
type scratch struct {
	h     hash.Hash
	head  []byte           // the length-prefixed parts before a body or a value
	sums  []byte           // a hash's sum
	query []byte           // the canonical query
	text  []byte           // the canonical body
	value []byte           // a body with excluded fields left out; a form field's values
	spans []jcs.MemberSpan // the members of a JSON body
	pairs []formPair       // the pairs of a form body or query
	// unescaped holds the names and values of the pairs.
	unescaped []byte
	// pointers holds the JSON pointers of a body's fields, one after the
	// other; ends holds where each ends.
	pointers []byte
	ends     []int
	// digests are the digests of a body's fields, in the order of ends,
	// when hasFields is set: the body is an object or a form.
	digests   [][16]byte
	hasFields bool
	order     []int // the fields' indexes, sorted by pointer
}

// formPair is one name=value pair of a form body or query, unescaped.
type formPair struct{ name, value []byte }

// maxScratchBytes bounds each buffer a scratch keeps for reuse, so that one
// large body does not pin memory.
const maxScratchBytes = 256 << 10

var scratchPool = sync.Pool{New: func() any { return &scratch{h: sha256.New(), sums: make([]byte, 0, sha256.Size)} }}

// release returns s to the pool, without references into a request.
func (s *scratch) release() {
	clear(s.spans[:cap(s.spans)])
	clear(s.pairs[:cap(s.pairs)])
	s.spans, s.pairs, s.pointers, s.ends, s.digests = s.spans[:0], s.pairs[:0], s.pointers[:0], s.ends[:0], s.digests[:0]
	s.order = s.order[:0]
	for _, b := range []*[]byte{&s.head, &s.query, &s.text, &s.value, &s.pointers, &s.unescaped} {
		if cap(*b) > maxScratchBytes {
			*b = nil
		}
	}
	scratchPool.Put(s)
}

// sum writes to dst the SHA-256 of head followed by the length-prefixed
// tail: the parts of [WritePart], with the last one written in place.
func (s *scratch) sum(dst *[32]byte, head, tail []byte) {
	s.head = binary.AppendUvarint(head, uint64(len(tail)))
	s.h.Reset()
	s.h.Write(s.head)
	s.h.Write(tail)
	copy(dst[:], s.h.Sum(s.sums[:0]))
}

// WritePart writes b to h with its length before it, so that no two lists
// of parts write the same bytes.
func WritePart(h hash.Hash, b []byte) {
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(b)))])
	h.Write(b)
}

// appendPart appends part as [WritePart] writes it.
func appendPart[T string | []byte](dst []byte, part T) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(part)))
	return append(dst, part...)
}

// digestField adds to s.digests the digest of the top-level field ptr,
// whose canonical value is value; ptr is the pointer addPointer added last.
func (s *scratch) digestField(ptr, value []byte) {
	head := appendPart(s.head[:0], "idem-field-v1")
	head = appendPart(head, ptr)
	var sum [32]byte
	s.sum(&sum, head, value)
	s.digests = append(s.digests, [16]byte(sum[:16]))
}

// addPointer appends the JSON pointer of the top-level field name to s's
// pointers and returns it.
func addPointer[T string | []byte](s *scratch, name T) []byte {
	start := len(s.pointers)
	s.pointers = append(s.pointers, '/')
	for i := 0; i < len(name); i++ {
		switch c := name[i]; c {
		case '~':
			s.pointers = append(s.pointers, '~', '0')
		case '/':
			s.pointers = append(s.pointers, '~', '1')
		default:
			s.pointers = append(s.pointers, c)
		}
	}
	s.ends = append(s.ends, len(s.pointers))
	return s.pointers[start:]
}

// dropPointer removes the pointer addPointer added last.
func (s *scratch) dropPointer() {
	s.ends = s.ends[:len(s.ends)-1]
	s.pointers = s.pointers[:0]
	if len(s.ends) > 0 {
		s.pointers = s.pointers[:s.ends[len(s.ends)-1]]
	}
}

// pointer returns the pointer of the field i, in the order of ends.
func (s *scratch) pointer(i int) []byte {
	start := 0
	if i > 0 {
		start = s.ends[i-1]
	}
	return s.pointers[start:s.ends[i]]
}

// encodeFields returns the digests of the fields in s encoded for
// storage, for a body of the given kind, in one allocation; nil when the
// body is neither an object nor a form. The encoding is a small JSON
// object of pointer to base64url digest, with the body's kind under
// kindMember; stores keep it as opaque bytes.
//
// The bytes are those encoding/json writes for a map of the same strings:
// members sorted by name, so the pointers, which start with "/", come
// before kindMember, and strings escaped as it escapes them. Stored digests
// are compared byte for byte, so they must never change.
func (s *scratch) encodeFields(kind string) []byte {
	if !s.hasFields {
		return nil
	}
	// Sort the fields by pointer, through their indexes.
	order := s.order[:0]
	for i := range s.digests {
		order = append(order, i)
	}
	s.order = order
	slices.SortFunc(order, func(a, b int) int { return bytes.Compare(s.pointer(a), s.pointer(b)) })
	n := encodedFieldsLen(kind)
	for i := range order {
		n += encodedFieldLen(len(s.pointer(i)))
	}
	out := make([]byte, 0, n)
	out = append(out, '{')
	for _, i := range order {
		out = appendEncodedField(out, s.pointer(i), &s.digests[i])
	}
	return appendEncodedKind(out, kind)
}
