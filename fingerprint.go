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
func fingerprintOf(p FingerprintParams) (fingerprint, error) {
	query, err := canonicalPairs(p.RawQuery, nil)
	if err != nil {
		return fingerprint{}, &bodyError{err: errMalformedQuery, reason: "the query string does not parse"}
	}
	kind, body, fields, err := canonicalBody(p)
	if err != nil {
		return fingerprint{}, err
	}
	h := sha256.New()
	for _, part := range []string{"idem-fingerprint-v1", p.Method, p.Path, query.encoded, kind} {
		writePart(h, []byte(part))
	}
	writePart(h, body)
	var f fingerprint
	h.Sum(f.sum[:0])
	f.kind, f.fields = kind, fields
	return f, nil
}

func writePart(h hash.Hash, b []byte) {
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(b)))])
	h.Write(b)
}

func canonicalBody(p FingerprintParams) (kind string, body []byte, fields []fieldDigest, err error) {
	if len(p.Body) == 0 {
		return kindEmpty, nil, nil, nil
	}
	media, charset := "", ""
	if p.ContentType != "" {
		m, params, perr := mime.ParseMediaType(p.ContentType)
		if perr != nil && !p.Raw {
			return "", nil, nil, &bodyError{err: errUnsupportedMediaType, reason: "the Content-Type header does not parse"}
		}
		media, charset = m, params["charset"]
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
		body, fields, err = canonicalJSON(p.Body, p.Exclude)
		return kindJSON, body, fields, err
	case isForm:
		exclude := make(map[string]bool, len(p.Exclude))
		for _, ptr := range p.Exclude {
			exclude[unescapePointer(ptr)] = true
		}
		form, ferr := canonicalPairs(string(p.Body), exclude)
		if ferr != nil {
			return "", nil, nil, &bodyError{err: errMalformedBody, reason: "the form body does not parse"}
		}
		for _, d := range form.fields {
			if !utf8.ValidString(d.pointer) {
				return "", nil, nil, &bodyError{err: errMalformedBody, reason: "a form field name is not UTF-8 after percent-decoding"}
			}
		}
		return kindForm, []byte(form.encoded), form.fields, nil
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

func canonicalJSON(src []byte, exclude []string) ([]byte, []fieldDigest, error) {
	members, err := canonicalForm.Members(src)
	if errors.Is(err, jcs.ErrNotObject) {
		out, err := canonicalForm.Canonicalize(src)
		if err != nil {
			return nil, nil, jsonError(err)
		}
		return out, nil, nil
	}
	if err != nil {
		return nil, nil, jsonError(err)
	}
	var buf bytes.Buffer
	buf.WriteByte('{')
	fields := make([]fieldDigest, 0, len(members))
	for _, m := range members {
		ptr := escapePointer(m.Name)
		if slices.Contains(exclude, ptr) {
			continue
		}
		if len(fields) > 0 {
			buf.WriteByte(',')
		}
		name, _ := json.Marshal(m.Name) // the name is valid UTF-8: it came from the parser
		canonName, err := canonicalForm.Canonicalize(name)
		if err != nil {
			return nil, nil, jsonError(err)
		}
		buf.Write(canonName)
		buf.WriteByte(':')
		buf.Write(m.Value)
		fields = append(fields, digestField(ptr, m.Value))
	}
	buf.WriteByte('}')
	sortFields(fields)
	return buf.Bytes(), fields, nil
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

type pairs struct {
	encoded string
	fields  []fieldDigest
}

// canonicalPairs parses URL-encoded pairs and encodes them with names sorted
// and, for each name, values sorted.
func canonicalPairs(raw string, exclude map[string]bool) (pairs, error) {
	if raw == "" {
		return pairs{}, nil
	}
	values, err := url.ParseQuery(raw)
	if err != nil {
		return pairs{}, err
	}
	names := make([]string, 0, len(values))
	for name := range values {
		if !exclude[name] {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var b strings.Builder
	fields := make([]fieldDigest, 0, len(names))
	for _, name := range names {
		vs := slices.Clone(values[name])
		sort.Strings(vs)
		var fb strings.Builder
		for _, v := range vs {
			if b.Len() > 0 {
				b.WriteByte('&')
			}
			b.WriteString(url.QueryEscape(name))
			b.WriteByte('=')
			b.WriteString(url.QueryEscape(v))
			fb.WriteString(url.QueryEscape(v))
			fb.WriteByte('&')
		}
		ptr := escapePointer(name)
		fields = append(fields, digestField(ptr, []byte(fb.String())))
	}
	sortFields(fields)
	return pairs{encoded: b.String(), fields: fields}, nil
}

func digestField(ptr string, value []byte) fieldDigest {
	h := sha256.New()
	writePart(h, []byte("idem-field-v1"))
	writePart(h, []byte(ptr))
	writePart(h, value)
	var sum [32]byte
	h.Sum(sum[:0])
	var d fieldDigest
	d.pointer = ptr
	copy(d.digest[:], sum[:16])
	return d
}

func sortFields(fields []fieldDigest) {
	sort.Slice(fields, func(i, j int) bool { return fields[i].pointer < fields[j].pointer })
}

func escapePointer(name string) string {
	return "/" + strings.ReplaceAll(strings.ReplaceAll(name, "~", "~0"), "/", "~1")
}

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
func (f fingerprint) encodeFields() []byte {
	if f.fields == nil { // not an object; an empty object encodes as {"media":...}
		return nil
	}
	m := make(map[string]string, len(f.fields)+1)
	for _, d := range f.fields {
		m[d.pointer] = base64.RawURLEncoding.EncodeToString(d.digest[:])
	}
	m[kindMember] = f.kind
	out, _ := json.Marshal(m) // a map of strings always marshals
	return out
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
