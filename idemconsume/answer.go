package idemconsume

import (
	"io"
	"net/http"
)

// answer is the http.ResponseWriter of one message: it keeps the status,
// the header and the body of what the middleware answered, and, as the
// writer passed to phases, forwards to the middleware's.
type answer struct {
	header http.Header
	status int
	body   []byte
	inner  http.ResponseWriter // nil for the middleware's own writer
}

func (a *answer) Header() http.Header { return a.header }

func (a *answer) WriteHeader(status int) {
	if a.status != 0 {
		return
	}
	a.status = status
	if a.inner != nil {
		a.inner.WriteHeader(status)
	}
}

func (a *answer) Write(b []byte) (int, error) {
	if a.status == 0 {
		a.WriteHeader(http.StatusOK)
	}
	if a.inner != nil {
		return a.inner.Write(b)
	}
	a.body = append(a.body, b...)
	return len(b), nil
}

// bodyReader reads a message's payload as a request body.
type bodyReader struct {
	b   []byte
	off int
}

func (r *bodyReader) Read(p []byte) (int, error) {
	if r.off >= len(r.b) {
		return 0, io.EOF
	}
	n := copy(p, r.b[r.off:])
	r.off += n
	return n, nil
}

func (r *bodyReader) Close() error { return nil }
