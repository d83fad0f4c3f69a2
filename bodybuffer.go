package idem

import "sync"

// maxPooledBody bounds the buffers that bodyBuffers keeps, so that one
// large body does not pin memory.
const maxPooledBody = 256 << 10

// bodyBuffers holds request body buffers that no handler saw: those of
// requests that the middleware answered without running the handler (a
// replay, a 409 or 422, a rejected body), which the next request can read
// its body into. A buffer that a handler read from is never reused: the
// handler may, against the rules, still hold a reader of it.
var bodyBuffers sync.Pool // of *[]byte

// bodyBuffer returns an empty buffer from bodyBuffers for a body of the
// given length, or nil when the length is unknown, too large, or no
// buffer in the pool has room for it.
func bodyBuffer(length int64) []byte {
	if length < 0 || length >= maxPooledBody {
		return nil
	}
	h, ok := bodyBuffers.Get().(*[]byte)
	if !ok {
		return nil
	}
	if b := *h; int64(cap(b)) > length {
		*h = nil
		bodyHolders.Put(h)
		return b[:0]
	}
	bodyBuffers.Put(h) // too small for this body; another may fit it
	return nil
}

// recycleBody puts b, a body buffer that no handler saw and nothing
// refers to any more, in bodyBuffers.
func recycleBody(b []byte) {
	if cap(b) == 0 || cap(b) > maxPooledBody {
		return
	}
	h, ok := bodyHolders.Get().(*[]byte)
	if !ok {
		h = new([]byte)
	}
	*h = b[:0]
	bodyBuffers.Put(h)
}

// bodyHolders holds the pointers that carry buffers in bodyBuffers, so that
// putting a buffer there does not allocate one.
var bodyHolders sync.Pool // of *[]byte, nil
