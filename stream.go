package idem

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/idemkit/idem/idemstore"
)

// ProblemResponseNotRetained: the request was processed, and its response
// was streamed to the client but was larger than the handler allowed to
// store (see [StreamResponse]). A retry gets this problem, with the original
// status and Location, never a second execution.
const ProblemResponseNotRetained ProblemCode = "idempotency-response-not-retained"

// StreamResponse, called by a handler that the middleware runs in
// [ModeTwoPhase] before it writes its response, sends the response to the client as the handler
// writes it instead of buffering it whole, and stores it for replay only if
// it is at most maxStored bytes long. A longer response is stored as a
// [ProblemResponseNotRetained] problem that carries the original status and
// Location header: a retry with the key gets that problem, and the handler
// does not run again. It returns false, and changes nothing, when w is not
// the middleware's, the mode is [ModeAtomic], or the handler has already
// written.
//
// Use it for large responses of handlers whose effects are outside the
// store's transaction, as a proxy's are. The client gets the response before
// the key is completed, and before writes made in the lease's transaction
// commit: when the store then fails to record the response, the client has
// it while the key is released (or, after [idemstore.ErrLeaseLost], belongs to another
// request). The middleware logs that; it cannot answer a problem any more.
//
// A client that goes away, or stops reading until a write deadline set on
// its connection passes, is written to no more: the handler's writes still
// succeed and are kept, so that the handler finishes its work and the key
// is completed with its whole response, which the client's retry gets.
func StreamResponse(w http.ResponseWriter, maxStored int64) bool {
	rec, ok := w.(*recorder)
	if !ok || rec.wroteHeader || rec.client == nil || maxStored < 0 {
		return false
	}
	rec.stream = &streamState{max: maxStored}
	return true
}

// BreakResponse tells the middleware, from inside a handler whose response
// streams (see [StreamResponse]) and whose status is already sent, that the
// response cannot be completed: the upstream it relays failed in the middle
// of the body, say. The key is then completed as
// [ProblemResponseNotRetained] with the status sent, so a retry learns the
// request was answered and does not run it again, and once the key is
// finished the middleware aborts the client's connection (panicking with
// [http.ErrAbortHandler]) so that the client sees the response cut short. It
// returns false, and changes nothing, when the response does not stream or
// its status is not sent yet.
func BreakResponse(w http.ResponseWriter) bool {
	rec, ok := w.(*recorder)
	if !ok || !rec.streamed() {
		return false
	}
	rec.stream.overflow, rec.stream.broken = true, true
	rec.body = bytes.Buffer{}
	return true
}

// streamState is the state of a recorder that streams to the client.
type streamState struct {
	max      int64
	overflow bool // the body is not kept: it grew past max, or broke; rec.body is empty
	broken   bool // BreakResponse was called
	// gone is set once a write to the client failed: the client went
	// away, or stopped reading until its write deadline passed. The rest
	// of the response is only kept, so that the handler runs to its end
	// and the key is completed with it for the client's retry.
	gone bool
}

// abortIfBroken aborts the client's connection after a broken response,
// once the key is finished.
func (rec *recorder) abortIfBroken() {
	if rec.stream != nil && rec.stream.broken {
		http.NewResponseController(rec.client).Flush() // what was written goes out first
		panic(http.ErrAbortHandler)
	}
}

// streamHeader sends the status and headers to the client.
func (rec *recorder) streamHeader() {
	h := rec.client.Header()
	for name, values := range rec.header {
		h[name] = values
	}
	rec.client.WriteHeader(rec.status)
}

// streamWrite sends p to the client and keeps it while the body is within
// the stored maximum. A client whose write fails is written to no more,
// and the handler is not told: what it still writes is kept for the
// stored response, so that a client that gave up, or stopped reading,
// neither cuts the handler's work short nor holds it past its lease.
func (rec *recorder) streamWrite(p []byte) (int, error) {
	s := rec.stream
	if !s.overflow {
		if int64(rec.body.Len()+len(p)) > s.max {
			s.overflow = true
			rec.body = bytes.Buffer{} // let the kept part go
		} else {
			rec.body.Write(p)
		}
	}
	if !s.gone {
		if _, err := rec.client.Write(p); err != nil {
			s.gone = true
		}
	}
	return len(p), nil
}

// Flush sends what the handler wrote so far to the client, when the
// response streams; it does nothing for a buffered response.
func (rec *recorder) Flush() {
	if rec.stream != nil && !rec.stream.gone {
		if err := http.NewResponseController(rec.client).Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
			rec.stream.gone = true
		}
	}
}

// streamed reports whether the response went to the client as it was
// written, so that nothing more may be written to the client.
func (rec *recorder) streamed() bool { return rec.stream != nil && rec.wroteHeader }

// notRetained is what is stored for a streamed response that was too large
// to keep: a problem with the original status and Location.
func (m *Middleware) notRetained(rec *recorder) *idemstore.Response {
	status := rec.statusCode()
	location := rec.header.Get("Location")
	why := "with a response larger than this service stores for replay"
	if rec.stream.broken {
		why = "and its response broke off before it was passed on whole"
	}
	p := ProblemResponseNotRetained.Kind().New(m.cfg.ProblemTypeBase, fmt.Sprintf(
		"This request was processed and answered %d, %s; the response is not repeated, and the request is not run again.", status, why))
	p.Status = status
	body, err := json.Marshal(struct {
		*Problem
		OriginalStatus int    `json:"original_status"`
		Location       string `json:"location,omitempty"`
	}{p, status, location})
	if err != nil { // strings and ints only
		panic(fmt.Sprintf("idem: marshal problem: %v", err))
	}
	resp := &idemstore.Response{StatusCode: status, Header: http.Header{"Content-Type": {ProblemContentType}}, Body: append(body, '\n')}
	if location != "" {
		resp.Header.Set("Location", location)
	}
	return resp
}

// discardWriter takes the answers the middleware would write after a
// response was streamed.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header {
	if d.h == nil {
		d.h = make(http.Header)
	}
	return d.h
}
func (*discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (*discardWriter) WriteHeader(int)             {}
