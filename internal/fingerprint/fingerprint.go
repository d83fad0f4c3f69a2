// Package fingerprint computes the fingerprint of a request, which
// identifies it for its key: the middleware's, with its field digests kept
// encoded and its buffers reused, under the one that package
// idemfingerprint publishes for code that claims keys itself.
//
// A JSON body is read once: the scratch's [jcs.Encoder] writes its
// canonical form into a buffer as it reads it, copying what is already
// canonical (strings without escapes, short integers, objects whose members
// come in order) and sorting only the objects whose members do not, and
// leaves the top-level members' spans in that buffer. Each member's digest
// is then taken over its span, and the body's over the whole buffer: no
// tree, no sorted copy, and no allocation but the encoded field digests
// that [Encoded] returns. The digests' inputs need each part's length
// before the part, so a digest cannot start before its value has been read
// to its end; the canonical buffer is what lets the one pass serve both.
//
// What a fingerprint is must never change: stores keep its sum and its
// encoded field digests, and compare a retry's with them byte for byte.
// ref_test.go holds the implementation of before the one-pass reading, with
// the canonical JSON of then (refjcs_test.go), and
// FuzzFingerprintMatchesReference holds this one to it, digest for digest
// and error for error.
package fingerprint

import (
	"encoding/base64"
	"errors"
	"fmt"
	"mime"
	"strings"
	"unicode/utf8"

	"github.com/idemkit/idem/internal/jcs"
)

// Errors of a request that cannot be fingerprinted.
var (
	// ErrUnsupportedMediaType means the body is neither JSON nor form data.
	ErrUnsupportedMediaType = errors.New("idem: unsupported media type")
	// ErrMalformedBody means the body does not parse as its media type says.
	ErrMalformedBody = errors.New("idem: malformed request body")
	// ErrDuplicateMember means a JSON object in the body names a member twice.
	ErrDuplicateMember = errors.New("idem: duplicate member in JSON body")
	// ErrMalformedQuery means the query string does not parse.
	ErrMalformedQuery = errors.New("idem: malformed query string")
)

// BodyError describes a request that cannot be fingerprinted.
type BodyError struct {
	err    error  // one of the sentinel errors above
	reason string // safe to show to the client
}

func (e *BodyError) Error() string { return e.err.Error() + ": " + e.reason }

// Unwrap returns the sentinel error.
func (e *BodyError) Unwrap() error { return e.err }

// Reason says why the request cannot be fingerprinted, in words safe to
// show to the client.
func (e *BodyError) Reason() string { return e.reason }

// Params describe a request to [Encoded].
type Params struct {
	Method string // the HTTP method, or any name of the operation
	// Path is the escaped path, or any name of the resource. The
	// middleware passes the request's path with each segment's escapes
	// spelled one way, so that /v1/%70ayments is /v1/payments.
	Path        string
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

// Fingerprint is the fingerprint of a request before its field digests
// are encoded: the form the middleware compares. Sum is what a store keeps
// as the request's hash.
type Fingerprint struct {
	Sum    [32]byte
	Kind   string        // kindEmpty, kindJSON, kindForm or kindRaw
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

// Encoded computes the fingerprint of a request. JSON bodies
// (application/json and any +json type) are canonicalised by RFC 8785, with
// numbers that a double cannot hold kept exact, and a JSON object that names
// a member twice is rejected; form bodies
// (application/x-www-form-urlencoded), like the query, by sorted names,
// each name's values in the order they came. Both
// must be UTF-8: a charset parameter other than utf-8 (in any case) is an
// unsupported media type, and with Raw such a body is hashed byte for byte.
// An empty body needs no content type. The error, a [*BodyError], says in
// words safe to show to the client why a request cannot be fingerprinted.
//
// It works in buffers it reuses: the canonical query and body never leave
// them. It returns the field digests encoded (see scratch.encodeFields), in
// their one allocation, and a Fingerprint without them (see
// [Fingerprint.WithFields]).
func Encoded(p Params) (f Fingerprint, fields []byte, err error) {
	s := scratchPool.Get().(*scratch)
	// encodedFlat sets the result in place, which spares a copy of it.
	fields, ok, scanned := s.encodedFlat(&p, &f)
	if ok {
		s.releaseFlat()
		return f, fields, nil
	}
	s.notFlat = scanned // the body is not flat: canonicalJSON need not look again
	f, err = s.fingerprint(&p)
	s.notFlat = false
	if err != nil {
		s.release()
		return Fingerprint{}, nil, err
	}
	fields = s.encodeFields(f.Kind)
	s.release()
	return f, fields, nil
}

// fingerprint computes the fingerprint of a request but for its field
// digests, which it leaves in s.
func (s *scratch) fingerprint(p *Params) (Fingerprint, error) {
	query := s.query[:0]
	if p.RawQuery != "" {
		var err error
		if query, err = canonicalPairs(s, query, p.RawQuery, nil, false); err != nil {
			return Fingerprint{}, &BodyError{err: ErrMalformedQuery, reason: "the query string does not parse"}
		}
		s.query = query
	}
	s.digests, s.hasFields, s.unordered, s.quoted = s.digests[:0], false, false, false
	kind, body, err := s.canonicalBody(p)
	if err != nil {
		return Fingerprint{}, err
	}
	head := s.head[:len(fingerprintHead)]
	head = appendPart(head, p.Method)
	head = appendPart(head, p.Path)
	head = appendPart(head, query)
	head = appendPart(head, kind)
	return Fingerprint{Sum: *s.sum(&s.head, head, body), Kind: kind}, nil
}

// fingerprintHead is the first part of a fingerprint's input, as
// appendPart writes it.
const fingerprintHead = "\x13" + "idem-fingerprint-v1"

// WithFields returns f with the field digests that encoded holds, as
// [Encoded] returned them: for the answers that compare them
// with a stored request's.
func (f Fingerprint) WithFields(encoded []byte) Fingerprint {
	fields := decodeFields(encoded)
	if fields == nil {
		return f
	}
	f.fields = make([]fieldDigest, 0, len(fields))
	for ptr, digest := range fields {
		d := fieldDigest{pointer: ptr}
		if n, err := base64.RawURLEncoding.Decode(d.digest[:], []byte(digest)); err == nil && n == len(d.digest) && strings.HasPrefix(ptr, "/") {
			f.fields = append(f.fields, d)
		}
	}
	sortFields(f.fields)
	return f
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

// canonicalBody returns the kind and canonical form of the body, which may
// be in s's buffers, and leaves its field digests in s.
func (s *scratch) canonicalBody(p *Params) (kind string, body []byte, err error) {
	if len(p.Body) == 0 {
		return kindEmpty, nil, nil
	}
	if p.ContentType == "application/json" {
		// What most requests send, which the switch below reads as JSON.
		body, err = s.canonicalJSON(p.Body, p.Exclude)
		return kindJSON, body, err
	}
	media, charset := "", ""
	if p.ContentType != "" {
		m, cs, perr := mediaType(p.ContentType)
		if perr != nil && !p.Raw {
			return "", nil, &BodyError{err: ErrUnsupportedMediaType, reason: "the Content-Type header does not parse"}
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
			return kindRaw, p.Body, nil
		}
		return "", nil, &BodyError{err: ErrUnsupportedMediaType, reason: fmt.Sprintf("charset %q is not supported; send the body in UTF-8 (charset=utf-8, or no charset)", charset)}
	}
	switch {
	case isJSON:
		body, err = s.canonicalJSON(p.Body, p.Exclude)
		return kindJSON, body, err
	case isForm:
		form, ferr := canonicalPairs(s, s.text[:0], p.Body, p.Exclude, true)
		if ferr != nil {
			return "", nil, &BodyError{err: ErrMalformedBody, reason: "the form body does not parse"}
		}
		s.text = form
		if !utf8.Valid(s.pointers) { // the pointers of every field name, one after the other
			return "", nil, &BodyError{err: ErrMalformedBody, reason: "a form field name is not UTF-8 after percent-decoding"}
		}
		return kindForm, form, nil
	case p.Raw:
		return kindRaw, p.Body, nil
	case media == "":
		return "", nil, &BodyError{err: ErrUnsupportedMediaType, reason: "the request has a body but no Content-Type; send application/json or application/x-www-form-urlencoded"}
	default:
		return "", nil, &BodyError{err: ErrUnsupportedMediaType, reason: fmt.Sprintf("content type %q is not supported; send application/json or application/x-www-form-urlencoded", media)}
	}
}

// canonicalForm is RFC 8785 with exact numbers: a number that a double
// cannot hold (9007199254740993, an id of 19 digits) keeps its value instead
// of rounding to the double's, so that two requests that differ only there
// never share a fingerprint. Each scratch's encoder writes it.
var canonicalForm = jcs.Options{ExactNumbers: true}

// canonicalJSON returns the canonical form of a JSON body without the
// excluded top-level fields, and leaves the digests of the others in s
// when the body is an object. The canonical form is src itself when
// s.flatJSON reads it, and otherwise in s's buffers: the encoder's text,
// which holds each member's value where its digest reads it, or, when a
// field is excluded, the members that are not copied after one another.
func (s *scratch) canonicalJSON(src []byte, exclude []string) ([]byte, error) {
	if len(exclude) == 0 && !s.notFlat && s.flatJSON(src) {
		return src, nil
	}
	c, err := s.enc.Append(s.text[:0], src)
	if err != nil {
		return nil, jsonError(err)
	}
	s.text = c.Text
	s.pointers, s.ends = s.pointers[:0], s.ends[:0]
	if !c.IsObject {
		return c.Text, nil
	}
	s.hasFields = true
	body := c.Text   // the whole object, unless a field is excluded
	rebuilt := false // body is being rebuilt without the excluded fields
	for i := range s.enc.Len() {
		name, start, valueStart, end := s.enc.Member(i)
		ptr := addPointer(s, name)
		if len(exclude) > 0 && excluded(exclude, ptr) {
			s.dropPointer()
			if !rebuilt {
				// Start again with the members before this one.
				body, rebuilt = append(s.value[:0], '{'), true
				for k := range i {
					_, kStart, _, kEnd := s.enc.Member(k)
					body = append(append(body, c.Text[kStart:kEnd]...), ',')
				}
			}
			continue
		}
		if rebuilt {
			body = append(append(body, c.Text[start:end]...), ',')
		}
		s.digestField(ptr, c.Text[valueStart:end])
	}
	if rebuilt {
		if body[len(body)-1] == ',' {
			body = body[:len(body)-1]
		}
		body = append(body, '}')
		s.value = body
	}
	return body, nil
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
		return &BodyError{err: ErrDuplicateMember, reason: fmt.Sprintf("the JSON body names %s more than once", dup.Pointer)}
	}
	if errors.Is(err, jcs.ErrTooDeep) {
		return &BodyError{err: ErrMalformedBody, reason: "the JSON body is nested too deeply"}
	}
	if errors.Is(err, jcs.ErrNumber) {
		return &BodyError{err: ErrMalformedBody, reason: "the JSON body has a number out of range"}
	}
	var syn *jcs.SyntaxError
	if errors.As(err, &syn) {
		return &BodyError{err: ErrMalformedBody, reason: fmt.Sprintf("the body is not valid JSON (offset %d: %s)", syn.Offset, syn.Msg)}
	}
	return &BodyError{err: ErrMalformedBody, reason: "the body is not valid JSON"}
}
