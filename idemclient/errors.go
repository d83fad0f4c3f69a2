package idemclient

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
)

// Sentinel errors; compare with errors.Is.
var (
	// ErrKeyReused means the server answered 422: the key was used before
	// with a different request. Retrying cannot help; it is a caller bug.
	ErrKeyReused = errors.New("idemclient: idempotency key reused with a different request")

	// ErrBodyTooLarge means a request body without GetBody is larger than
	// Config.MaxBodyBytes and cannot be buffered for replay.
	ErrBodyTooLarge = errors.New("idemclient: request body too large to replay")
)

// maxProblemBytes bounds how much of a 422 body is read into a KeyReusedError.
const maxProblemBytes = 64 << 10

// KeyReusedError is the 422 Unprocessable Content answer to a keyed request:
// the server has seen the key with a different request. The problem fields
// are filled from an RFC 9457 application/problem+json body when there is
// one. It unwraps to [ErrKeyReused].
type KeyReusedError struct {
	StatusCode int    // the response status, 422
	Key        string // the idempotency key that was sent
	Type       string // the problem "type" member, if any
	Title      string // the problem "title" member, if any
	Detail     string // the problem "detail" member, if any
	Code       string // the problem "code" extension member, if any
	Body       []byte // the first 64 KiB of the response body
}

func (e *KeyReusedError) Error() string {
	msg := fmt.Sprintf("%v (status %d)", ErrKeyReused, e.StatusCode)
	switch {
	case e.Detail != "":
		msg += ": " + e.Detail
	case e.Title != "":
		msg += ": " + e.Title
	}
	return msg
}

// Unwrap returns [ErrKeyReused].
func (e *KeyReusedError) Unwrap() error { return ErrKeyReused }

// RetryError reports a logical operation that ended without a response: the
// caller's context ended, the last attempt failed with an error that is not
// retried, or no attempts or time were left. Key is the idempotency key the
// attempts carried; retrying later with that same key (see [WithKey]) is
// safe. It unwraps to the last error, such as context.Canceled.
type RetryError struct {
	Key      string // the idempotency key of the operation
	Attempts int    // attempts made, 0 if the context ended before the first
	Err      error  // the last error
}

func (e *RetryError) Error() string {
	if e.Attempts == 1 {
		return fmt.Sprintf("idemclient: after 1 attempt: %v", e.Err)
	}
	return fmt.Sprintf("idemclient: after %d attempts: %v", e.Attempts, e.Err)
}

// Unwrap returns the last error.
func (e *RetryError) Unwrap() error { return e.Err }

// CheckResponse returns a [*KeyReusedError] when resp is a 422 answer to a
// POST or PATCH that carried an Idempotency-Key; it then reads up to 64 KiB
// of the body and closes it. For any other response it returns nil and
// leaves the body alone. [Client.Do] calls it; callers of [Client.Transport]
// call it themselves.
func CheckResponse(resp *http.Response) error {
	if resp == nil || resp.StatusCode != http.StatusUnprocessableEntity || resp.Request == nil || !needsKey(resp.Request.Method) {
		return nil
	}
	field := resp.Request.Header.Get(HeaderKey)
	if field == "" {
		return nil
	}
	e := &KeyReusedError{StatusCode: resp.StatusCode, Key: parseKey(field)}
	if resp.Body != nil {
		e.Body, _ = io.ReadAll(io.LimitReader(resp.Body, maxProblemBytes))
		resp.Body.Close()
	}
	if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err == nil && mt == "application/problem+json" {
		var members map[string]json.RawMessage
		if json.Unmarshal(e.Body, &members) == nil {
			e.Type = jsonString(members["type"])
			e.Title = jsonString(members["title"])
			e.Detail = jsonString(members["detail"])
			e.Code = jsonString(members["code"])
		}
	}
	return e
}

// jsonString returns raw as a string if it is a JSON string, or "".
func jsonString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}
