package idemconsume

import (
	"io"
	"net/http"
)

// answer is an http.ResponseWriter that keeps the status, the header and
// the body written to it: what the middleware answered, or what a handler
// wrote for its message.
type answer struct {
	header http.Header
	status int
	body   []byte
}

func (a *answer) Header() http.Header { return a.header }

func (a *answer) WriteHeader(status int) {
	if a.status != 0 {
		return
	}
	a.status = status
}

func (a *answer) Write(b []byte) (int, error) {
	if a.status == 0 {
		a.WriteHeader(http.StatusOK)
	}
	a.body = append(a.body, b...)
	return len(b), nil
}

// copyTo writes what a holds to w.
func (a *answer) copyTo(w http.ResponseWriter) {
	h := w.Header()
	for k, v := range a.header {
		h[k] = v
	}
	w.WriteHeader(a.status)
	if len(a.body) > 0 {
		w.Write(a.body)
	}
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
