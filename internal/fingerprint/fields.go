package fingerprint

import (
	"encoding/base64"
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

// appendDigest appends d as base64.RawURLEncoding.AppendEncode does,
// without its loop for inputs of any length: five groups of three bytes,
// four characters each, and the last byte in two characters.
func appendDigest(dst []byte, d *[16]byte) []byte {
	n := len(dst)
	dst = slices.Grow(dst, digestLen)[:n+digestLen]
	out := (*[digestLen]byte)(dst[n:])
	for g := range 5 {
		v := uint(d[3*g])<<16 | uint(d[3*g+1])<<8 | uint(d[3*g+2])
		out[4*g] = base64URL[v>>18]
		out[4*g+1] = base64URL[v>>12&0x3f]
		out[4*g+2] = base64URL[v>>6&0x3f]
		out[4*g+3] = base64URL[v&0x3f]
	}
	out[20] = base64URL[d[15]>>2]
	out[21] = base64URL[d[15]<<4&0x3f]
	return dst
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
