package fingerprint

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"slices"
	"sort"
	"strings"
)

func sortFields(fields []fieldDigest) {
	if !slices.IsSortedFunc(fields, compareFields) {
		slices.SortFunc(fields, compareFields)
	}
}

func compareFields(a, b fieldDigest) int { return strings.Compare(a.pointer, b.pointer) }

func unescapePointer(ptr string) string {
	name := strings.TrimPrefix(ptr, "/")
	return strings.ReplaceAll(strings.ReplaceAll(name, "~1", "/"), "~0", "~")
}

// kindMember is the member of encoded fields that holds the body's kind.
// It is no field's pointer: those start with "/".
const kindMember = "media"

// encodedFieldsLen is the length of encoded fields of the given kind
// before the fields' own: the braces and the kind.
func encodedFieldsLen(kind string) int { return len(`{"":""}`) + len(kindMember) + len(kind) }

// encodedFieldLen is the length of one encoded field whose pointer has
// the given length and needs no escapes.
func encodedFieldLen(pointerLen int) int {
	return len(`"":"",`) + pointerLen + base64.RawURLEncoding.EncodedLen(len(fieldDigest{}.digest))
}

// appendEncodedField appends one field, a pointer and its digest, to
// encoded fields.
func appendEncodedField[T string | []byte](out []byte, pointer T, digest *[16]byte) []byte {
	out = appendJSONString(out, pointer)
	out = append(out, ':', '"')
	out = appendDigest(out, digest)
	return append(out, '"', ',')
}

// base64URL is the alphabet of base64.RawURLEncoding.
const base64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// digestLen is the length of a field digest in encoded fields.
const digestLen = 22

// base64Pairs holds the two characters of base64URL for each value of
// twelve bits: with it a digest takes eleven lookups instead of 22. Its
// 8 KiB cost fewer instructions than any loop over the alphabet.
var base64Pairs = func() (t [1 << 12][2]byte) {
	for v := range t {
		t[v] = [2]byte{base64URL[v>>6], base64URL[v&0x3f]}
	}
	return t
}()

// appendDigest appends d as base64.RawURLEncoding.AppendEncode does,
// without its loop for inputs of any length. The 128 bits of d, read as
// two big-endian words, are ten pairs of characters, twelve bits each,
// and a last pair of eight bits followed by four zero bits; the sixth
// pair takes its bits from both words.
func appendDigest(dst []byte, d *[16]byte) []byte {
	n := len(dst)
	dst = slices.Grow(dst, digestLen)[:n+digestLen]
	putDigest((*[digestLen]byte)(dst[n:]), d)
	return dst
}

// putDigest writes d into out as appendDigest appends it.
func putDigest(out *[digestLen]byte, d *[16]byte) {
	hi, lo := binary.BigEndian.Uint64(d[:8]), binary.BigEndian.Uint64(d[8:])
	*(*[2]byte)(out[0:]) = base64Pairs[hi>>52]
	*(*[2]byte)(out[2:]) = base64Pairs[hi>>40&0xfff]
	*(*[2]byte)(out[4:]) = base64Pairs[hi>>28&0xfff]
	*(*[2]byte)(out[6:]) = base64Pairs[hi>>16&0xfff]
	*(*[2]byte)(out[8:]) = base64Pairs[hi>>4&0xfff]
	*(*[2]byte)(out[10:]) = base64Pairs[(hi<<8|lo>>56)&0xfff]
	*(*[2]byte)(out[12:]) = base64Pairs[lo>>44&0xfff]
	*(*[2]byte)(out[14:]) = base64Pairs[lo>>32&0xfff]
	*(*[2]byte)(out[16:]) = base64Pairs[lo>>20&0xfff]
	*(*[2]byte)(out[18:]) = base64Pairs[lo>>8&0xfff]
	*(*[2]byte)(out[20:]) = base64Pairs[lo<<4&0xfff]
}

// appendEncodedKind ends encoded fields with the body's kind, one of the
// kinds, which like kindMember encoding/json writes as they are.
func appendEncodedKind(out []byte, kind string) []byte {
	out = append(out, `"`+kindMember+`":"`...)
	out = append(out, kind...)
	return append(out, '"', '}')
}

// appendJSONString appends s as encoding/json writes it. A string of
// printable ASCII without '"', '\' or the characters it escapes for HTML
// is written in quotes as it is; any other is left to encoding/json.
func appendJSONString[T string | []byte](dst []byte, s T) []byte {
	for i := 0; i < len(s); i++ {
		if !jsonAsIs[s[i]] {
			quoted, _ := json.Marshal(string(s)) // a string always marshals
			return append(dst, quoted...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// jsonAsIs marks the bytes that encoding/json writes in a string as they
// are: printable ASCII but '"', '\\' and the characters it escapes for
// HTML.
var jsonAsIs = func() (t [256]bool) {
	for c := 0x20; c <= 0x7e; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// decodeFields decodes stored field digests. It returns nil when they are
// empty or cannot be decoded.
func decodeFields(stored []byte) map[string]string {
	if len(stored) == 0 {
		return nil
	}
	var m map[string]string
	if err := json.Unmarshal(stored, &m); err != nil {
		return nil
	}
	return m
}

// DescribeKind names a body kind for a problem's detail.
func DescribeKind(kind string) string {
	switch kind {
	case kindJSON:
		return "a JSON body"
	case kindForm:
		return "a form body (application/x-www-form-urlencoded)"
	case kindEmpty:
		return "no body"
	}
	return "a body of another media type"
}

// KindChange returns the body kind of the first request, from its stored
// field digests, when it is not f's: the retry sends its body in another
// media type, so its fields cannot be compared one by one. It returns ""
// when the kinds are the same, or the stored digests do not say (they were
// stored by a version that did not record the kind).
func KindChange(stored []byte, f Fingerprint) string {
	first := decodeFields(stored)[kindMember]
	if first == "" || first == f.Kind {
		return ""
	}
	return first
}

// DiffFields returns the pointers of the top-level fields that differ between
// the stored field digests and f: changed, added or removed, sorted. It
// returns nil when the stored digests are empty or cannot be decoded.
func DiffFields(stored []byte, f Fingerprint) []string {
	old := decodeFields(stored)
	if old == nil {
		return nil
	}
	var diff []string
	seen := make(map[string]bool, len(f.fields))
	for _, d := range f.fields {
		seen[d.pointer] = true
		if old[d.pointer] != base64.RawURLEncoding.EncodeToString(d.digest[:]) {
			diff = append(diff, d.pointer)
		}
	}
	for ptr := range old {
		if strings.HasPrefix(ptr, "/") && !seen[ptr] {
			diff = append(diff, ptr)
		}
	}
	sort.Strings(diff)
	return diff
}
