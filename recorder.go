package idem

import (
	"bytes"
	"net/http"
	"slices"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/replay"
)

// replayList is the response headers a stored response keeps: Content-Type,
// Content-Language, Location, and the configured ones, canonical. The
// middleware and the resumer build theirs from their ReplayHeaders with
// newReplayList, and store responses with its response.
type replayList []string

func newReplayList(extra []string) replayList { return replay.Headers(extra) }

// response is what the store keeps of a buffered response: the status,
// the headers on the list and the body.
func (l replayList) response(rec *recorder) *idemstore.Response {
	resp := &rec.stored // in the recorder's allocation
	*resp = idemstore.Response{StatusCode: rec.statusCode(), Body: rec.body.Bytes()}
	if rec.stream == nil {
		// The handler is done with its header, and the client gets copies
		// of its values (see writeTo): the response can hold the header
		// itself, or its values.
		if len(l) == len(replay.Defaults) { // the list by default (see replay.Defaults)
			return lookUp(rec, resp)
		}
		if l.all(rec) {
			resp.Header = rec.header
			return resp
		}
	}
	// A streamed response's header went to the client as it is, so its
	// values are copied here; and those of a header not all kept.
	resp.Header = make(http.Header, len(l))
	copyFields(resp.Header, rec.header, l, 0, nil)
	return resp
}

// defaultLookups are the names on the replay list by default (see
// replay.Headers), in the order lookUp looks them up: the commonest first.
// There are no more of them than rec.fields has room for.
var defaultLookups = [...]string{replay.ContentType, replay.Location, replay.ContentLanguage}

// lookUp is response's header for the replay list by default. It looks the
// names on the list up in rec.header, which costs less than reading the
// map, and stops once it has found as many fields as the header has. The
// fields found that have values, which the stored header has, it keeps in
// rec.fields, for writeTo too when they are all the header's (see all).
func lookUp(rec *recorder, resp *idemstore.Response) *idemstore.Response {
	h := rec.header
	n := 0
	if n < len(h) {
		n = rec.keep(n, defaultLookups[0])
	}
	if n < len(h) {
		n = rec.keep(n, defaultLookups[1])
	}
	if n < len(h) {
		n = rec.keep(n, defaultLookups[2])
	}
	if n == len(h) {
		rec.nfields = n
		resp.Header = h
		return resp
	}
	rec.nfields = 0
	resp.Header = make(http.Header, n)
	for _, f := range rec.fields[:n] {
		resp.Header[f.name] = f.values
	}
	return resp
}

// keep keeps the field of rec.header named name in rec.fields[n] when it
// has values, and returns how many fields rec.fields has then.
func (rec *recorder) keep(n int, name string) int {
	values := rec.header[name]
	if len(values) == 0 {
		return n
	}
	f := &rec.fields[n]
	f.name, f.values = name, values
	return n + 1
}

// all reports whether every field of rec.header is on the list and has a
// value, so that the stored header is rec.header itself. When it is so and
// the fields fit in rec.fields, it keeps them there for writeTo, which then
// need not read the map again.
func (l replayList) all(rec *recorder) bool {
	n := 0
	for name, values := range rec.header {
		if len(values) == 0 || !slices.Contains(l, name) {
			rec.nfields = 0
			return false
		}
		if n < len(rec.fields) {
			rec.fields[n] = field{name, values}
		}
		n++
	}
	rec.nfields = n
	if n > len(rec.fields) {
		rec.nfields = 0
	}
	return true
}

// field is one field of a header.
type field struct {
	name   string
	values []string // not empty
}

// responseOf is what the store keeps of a handler's response.
func (m *Middleware) responseOf(rec *recorder) *idemstore.Response {
	if rec.stream != nil && rec.stream.overflow {
		return m.notRetained(rec)
	}
	return m.replayHeaders.response(rec)
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
	// stored is what response returns, allocated with the recorder.
	stored idemstore.Response
	// fields are the nfields fields of header, each with values, as
	// replayList.all or lookUp read them, for writeTo; nfields is 0 when
	// they did not read them all.
	fields  [4]field
	nfields int
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

// WriteString is Write without the copy of s to a byte slice that
// io.WriteString makes for a writer without it, when the response is
// buffered.
func (rec *recorder) WriteString(s string) (int, error) {
	if !rec.wroteHeader {
		rec.WriteHeader(http.StatusOK)
	}
	if rec.stream != nil {
		return rec.streamWrite([]byte(s))
	}
	return rec.body.WriteString(s)
}

func (rec *recorder) statusCode() int {
	if !rec.wroteHeader {
		return http.StatusOK
	}
	return rec.status
}

// writeTo writes the buffered response to w. The header's values are
// copied, so that nothing done to w's header changes a stored response
// that holds rec.header (see responseOf); Content-Length shares their
// room, which is buf's when it has enough (see copyFields).
func (rec *recorder) writeTo(w http.ResponseWriter, buf []string) {
	var spare []string
	if rec.nfields > 0 {
		spare = copyFieldList(w.Header(), rec.fields[:rec.nfields], 1, buf)
	} else {
		spare = copyFields(w.Header(), rec.header, nil, 1, buf)
	}
	writeBody(w, rec.statusCode(), rec.body.Bytes(), spare)
}
