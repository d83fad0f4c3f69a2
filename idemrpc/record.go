package idemrpc

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/code"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
)

// Media types of the responses that the middleware stores for RPCs: the
// record of a call's answer.
const (
	// MessageContentType is the record of a response message: status 200,
	// the message in protobuf's binary form.
	MessageContentType = "application/vnd.idem.rpc-message+proto"
	// StatusContentType is the record of an error status: the status code
	// of [HTTPStatus], a google.rpc.Status in protobuf's binary form.
	StatusContentType = "application/vnd.idem.rpc-status+proto"
)

// WriteMessage records a response message as the HTTP response that the
// middleware stores and replays. A final phase of [idem.Phases] that a
// [idem.Resumer] may run for an RPC writes its answer with it.
func WriteMessage(w http.ResponseWriter, m proto.Message) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return fmt.Errorf("idemrpc: marshal the response: %w", err)
	}
	writeRecord(w, MessageContentType, http.StatusOK, b)
	return nil
}

// WriteStatus records an error status as the HTTP response that the
// middleware stores or releases by [idem.Config.Outcome], applied to the
// status code of [HTTPStatus]. A status with code OK is recorded as
// UNKNOWN.
func WriteStatus(w http.ResponseWriter, st *spb.Status) {
	if st.GetCode() == int32(code.Code_OK) {
		st = &spb.Status{Code: int32(code.Code_UNKNOWN), Message: "idemrpc: an error status with code OK"}
	}
	b, err := proto.Marshal(st)
	if err != nil { // a Status with Any details always marshals
		panic(fmt.Sprintf("idemrpc: marshal status: %v", err))
	}
	writeRecord(w, StatusContentType, HTTPStatus(code.Code(st.GetCode())), b)
}

func writeRecord(w http.ResponseWriter, contentType string, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}

// HTTPStatus is the HTTP status code by which an RPC's error status is
// recorded, and so what [idem.Config.Outcome] decides on: with
// [idem.DefaultOutcomePolicy], the codes that say the call was not
// processed or may succeed when run again release the key, and the others
// are stored and replayed.
//
//	INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE   400 (released)
//	UNAUTHENTICATED                                       401 (released)
//	PERMISSION_DENIED                                     403 (released)
//	NOT_FOUND                                             404 (released)
//	RESOURCE_EXHAUSTED                                    429 (released)
//	ALREADY_EXISTS                                        409 (stored)
//	CANCELLED, ABORTED, UNAVAILABLE                       503 (released)
//	DEADLINE_EXCEEDED                                     504 (released)
//	UNIMPLEMENTED                                         501 (released)
//	UNKNOWN, INTERNAL, DATA_LOSS, any other               500 (released)
//
// This is google.rpc.Code's HTTP mapping, except CANCELLED (499 there) and
// ABORTED (409 there): a call cancelled while it ran, or aborted by a
// conflict, did not finish, and storing it would replay a failure that a
// retry can fix. [idem.StoreServerErrorsPolicy] stores the 5xx ones too.
func HTTPStatus(c code.Code) int {
	switch c {
	case code.Code_OK:
		return http.StatusOK
	case code.Code_INVALID_ARGUMENT, code.Code_FAILED_PRECONDITION, code.Code_OUT_OF_RANGE:
		return http.StatusBadRequest
	case code.Code_UNAUTHENTICATED:
		return http.StatusUnauthorized
	case code.Code_PERMISSION_DENIED:
		return http.StatusForbidden
	case code.Code_NOT_FOUND:
		return http.StatusNotFound
	case code.Code_RESOURCE_EXHAUSTED:
		return http.StatusTooManyRequests
	case code.Code_ALREADY_EXISTS:
		return http.StatusConflict
	case code.Code_CANCELLED, code.Code_ABORTED, code.Code_UNAVAILABLE:
		return http.StatusServiceUnavailable
	case code.Code_DEADLINE_EXCEEDED:
		return http.StatusGatewayTimeout
	case code.Code_UNIMPLEMENTED:
		return http.StatusNotImplemented
	}
	return http.StatusInternalServerError
}

// recorder is an http.ResponseWriter that keeps what is written to it: the
// middleware's answer, or what a handler's phases wrote.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func newRecorder() *recorder { return &recorder{header: make(http.Header)} }

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 && status >= 200 {
		r.status = status
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(p)
}

// copyTo writes what r recorded to w.
func (r *recorder) copyTo(w http.ResponseWriter) {
	h := w.Header()
	for k, v := range r.header {
		h[k] = append([]string(nil), v...)
	}
	if r.status == 0 {
		return
	}
	w.WriteHeader(r.status)
	w.Write(r.body.Bytes())
}

// errNoRecord is the error of decoding a response that is no record of an
// RPC's answer nor a problem of idem's.
var errNoRecord = errors.New("idemrpc: the answer is no record of an RPC")
