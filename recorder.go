package idem

import (
	"bytes"
	"net/http"
)

// responseOf is what the store keeps of a handler's response: the status,
// the headers on the replay list and the body.
func (m *Middleware) responseOf(rec *recorder) *Response {
	if rec.stream != nil && rec.stream.overflow {
		return m.notRetained(rec)
	}
	resp := &Response{StatusCode: rec.statusCode(), Header: make(http.Header, len(m.replayHeaders)), Body: rec.body.Bytes()}
	copyFields(resp.Header, rec.header, m.replayHeaders, 0)
	return resp
}

// recorder buffers a handler's response until the lease is finished, or
// streams it to client (see StreamResponse).
type recorder struct {
	header      http.Header
	status      int
	wroteHeader bool
	body        bytes.Buffer
	client      http.ResponseWriter
	stream      *streamState // set by StreamResponse
	// phases is set by the middleware in two-phase mode: what
	// [Phases.Run] reports.
	phases *phaseHost
}

// unfinished reports whether Phases.Run left the operation unfinished.
func (rec *recorder) unfinished() bool { return rec.phases != nil && rec.phases.unfinished }

func (rec *recorder) Header() http.Header { return rec.header }

func (rec *recorder) WriteHeader(status int) {
	if rec.wroteHeader || status < 200 { // informational responses are not buffered
		return
	}
	rec.status, rec.wroteHeader = status, true
	if rec.stream != nil {
		rec.streamHeader()
	}
}

func (rec *recorder) Write(p []byte) (int, error) {
	if !rec.wroteHeader {
		rec.WriteHeader(http.StatusOK)
	}
	if rec.stream != nil {
		return rec.streamWrite(p)
	}
	return rec.body.Write(p)
}

func (rec *recorder) statusCode() int {
	if !rec.wroteHeader {
		return http.StatusOK
	}
	return rec.status
}

func (rec *recorder) writeTo(w http.ResponseWriter) {
	h := w.Header()
	for name, values := range rec.header {
		h[name] = values
	}
	writeBody(w, rec.statusCode(), rec.body.Bytes())
}
