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
	head  []byte            // fingerprintHead, then the parts before a body
	field []byte            // fieldHead, then the parts of a field's digest
	sums  [sha256.Size]byte // a hash's sum, where Sum appends it
	query []byte            // the canonical query
	text  []byte            // the canonical body
	value []byte            // a body with excluded fields left out; a form field's values
	enc   jcs.Encoder       // canonicalForm's, with its buffers
	pairs []formPair        // the pairs of a form body or query
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
	// unordered notes that the pointers may not be in the order of
	// their bytes; quoted, that one may hold a byte that encoding/json
	// escapes, or that is not ASCII. Both are false for most bodies.
	unordered, quoted bool
	order             []int // the fields' indexes, sorted by pointer
	// notFlat notes that the body is known not to be flat (see
	// flatJSON), as encodedFlat found it.
	notFlat bool
	spans   flatSpans // encodedFlat's
	// flatField is fieldHead, then room for the rest of the input of a
	// field digest whose lengths take one byte each: encodedFlat's.
	flatField [len(fieldHead) + 1 + 1 + 0x7e + 1 + 0x7f]byte
}

// formPair is one name=value pair of a form body or query, unescaped; or,
// when escaped is set, with its value as it came, which is what
// appendQueryEscape writes for it (see queryEscaped).
type formPair struct {
	name, value []byte
	escaped     bool
}

// maxScratchBytes bounds each buffer a scratch keeps for reuse, so that one
// large body does not pin memory.
const maxScratchBytes = 256 << 10

var scratchPool = sync.Pool{New: func() any {
	s := &scratch{h: sha256.New(), head: []byte(fingerprintHead), field: []byte(fieldHead), enc: jcs.Encoder{Options: canonicalForm}}
	copy(s.flatField[:], fieldHead)
	return s
}}

// release returns s to the pool, without references into a request.
func (s *scratch) release() {
	s.enc.Release()
	clear(s.pairs[:cap(s.pairs)])
	s.pairs, s.pointers, s.ends, s.digests = s.pairs[:0], s.pointers[:0], s.ends[:0], s.digests[:0]
	s.order = s.order[:0]
	if cap(s.text) > maxScratchBytes || cap(s.value) > maxScratchBytes || cap(s.head) > maxScratchBytes ||
		cap(s.query) > maxScratchBytes || cap(s.pointers) > maxScratchBytes || cap(s.unescaped) > maxScratchBytes ||
		cap(s.field) > maxScratchBytes {
		for _, b := range []*[]byte{&s.query, &s.text, &s.value, &s.pointers, &s.unescaped} {
			if cap(*b) > maxScratchBytes {
				*b = nil
			}
		}
		if cap(s.head) > maxScratchBytes {
			s.head = []byte(fingerprintHead)
		}
		if cap(s.field) > maxScratchBytes {
			s.field = []byte(fieldHead)
		}
	}
	scratchPool.Put(s)
}

// releaseFlat is release after encodedFlat, whose only buffer that grows
// is head, and which keeps no reference into the request.
func (s *scratch) releaseFlat() {
	if cap(s.head) > maxScratchBytes {
		s.release()
		return
	}
	scratchPool.Put(s)
}

// sum returns the SHA-256 of head followed by the length-prefixed tail:
// the parts of [WritePart], with the last one written in place. head
// starts at the start of *buf's array; sum appends to it, and leaves in
// *buf the array that the appends grew, for the next call.
func (s *scratch) sum(buf *[]byte, head, tail []byte) *[sha256.Size]byte {
	head = appendLen(head, len(tail))
	if len(tail) <= maxJoinedTail {
		// One Write of head and tail costs fewer instructions than two.
		head = append(head, tail...)
		tail = nil
	}
	if cap(head) > cap(*buf) {
		// append moved it; storing it only then saves most stores.
		*buf = head
	}
	if len(tail) == 0 {
		return s.hash(head)
	}
	s.h.Reset()
	s.h.Write(head)
	s.h.Write(tail)
	s.h.Sum(s.sums[:0])
	return &s.sums
}

// hash returns the SHA-256 of b.
func (s *scratch) hash(b []byte) *[sha256.Size]byte {
	s.h.Reset()
	s.h.Write(b)
	// Sum appends to the array in s, which has room: nothing to store.
	s.h.Sum(s.sums[:0])
	return &s.sums
}

// maxJoinedTail is the longest tail that sum copies after its head to
// write both at once: beyond it the copy costs more than the second
// Write saves.
const maxJoinedTail = 256

// WritePart writes b to h with its length before it, so that no two lists
// of parts write the same bytes.
func WritePart(h hash.Hash, b []byte) {
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(b)))])
	h.Write(b)
}

// appendPart appends part as [WritePart] writes it.
func appendPart[T string | []byte](dst []byte, part T) []byte {
	return append(appendLen(dst, len(part)), part...)
}

// appendLen appends n as a uvarint, as appendPart writes a part's length:
// one byte for a part shorter than 128 bytes, as most are.
func appendLen(dst []byte, n int) []byte {
	if n < 0x80 {
		return append(dst, byte(n))
	}
	return binary.AppendUvarint(dst, uint64(n))
}

// fieldHead is the first part of a field digest's input, as appendPart
// writes it.
const fieldHead = "\x0d" + "idem-field-v1"

// digestField adds to s.digests the digest of the top-level field ptr,
// whose canonical value is value; ptr is the pointer addPointer added last.
func (s *scratch) digestField(ptr, value []byte) {
	head := appendPart(s.field[:len(fieldHead)], ptr)
	s.digests = append(s.digests, [16]byte(s.sum(&s.field, head, value)[:16]))
}

// addPointer appends the JSON pointer of the top-level field name to s's
// pointers and returns it. It notes in s when the pointer is not written as
// it is in encoded fields (see scratch.quoted), or may sort otherwise than
// the name (see scratch.unordered).
func addPointer(s *scratch, name []byte) []byte {
	start := len(s.pointers)
	var odd byte // a byte of the name that pointerAsIs does not mark, or 0
	for _, c := range name {
		odd |= pointerOdd[c]
	}
	if odd == 0 {
		// Most names: printable ASCII without '~' or '/'.
		s.pointers = append(append(s.pointers, '/'), name...)
	} else {
		s.pointers = append(s.pointers, '/')
		for _, c := range name {
			switch {
			case c == '~':
				s.pointers = append(s.pointers, '~', '0')
			case c == '/':
				s.pointers = append(s.pointers, '~', '1')
			default:
				s.pointers = append(s.pointers, c)
			}
		}
		// A name with '~' or '/', or with a character above U+FFFF
		// (whose UTF-16 and UTF-8 orders differ), may sort otherwise as
		// a pointer; and a byte that encoding/json escapes or that is
		// not ASCII goes through appendJSONString.
		s.unordered, s.quoted = true, true
	}
	s.ends = append(s.ends, len(s.pointers))
	return s.pointers[start:]
}

// pointerOdd is 1 for the bytes that a field's pointer does not hold as
// its name does, or that encoded fields do not hold as the pointer does,
// and 0 for the others: those of jsonAsIs but '~' and '/'.
var pointerOdd = func() (t [256]byte) {
	for c := range t {
		if !jsonAsIs[c] || c == '~' || c == '/' {
			t[c] = 1
		}
	}
	return t
}()

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
	n := len(s.digests)
	out := make([]byte, 0, encodedFieldsLen(kind)+n*encodedFieldLen(0)+len(s.pointers))
	out = append(out, '{')
	if !s.unordered && !s.quoted {
		// The fields came in the order of their pointers, whose bytes
		// encoding/json writes as they are: most bodies.
		start := 0
		for i, end := range s.ends {
			out = append(out, '"')
			out = append(out, s.pointers[start:end]...)
			out = append(out, '"', ':', '"')
			out = appendDigest(out, &s.digests[i])
			out = append(out, '"', ',')
			start = end
		}
		return appendEncodedKind(out, kind)
	}
	// Sort the fields by pointer, through their indexes.
	order := s.order[:0]
	for i := range n {
		order = append(order, i)
	}
	s.order = order
	slices.SortFunc(order, func(a, b int) int { return bytes.Compare(s.pointer(a), s.pointer(b)) })
	for _, i := range order {
		out = appendEncodedField(out, s.pointer(i), &s.digests[i])
	}
	return appendEncodedKind(out, kind)
}
