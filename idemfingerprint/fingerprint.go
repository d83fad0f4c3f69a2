// Package idemfingerprint computes the fingerprint of a request, which
// identifies it for its key, for code that claims keys itself: a queue
// consumer that calls idempg's Store.ClaimTx computes the fingerprint of
// the request a message carries with [New], as the idem middleware
// computes it for every HTTP request, and passes its Hash and Fields in
// idemstore.ClaimParams.
package idemfingerprint

import "github.com/idemkit/idem/internal/fingerprint"

// Params describe a request to [New].
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

// Fingerprint identifies a request for its key, in the form a store keeps:
// the same logical request always has the same Hash, whatever the JSON
// member order, whitespace, number spelling, or order of the distinct names
// of form and query pairs. The values of a repeated name keep their order,
// as the elements of a JSON array do: a=1&a=2 and a=2&a=1 are two requests.
//
// The middleware computes it for every request. Code that claims keys
// itself, such as a queue consumer that calls idempg's Store.ClaimTx,
// computes it with [New] and passes Hash and Fields in
// idemstore.ClaimParams.
type Fingerprint struct {
	// Hash is SHA-256 over the method, the path, the canonical query, the
	// body kind and the canonical body, each length-prefixed: the
	// idemstore.ClaimParams RequestHash.
	Hash []byte
	// Fields are digests of the body's top-level fields, and whether the
	// body is JSON or form data, so that a mismatch can name the fields or
	// the media type that differ without storing or echoing any value: the
	// idemstore.ClaimParams RequestFields. Nil for a body that is empty, or neither
	// a JSON object nor a form.
	Fields []byte
}

// New computes the fingerprint of a request. JSON bodies
// (application/json and any +json type) are canonicalised by RFC 8785, with
// numbers that a double cannot hold kept exact, and a JSON object that names
// a member twice is rejected; form bodies
// (application/x-www-form-urlencoded), like the query, by sorted names,
// each name's values in the order they came. Both
// must be UTF-8: a charset parameter other than utf-8 (in any case) is an
// unsupported media type, and with Raw such a body is hashed byte for byte.
// An empty body needs no content type. The error says, in words safe to
// show to the client, why a request cannot be fingerprinted.
func New(p Params) (Fingerprint, error) {
	f, fields, err := fingerprint.Encoded(fingerprint.Params(p))
	if err != nil {
		return Fingerprint{}, err
	}
	return Fingerprint{Hash: f.Sum[:], Fields: fields}, nil
}
