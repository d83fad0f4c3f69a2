package idem

import "github.com/idemkit/idem/internal/bodybuf"

// The key parser is not part of the API; its external tests reach it
// through these names.
var (
	ParseKey      = parseKey
	KeyFromHeader = keyFromHeader
	KeyFromPath   = keyFromPath

	ErrKeyEmpty     = errKeyEmpty
	ErrKeyTooLong   = errKeyTooLong
	ErrKeyMalformed = errKeyMalformed
	ErrKeyRepeated  = errKeyRepeated
)

type KeyError = invalidKeyError

// BodyBuffer is bodybuf.Get, for the tests of body buffer reuse.
var BodyBuffer = bodybuf.Get

// Jitter is the Purger's jitter of its least pause, for its tests.
var Jitter = jitter
