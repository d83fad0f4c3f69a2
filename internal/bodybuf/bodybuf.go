// Package bodybuf holds the buffers that request bodies are read into,
// reused from one request to the next, and the reader a handler is given
// for one.
package bodybuf

import (
	"errors"
	"io"
	"math/bits"
	"sync"
)

// bodySizes are the capacities of the body buffers that bodyBuffers
// keeps: a body of known length is read into a buffer of the smallest size
// that holds it and the byte after it, so that a buffer fits every body of
// its size, whatever the sizes of the bodies before it. The largest bounds
// what the pool keeps, so that one large body does not pin memory.
var bodySizes = [...]int{512, 1 << 10, 2 << 10, 4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10}

// maxPooledBody is the length of the smallest body that is never read into
// a pooled buffer.
var maxPooledBody = int64(bodySizes[len(bodySizes)-1])

// bodyBuffers holds, for each of bodySizes, request body buffers that no
// handler holds any more, which the next request can read its body into:
// those of requests that the middleware answered without running the
// handler (a replay, a 409 or 422, a rejected body), and those of handlers
// that returned. When a handler returns, the reader it was given is
// detached first, so that a reader the handler left behind reads nothing
// of another request; a buffer whose reader is being read then, and that
// of a handler that panicked, are left to the garbage collector.
var bodyBuffers [len(bodySizes)]sync.Pool // of *[]byte

// bodySize returns the index in bodySizes of the smallest size of at least
// n, or -1 when there is none. The sizes are the powers of two from 512:
// the index is read off n-1's bit length, rather than found by a walk
// over the sizes (see TestBodySize).
func bodySize(n int64) int {
	if n <= int64(bodySizes[0]) {
		return 0
	}
	i := bits.Len64(uint64(n-1)) - bits.Len64(uint64(bodySizes[0]-1))
	if i >= len(bodySizes) {
		return -1
	}
	return i
}

// Get returns an empty buffer for a body of the given length, with
// room for the byte after it, from bodyBuffers when it holds one; nil when
// the length is unknown, 0, or too large to pool. It returns too the
// holder that carried the buffer in bodyBuffers, or nil: give it to
// Recycle with the buffer, which then puts the buffer back in it rather
// than in a new one.
func Get(length int64) ([]byte, *[]byte) {
	if length <= 0 || length >= maxPooledBody {
		return nil, nil
	}
	i := bodySize(length + 1)
	if h, ok := bodyBuffers[i].Get().(*[]byte); ok {
		b := *h
		*h = nil
		return b[:0], h
	}
	return make([]byte, 0, bodySizes[i]), nil
}

// Recycle puts b, a body buffer that no handler holds and nothing
// refers to any more, in bodyBuffers, when it is one of bodySizes. h is
// the holder that Get returned with the buffer, which nothing else holds,
// or nil.
func Recycle(b []byte, h *[]byte) {
	i := bodySize(int64(cap(b)))
	if i < 0 || cap(b) != bodySizes[i] {
		return
	}
	if h == nil {
		h = new([]byte)
	}
	*h = b[:0]
	bodyBuffers[i].Put(h)
}

// Reader is the body a handler reads, as a bytes.Reader reads it: the
// buffered request body, until the middleware takes it back with Detach.
// Its lock is held while its bytes are read, so that the middleware can
// tell whether a reader the handler left behind, such as a Transport that
// still sends the body upstream after its RoundTrip returned, is reading
// them.
type Reader struct {
	mu sync.Mutex
	s  []byte // the body; nil once detached
	i  int64  // where the next Read starts
}

// Read reads the body as bytes.Reader.Read does. It unlocks without a
// defer: nothing between the lock and the unlocks can panic, and Read is
// called at least twice a request.
func (b *Reader) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.i >= int64(len(b.s)) {
		b.mu.Unlock()
		return 0, io.EOF
	}
	n := copy(p, b.s[b.i:])
	b.i += int64(n)
	b.mu.Unlock()
	return n, nil
}

// WriteTo writes the rest of the body to w, as bytes.Reader.WriteTo does,
// so that io.Copy needs no buffer. w must not keep the bytes it is given.
func (b *Reader) WriteTo(w io.Writer) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.i >= int64(len(b.s)) {
		return 0, nil
	}
	rest := b.s[b.i:]
	n, err := w.Write(rest)
	if n > len(rest) {
		panic("idem: a writer reported more bytes written than it was given")
	}
	b.i += int64(n)
	if err == nil && n != len(rest) {
		err = io.ErrShortWrite
	}
	return int64(n), err
}

// ReadAt reads the body at off as bytes.Reader.ReadAt does.
func (b *Reader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("idem: request body: ReadAt at a negative offset")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if off >= int64(len(b.s)) {
		return 0, io.EOF
	}
	n := copy(p, b.s[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Seek sets where the next Read starts, as bytes.Reader.Seek does.
func (b *Reader) Seek(offset int64, whence int) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = offset
	case io.SeekCurrent:
		abs = b.i + offset
	case io.SeekEnd:
		abs = int64(len(b.s)) + offset
	default:
		return 0, errors.New("idem: request body: Seek with an invalid whence")
	}
	if abs < 0 {
		return 0, errors.New("idem: request body: Seek to a negative position")
	}
	b.i = abs
	return abs, nil
}

// Close does nothing: the body is in memory.
func (*Reader) Close() error { return nil }

// Attach makes the reader read body from its start. Call it before the
// reader is handed to anyone.
func (b *Reader) Attach(body []byte) { b.s, b.i = body, 0 }

// Detach makes the reader read nothing more and reports whether its
// buffer may go to another request: false while a read is under way, which
// may still be copying from it.
func (b *Reader) Detach() bool {
	if !b.mu.TryLock() {
		return false
	}
	b.s, b.i = nil, 0
	b.mu.Unlock()
	return true
}
