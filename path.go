package idem

import (
	"net/http"
	"net/url"
	"strings"
)

// requestPath is the path the middleware fingerprints a request with and
// records with its key ([idemstore.Record] Path, "METHOD /path" for the resumer and
// operators): the request's escaped path with each segment spelled one way,
// so that two spellings of one path (/v1/payments and /v1/%70ayments,
// %2f and %2F) are one request, and two paths are never one.
//
// Each segment is percent-decoded and encoded again by appendPathSegment;
// the path is split where the client wrote "/" and nowhere else, so that
// /v1/a%2Fb (one segment "a/b") and /v1/a/b (two) stay two paths, as they
// are two routes to net/http's ServeMux. Dot segments and empty segments
// are kept, not cleaned away: a ServeMux redirects such a path before any
// handler runs, and a handler outside one may tell /v1//payments from
// /v1/payments. A path without "%" is its own canonical form, the one the
// fingerprint has always hashed.
//
// The route's pattern (Request.Pattern) is not used: it is empty when the
// middleware wraps the mux rather than a route, it names no resource under
// a prefix pattern ("/files/"), and a {name...} wildcard's value decodes
// %2F to "/", which would make /files/a%2Fb and /files/a/b one request.
// Where the mux sets a pattern, its literal segments and wildcard values
// are the decoded segments this path is built from.
func requestPath(r *http.Request) string {
	return canonicalPath(r.URL.EscapedPath())
}

// canonicalPath returns escaped, a path as [url.URL.EscapedPath] returns
// it, with each segment spelled as appendPathSegment spells it.
func canonicalPath(escaped string) string {
	if strings.IndexByte(escaped, '%') < 0 {
		return escaped
	}
	b := make([]byte, 0, len(escaped))
	for i, segment := range strings.Split(escaped, "/") {
		if i > 0 {
			b = append(b, '/')
		}
		decoded, err := url.PathUnescape(segment)
		if err != nil { // EscapedPath never returns a bad escape
			return escaped
		}
		b = appendPathSegment(b, decoded)
	}
	return string(b)
}

// appendPathSegment appends segment, decoded, as one path segment: the
// characters a path may hold as they are (RFC 3986 pchar, and "[" and "]",
// which url.URL leaves alone too), every other byte, "/" and "%" among
// them, as "%" and two upper-case hexadecimal digits.
func appendPathSegment(dst []byte, segment string) []byte {
	const hexDigits = "0123456789ABCDEF"
	for i := 0; i < len(segment); i++ {
		c := segment[i]
		if isPathChar(c) {
			dst = append(dst, c)
		} else {
			dst = append(dst, '%', hexDigits[c>>4], hexDigits[c&0xF])
		}
	}
	return dst
}

// isPathChar reports whether c stands for itself in a path segment: an
// unreserved character, a sub-delimiter, ":" or "@" (RFC 3986 pchar), or
// "[" or "]". These are the characters that url.URL keeps unescaped in a
// path the client sent so.
func isPathChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '-', '.', '_', '~', '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', ':', '@', '[', ']':
		return true
	}
	return false
}
