package idem

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"mime"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/idemkit/idem/internal/jcs"
)

// Errors of a request that cannot be fingerprinted.
var (
	// errUnsupportedMediaType means the body is neither JSON nor form data.
	errUnsupportedMediaType = errors.New("idem: unsupported media type")
	// errMalformedBody means the body does not parse as its media type says.
	errMalformedBody = errors.New("idem: malformed request body")
	// errDuplicateMember means a JSON object in the body names a member twice.
	errDuplicateMember = errors.New("idem: duplicate member in JSON body")
	// errMalformedQuery means the query string does not parse.
	errMalformedQuery = errors.New("idem: malformed query string")
)

// bodyError describes a request that cannot be fingerprinted.
type bodyError struct {
	err    error  // one of the sentinel errors above
	reason string // safe to show to the client
}

func (e *bodyError) Error() string { return e.err.Error() + ": " + e.reason }

// Unwrap returns the sentinel error.
func (e *bodyError) Unwrap() error { return e.err }

// FingerprintParams describe a request to [NewFingerprint].
type FingerprintParams struct {
	Method      string // the HTTP method, or any name of the operation
	Path        string // the escaped path, or any name of the resource
	RawQuery    string // the query string without "?"; may be empty
	ContentType string // the media type of Body; not needed for an empty body
	Body        []byte // the request body as received
	// Exclude lists top-level fields left out of the fingerprint, as JSON
	// pointers ("/client_timestamp"). They apply to JSON and form bodies.
	Exclude []string
	// Raw hashes a body of any media type byte for byte instead of
	// rejecting a media type that is neither JSON nor form data.
	Raw bool
}

// Fingerprint identifies a request for its key, in the form a store keeps:
// the same logical request always has the same Hash, whatever the JSON
// member order, whitespace, number spelling, or order of form and query
// pairs.
//
// The middleware computes it for every request. Code that claims keys
// itself, such as a queue consumer that calls idempg's Store.ClaimTx,
// computes it with [NewFingerprint] and passes Hash and Fields in
// [ClaimParams].
type Fingerprint struct {
	// Hash is SHA-256 over the method, the path, the canonical query, the
	// body kind and the canonical body, each length-prefixed: the
	// [ClaimParams] RequestHash.
	Hash []byte
	// Fields are digests of the body's top-level fields, and whether the
	// body is JSON or form data, so that a mismatch can name the fields or
	// the media type that differ without storing or echoing any value: the
	// [ClaimParams] RequestFields. Nil for a body that is empty, or neither
	// a JSON object nor a form.
	Fields []byte
}

// NewFingerprint computes the fingerprint of a request. JSON bodies
// (application/json and any +json type) are canonicalised by RFC 8785, with
// numbers that a double cannot hold kept exact, and a JSON object that names
// a member twice is rejected; form bodies
// (application/x-www-form-urlencoded) by sorted names and values. Both
// must be UTF-8: a charset parameter other than utf-8 (in any case) is an
// unsupported media type, and with Raw such a body is hashed byte for byte.
// An empty body needs no content type. The error says, in words safe to
// show to the client, why a request cannot be fingerprinted.
func NewFingerprint(p FingerprintParams) (Fingerprint, error) {
	f, err := fingerprintOf(p)
	if err != nil {
		return Fingerprint{}, err
	}
	return Fingerprint{Hash: f.sum[:], Fields: f.encodeFields()}, nil
}

// fingerprint is a [Fingerprint] before its field digests are encoded: the
// form the middleware compares.
type fingerprint struct {
	sum    [32]byte
	kind   string        // kindEmpty, kindJSON, kindForm or kindRaw
	fields []fieldDigest // sorted by pointer; nil for a body that is not an object
}

// fieldDigest is the digest of one top-level field of a body.
type fieldDigest struct {
	pointer string   // RFC 6901 JSON pointer, such as "/amount"
	digest  [16]byte // truncated SHA-256 of the pointer and the canonical value
}

const (
	kindEmpty = "empty"
	kindJSON  = "json"
	kindForm  = "form"
	kindRaw   = "raw"
)

// fingerprintOf computes the fingerprint of a request, as [NewFingerprint]
// describes.
//
// It runs on every request the middleware handles, so it works in buffers
// it reuses: the canonical query and body never leave them, and what it
// allocates is the field digests the fingerprint keeps.
func fingerprintOf(p FingerprintParams) (fingerprint, error) {
	s := scratchPool.Get().(*scratch)
	defer s.release()
	query, _, err := canonicalPairs(s, s.query[:0], p.RawQuery, nil, false)
	if err != nil {
		return fingerprint{}, &bodyError{err: errMalformedQuery, reason: "the query string does not parse"}
	}
	s.query = query
	kind, body, fields, err := s.canonicalBody(p)
	if err != nil {
		return fingerprint{}, err
	}
	head := appendPart(s.head[:0], "idem-fingerprint-v1")
	head = appendPart(head, p.Method)
	head = appendPart(head, p.Path)
	head = appendPart(head, query)
	head = appendPart(head, kind)
	f := fingerprint{kind: kind, fields: fields}
	s.sum(&f.sum, head, body)
	return f, nil
}

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
	s.spans, s.pairs, s.pointers, s.ends = s.spans[:0], s.pairs[:0], s.pointers[:0], s.ends[:0]
	for _, b := range []*[]byte{&s.head, &s.query, &s.text, &s.value, &s.pointers, &s.unescaped} {
		if cap(*b) > maxScratchBytes {
			*b = nil
		}
	}
	scratchPool.Put(s)
}

// sum writes to dst the SHA-256 of head followed by the length-prefixed
// tail: the parts of [writePart], with the last one written in place.
func (s *scratch) sum(dst *[32]byte, head, tail []byte) {
	s.head = binary.AppendUvarint(head, uint64(len(tail)))
	s.h.Reset()
	s.h.Write(s.head)
	s.h.Write(tail)
	copy(dst[:], s.h.Sum(s.sums[:0]))
}

// writePart writes b to h with its length before it, so that no two lists
// of parts write the same bytes.
func writePart(h hash.Hash, b []byte) {
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(b)))])
	h.Write(b)
}

// appendPart appends part as [writePart] writes it.
func appendPart[T string | []byte](dst []byte, part T) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(part)))
	return append(dst, part...)
}

// digestField returns the digest of the top-level field ptr, whose
// canonical value is value; the caller sets the digest's pointer.
func (s *scratch) digestField(ptr, value []byte) fieldDigest {
	head := appendPart(s.head[:0], "idem-field-v1")
	head = appendPart(head, ptr)
	var sum [32]byte
	s.sum(&sum, head, value)
	var d fieldDigest
	copy(d.digest[:], sum[:16])
	return d
}

// mediaType parses a Content-Type as mime.ParseMediaType does, without its
// allocations for the values clients send most.
func mediaType(contentType string) (media, charset string, err error) {
	switch contentType {
	case "application/json", "application/x-www-form-urlencoded":
		return contentType, "", nil
	case "application/json; charset=utf-8", "application/json;charset=utf-8", "application/json; charset=UTF-8":
		return "application/json", contentType[len(contentType)-5:], nil
	}
	media, params, err := mime.ParseMediaType(contentType)
	return media, params["charset"], err
}

func (s *scratch) canonicalBody(p FingerprintParams) (kind string, body []byte, fields []fieldDigest, err error) {
	if len(p.Body) == 0 {
		return kindEmpty, nil, nil, nil
	}
	media, charset := "", ""
	if p.ContentType != "" {
		m, cs, perr := mediaType(p.ContentType)
		if perr != nil && !p.Raw {
			return "", nil, nil, &bodyError{err: errUnsupportedMediaType, reason: "the Content-Type header does not parse"}
		}
		media, charset = m, cs
	}
	isJSON := media == "application/json" || strings.HasSuffix(media, "+json")
	isForm := media == "application/x-www-form-urlencoded"
	if (isJSON || isForm) && charset != "" && !strings.EqualFold(charset, "utf-8") {
		// JSON is UTF-8 (RFC 8259), and the form's percent-encoding is
		// decoded as UTF-8; a body in another charset would be compared, and
		// handed to the handler, as bytes it does not hold.
		if p.Raw {
			return kindRaw, p.Body, nil, nil
		}
		return "", nil, nil, &bodyError{err: errUnsupportedMediaType, reason: fmt.Sprintf("charset %q is not supported; send the body in UTF-8 (charset=utf-8, or no charset)", charset)}
	}
	switch {
	case isJSON:
		body, fields, err = s.canonicalJSON(p.Body, p.Exclude)
		return kindJSON, body, fields, err
	case isForm:
		form, fields, ferr := canonicalPairs(s, s.text[:0], p.Body, p.Exclude, true)
		if ferr != nil {
			return "", nil, nil, &bodyError{err: errMalformedBody, reason: "the form body does not parse"}
		}
		s.text = form
		for _, d := range fields {
			if !utf8.ValidString(d.pointer) {
				return "", nil, nil, &bodyError{err: errMalformedBody, reason: "a form field name is not UTF-8 after percent-decoding"}
			}
		}
		return kindForm, form, fields, nil
	case p.Raw:
		return kindRaw, p.Body, nil, nil
	case media == "":
		return "", nil, nil, &bodyError{err: errUnsupportedMediaType, reason: "the request has a body but no Content-Type; send application/json or application/x-www-form-urlencoded"}
	default:
		return "", nil, nil, &bodyError{err: errUnsupportedMediaType, reason: fmt.Sprintf("content type %q is not supported; send application/json or application/x-www-form-urlencoded", media)}
	}
}

// canonicalForm is RFC 8785 with exact numbers: a number that a double
// cannot hold (9007199254740993, an id of 19 digits) keeps its value instead
// of rounding to the double's, so that two requests that differ only there
// never share a fingerprint.
var canonicalForm = jcs.Options{ExactNumbers: true}

// canonicalJSON returns the canonical form of a JSON body without the
// excluded top-level fields, and the digests of the others when the body is
// an object. The canonical form is in s's buffers.
func (s *scratch) canonicalJSON(src []byte, exclude []string) ([]byte, []fieldDigest, error) {
	c, err := canonicalForm.Append(s.text[:0], src, s.spans[:0])
	if err != nil {
		return nil, nil, jsonError(err)
	}
	s.text, s.spans = c.Text, c.Members
	s.pointers, s.ends = s.pointers[:0], s.ends[:0]
	if !c.IsObject {
		return c.Text, nil, nil
	}
	fields := make([]fieldDigest, 0, len(c.Members))
	body := c.Text   // the whole object, unless a field is excluded
	rebuilt := false // body is being rebuilt without the excluded fields
	for i, m := range c.Members {
		ptr := addPointer(s, m.Name)
		if excluded(exclude, ptr) {
			s.dropPointer()
			if !rebuilt {
				// Start again with the members before this one.
				body, rebuilt = append(s.value[:0], '{'), true
				for _, kept := range c.Members[:i] {
					body = append(append(body, c.Text[kept.Start:kept.End]...), ',')
				}
			}
			continue
		}
		if rebuilt {
			body = append(append(body, c.Text[m.Start:m.End]...), ',')
		}
		fields = append(fields, s.digestField(ptr, c.Text[m.ValueStart:m.End]))
	}
	s.namePointers(fields)
	if rebuilt {
		if body[len(body)-1] == ',' {
			body = body[:len(body)-1]
		}
		body = append(body, '}')
		s.value = body
	}
	sortFields(fields)
	return body, fields, nil
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

// namePointers sets the pointers of fields, one for each that addPointer
// added and in its order, as strings that share one allocation.
func (s *scratch) namePointers(fields []fieldDigest) {
	all := string(s.pointers)
	start := 0
	for i, end := range s.ends {
		fields[i].pointer, start = all[start:end], end
	}
}

// excluded reports whether ptr is one of the excluded pointers.
func excluded(exclude []string, ptr []byte) bool {
	for _, e := range exclude {
		if e == string(ptr) {
			return true
		}
	}
	return false
}

func jsonError(err error) error {
	var dup *jcs.DuplicateMemberError
	if errors.As(err, &dup) {
		return &bodyError{err: errDuplicateMember, reason: fmt.Sprintf("the JSON body names %s more than once", dup.Pointer)}
	}
	if errors.Is(err, jcs.ErrTooDeep) {
		return &bodyError{err: errMalformedBody, reason: "the JSON body is nested too deeply"}
	}
	if errors.Is(err, jcs.ErrNumber) {
		return &bodyError{err: errMalformedBody, reason: "the JSON body has a number out of range"}
	}
	var syn *jcs.SyntaxError
	if errors.As(err, &syn) {
		return &bodyError{err: errMalformedBody, reason: fmt.Sprintf("the body is not valid JSON (offset %d: %s)", syn.Offset, syn.Msg)}
	}
	return &bodyError{err: errMalformedBody, reason: "the body is not valid JSON"}
}

// maxSplitPairs is the number of pairs up to which canonicalPairs splits a
// form or query itself; it hands longer ones to url.ParseQuery, whose limit
// on the number of pairs then applies.
const maxSplitPairs = 64

// canonicalPairs parses URL-encoded pairs as url.ParseQuery does, and
// appends them to dst with names sorted and, for each name, values sorted,
// escaped as url.QueryEscape escapes them. With digests, it also returns
// the digests of the fields, one for each name that is not excluded, sorted
// by pointer; excluded names are left out of the encoding too.
func canonicalPairs[T string | []byte](s *scratch, dst []byte, raw T, exclude []string, digests bool) ([]byte, []fieldDigest, error) {
	if len(raw) == 0 {
		return dst, nil, nil
	}
	s.pairs, s.pointers, s.ends = s.pairs[:0], s.pointers[:0], s.ends[:0]
	// Unescaped text is never longer than the escaped, so that the pairs
	// can point into this buffer while it is filled.
	s.unescaped = slices.Grow(s.unescaped[:0], len(raw))
	var err error
	if countByte(raw, '&') < maxSplitPairs {
		err = splitPairs(s, raw, exclude)
	} else {
		err = s.parsePairs(string(raw), exclude)
	}
	if err != nil {
		return dst, nil, err
	}
	pairs := s.pairs
	slices.SortFunc(pairs, func(a, b formPair) int {
		if c := bytes.Compare(a.name, b.name); c != 0 {
			return c
		}
		return bytes.Compare(a.value, b.value)
	})
	var fields []fieldDigest
	if digests {
		names := 0
		for i := range pairs {
			if i == 0 || !bytes.Equal(pairs[i].name, pairs[i-1].name) {
				names++
			}
		}
		fields = make([]fieldDigest, 0, names)
	}
	start := len(dst)
	for i := 0; i < len(pairs); {
		name := pairs[i].name
		values := s.value[:0]
		for ; i < len(pairs) && bytes.Equal(pairs[i].name, name); i++ {
			if len(dst) > start {
				dst = append(dst, '&')
			}
			dst = append(appendQueryEscape(dst, name), '=')
			valueStart := len(dst)
			dst = appendQueryEscape(dst, pairs[i].value)
			values = append(append(values, dst[valueStart:]...), '&')
		}
		s.value = values
		if digests {
			fields = append(fields, s.digestField(addPointer(s, name), values))
		}
	}
	if digests {
		s.namePointers(fields)
		sortFields(fields)
	}
	return dst, fields, nil
}

// splitPairs reads the pairs of raw into s.pairs, leaving out excluded
// names, as url.ParseQuery reads them.
func splitPairs[T string | []byte](s *scratch, raw T, exclude []string) error {
	for len(raw) > 0 {
		pair := raw
		if i := indexByte(raw, '&'); i >= 0 {
			pair, raw = raw[:i], raw[i+1:]
		} else {
			raw = raw[len(raw):]
		}
		if indexByte(pair, ';') >= 0 {
			return errors.New("invalid semicolon separator in query")
		}
		if len(pair) == 0 {
			continue
		}
		name, value := pair, pair[len(pair):]
		if i := indexByte(pair, '='); i >= 0 {
			name, value = pair[:i], pair[i+1:]
		}
		start := len(s.unescaped)
		var ok bool
		if s.unescaped, ok = appendQueryUnescape(s.unescaped, name); !ok {
			return errors.New("invalid URL escape")
		}
		middle := len(s.unescaped)
		if s.unescaped, ok = appendQueryUnescape(s.unescaped, value); !ok {
			return errors.New("invalid URL escape")
		}
		if p := (formPair{s.unescaped[start:middle], s.unescaped[middle:]}); !excludedName(exclude, p.name) {
			s.pairs = append(s.pairs, p)
		}
	}
	return nil
}

// parsePairs reads the pairs of raw into s.pairs with url.ParseQuery,
// leaving out excluded names.
func (s *scratch) parsePairs(raw string, exclude []string) error {
	values, err := url.ParseQuery(raw)
	if err != nil {
		return err
	}
	for name, vs := range values {
		if excludedName(exclude, []byte(name)) {
			continue
		}
		for _, v := range vs {
			s.pairs = append(s.pairs, formPair{[]byte(name), []byte(v)})
		}
	}
	return nil
}

// appendQueryUnescape appends text unescaped as url.QueryUnescape
// unescapes it: "+" is a space and "%" starts two hexadecimal digits. It
// reports false for a "%" without them.
func appendQueryUnescape[T string | []byte](dst []byte, text T) ([]byte, bool) {
	for i := 0; i < len(text); i++ {
		switch c := text[i]; c {
		case '+':
			dst = append(dst, ' ')
		case '%':
			if i+2 >= len(text) || !isHex(text[i+1]) || !isHex(text[i+2]) {
				return dst, false
			}
			dst = append(dst, unhex(text[i+1])<<4|unhex(text[i+2]))
			i += 2
		default:
			dst = append(dst, c)
		}
	}
	return dst, true
}

// appendQueryEscape appends b escaped as url.QueryEscape escapes it:
// letters, digits and "-_.~" as they are, a space as "+", any other byte
// as "%" and two upper-case hexadecimal digits.
func appendQueryEscape(dst, b []byte) []byte {
	const hexDigits = "0123456789ABCDEF"
	for _, c := range b {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.', c == '~':
			dst = append(dst, c)
		case c == ' ':
			dst = append(dst, '+')
		default:
			dst = append(dst, '%', hexDigits[c>>4], hexDigits[c&0xF])
		}
	}
	return dst
}

// indexByte returns the index of the first c in s, or -1.
func indexByte[T string | []byte](s T, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// countByte returns the number of c in s.
func countByte[T string | []byte](s T, c byte) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			n++
		}
	}
	return n
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// excludedName reports whether the form field name is excluded.
func excludedName(exclude []string, name []byte) bool {
	for _, ptr := range exclude {
		if unescapePointer(ptr) == string(name) {
			return true
		}
	}
	return false
}

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

// encodeFields encodes the field digests for storage, as a small JSON object
// of pointer to base64url digest, with the body's kind under kindMember.
// Stores keep it as opaque bytes.
//
// The bytes are those encoding/json writes for a map of the same strings:
// members sorted by name, so the pointers, which start with "/", come
// before kindMember, and strings escaped as it escapes them. Stored digests
// are compared byte for byte, so they must never change.
func (f fingerprint) encodeFields() []byte {
	if f.fields == nil { // not an object; an empty object encodes as {"media":...}
		return nil
	}
	n := len(`{"":""}`) + len(kindMember) + len(f.kind)
	for _, d := range f.fields {
		n += len(`"":"",`) + len(d.pointer) + base64.RawURLEncoding.EncodedLen(len(d.digest))
	}
	out := make([]byte, 0, n)
	out = append(out, '{')
	for _, d := range f.fields {
		out = appendJSONString(out, d.pointer)
		out = append(out, ':', '"')
		out = base64.RawURLEncoding.AppendEncode(out, d.digest[:])
		out = append(out, '"', ',')
	}
	out = appendJSONString(out, kindMember)
	out = append(out, ':')
	out = appendJSONString(out, f.kind)
	return append(out, '}')
}

// appendJSONString appends s as encoding/json writes it. A string of
// printable ASCII without '"', '\' or the characters it escapes for HTML
// is written in quotes as it is; any other is left to encoding/json.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			quoted, _ := json.Marshal(s) // a string always marshals
			return append(dst, quoted...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

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

// describeKind names a body kind for a problem's detail.
func describeKind(kind string) string {
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

// kindChange returns the body kind of the first request, from its stored
// field digests, when it is not f's: the retry sends its body in another
// media type, so its fields cannot be compared one by one. It returns ""
// when the kinds are the same, or the stored digests do not say (they were
// stored by a version that did not record the kind).
func kindChange(stored []byte, f fingerprint) string {
	first := decodeFields(stored)[kindMember]
	if first == "" || first == f.kind {
		return ""
	}
	return first
}

// diffFields returns the pointers of the top-level fields that differ between
// the stored field digests and f: changed, added or removed, sorted. It
// returns nil when the stored digests are empty or cannot be decoded.
func diffFields(stored []byte, f fingerprint) []string {
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
