package idem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/bodybuf"
	"github.com/idemkit/idem/internal/fingerprint"
)

// rejection is a 4xx answer found while parsing, before any store work.
type rejection struct {
	code   ProblemCode
	detail string
}

// parse reads the key, the client, the body and the fingerprint of a
// request that needs a key or carries one.
func (m *Middleware) parse(w http.ResponseWriter, r *http.Request, required bool) (*call, *rejection) {
	key, present, err := keyFromHeader(r.Header)
	if err != nil {
		return nil, &rejection{ProblemKeyMalformed, reasonOf(err, "The Idempotency-Key field is malformed") + "."}
	}
	if !present {
		return nil, &rejection{ProblemKeyMissing, fmt.Sprintf("%s %s requires an Idempotency-Key header.", r.Method, r.URL.Path)}
	}
	clientID, ok := m.cfg.ClientID(r)
	if !ok || clientID == "" {
		return nil, &rejection{ProblemUnauthenticated, "The request carries no client identity."}
	}
	noteScope(r.Context(), idemstore.Scope{ClientID: clientID, Key: key})
	contentType := r.Header["Content-Type"] // canonical: no lookup of its canonical form
	if len(contentType) > 1 {
		// A singleton field (RFC 9110): which one describes the body is
		// anyone's guess, and a proxy may have picked the other.
		return nil, &rejection{ProblemBodyMalformed, fmt.Sprintf("The request has %d Content-Type header fields; send exactly one.", len(contentType))}
	}
	body, holder, rej := m.readBody(w, r)
	if rej != nil {
		return nil, rej
	}
	var mediaType string
	if len(contentType) == 1 {
		mediaType = contentType[0]
	}
	path := requestPath(r)
	fp, fields, err := fingerprint.Encoded(fingerprint.Params{
		Method: r.Method, Path: path, RawQuery: r.URL.RawQuery,
		ContentType: mediaType, Body: body,
		Exclude: m.cfg.ExcludeFields, Raw: !required,
	})
	if err != nil {
		bodybuf.Recycle(body, holder) // the error holds none of it
		if errors.Is(err, fingerprint.ErrUnsupportedMediaType) {
			return nil, &rejection{ProblemMediaType, reasonOf(err, "The media type is not supported") + "."}
		}
		return nil, &rejection{ProblemBodyMalformed, reasonOf(err, "The request body is malformed") + "."}
	}
	return &call{
		w: w, r: r,
		scope: idemstore.Scope{ClientID: clientID, Key: key}, path: path,
		body: body, bodyHolder: holder, fp: fp, fields: fields,
		base: m.cfg.Logger,
	}, nil
}

// reasonOf returns the reason, safe to show to the client, that a key or
// body error carries, or fallback for an error that carries none.
func reasonOf(err error, fallback string) string {
	var ke *invalidKeyError
	if errors.As(err, &ke) && ke.Reason != "" {
		return ke.Reason
	}
	var be *fingerprint.BodyError
	if errors.As(err, &be) && be.Reason() != "" {
		return be.Reason()
	}
	return fallback
}

// readBody reads the body, into a buffer from package bodybuf when it
// declares its length, and returns it with the buffer's holder (see
// bodybuf.Get).
func (m *Middleware) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *[]byte, *rejection) {
	max := m.cfg.MaxBodyBytes
	tooLarge := func() *rejection {
		return &rejection{ProblemBodyTooLarge, fmt.Sprintf("The body is larger than the limit of %d bytes.", max)}
	}
	if r.ContentLength > max {
		return nil, nil, tooLarge()
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil, nil
	}
	buf, holder := bodybuf.Get(r.ContentLength)
	body, done, err := readDeclared(buf, r.Body, r.ContentLength)
	if past := r.ContentLength >= 0 && int64(len(body)) > r.ContentLength; past || err == nil && !done {
		rest := r.Body
		if past {
			// The body goes on past its declared length: from the byte
			// after it, which readDeclared read, through MaxBytesReader,
			// and then as the read of that byte ended.
			next := io.Reader(r.Body)
			switch {
			case err == io.EOF:
				next = bytes.NewReader(nil)
			case err != nil:
				next = failedReader{err}
			}
			rest = io.NopCloser(io.MultiReader(bytes.NewReader(body[len(body)-1:]), next))
			body = body[:len(body)-1]
		}
		body, err = readAllInto(body, http.MaxBytesReader(w, rest, max-int64(len(body))), r.ContentLength)
	}
	if err != nil {
		bodybuf.Recycle(body, holder)
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, nil, tooLarge()
		}
		if detail, ok := timeoutDetail(r, err); ok {
			return nil, nil, &rejection{ProblemBodyTimeout, detail}
		}
		return nil, nil, &rejection{ProblemBodyMalformed, "The request body could not be read."}
	}
	return body, holder, nil
}

// readAll reads rd to its end, as io.ReadAll does, into a buffer sized for
// a body of the given length when it is known (not negative), so that a
// body of the length it declares is read in one allocation.
func readAll(rd io.Reader, length int64) ([]byte, error) {
	return readAllInto(nil, rd, length)
}

// readDeclared reads the body of a request that declared its length
// (length is not negative), which readBody has checked against its limit,
// without http.MaxBytesReader, which would allocate: net/http's reader of
// such a body ends at that length, and returns io.EOF with its last bytes.
// It reads the length's bytes into b, or a new buffer when b has no room
// for them and the byte after them, and then, when the reader has not
// said that the body ended, one read more into the byte after them, which
// finds the end of a reader that reports it apart, such as a
// bytes.Reader. It reports whether it saw the end.
//
// A body that is not at its end then, such as one that other code put in
// place of net/http's, which may be longer than it declared, is read on
// through http.MaxBytesReader by readBody, within what is left of the
// limit, from the byte after the length if readDeclared read it (b then
// holds length+1 bytes, and the error is that of the read that brought
// it): what it reads and the errors it returns are those of the body read
// through MaxBytesReader from its start. rd is the request's Body as it
// is, an io.ReadCloser: converting it to an io.Reader would look up
// another method table at every request.
func readDeclared(b []byte, rd io.ReadCloser, length int64) ([]byte, bool, error) {
	if length < 0 || length > maxDeclared {
		return b, false, nil
	}
	if int64(cap(b)) <= length {
		b = make([]byte, 0, length+1)
	}
	for int64(len(b)) <= length {
		n, err := rd.Read(b[len(b) : length+1])
		b = b[:len(b)+n]
		switch {
		case int64(len(b)) > length:
			return b, false, err // past the declared length
		case err == io.EOF:
			return b, true, nil
		case err != nil:
			return b, false, err
		}
	}
	return b, false, nil
}

// failedReader is a reader whose reads fail with err.
type failedReader struct{ err error }

func (f failedReader) Read([]byte) (int, error) { return 0, f.err }

// maxDeclared is the longest body that readDeclared reads in one buffer
// of the length it declares; readAllInto grows one for a longer body as
// it arrives, as a client may declare a length it never sends.
const maxDeclared = 1 << 20

// readAllInto is readAll into b, which holds what was read of the body
// so far, when it has room for the body of the given length and the byte
// after it.
func readAllInto(b []byte, rd io.Reader, length int64) ([]byte, error) {
	if length < 0 {
		return io.ReadAll(rd)
	}
	// One byte more than the body, so that reading its end needs no room;
	// a body larger than a mebibyte grows as it arrives, as a client may
	// declare a length it never sends.
	if int64(cap(b)) <= length {
		b = append(make([]byte, 0, min(length, maxDeclared)+1), b...)
	}
	for {
		n, err := rd.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // the body is longer than it said; let append grow it
		}
	}
}

// timeoutDetail reports whether reading the body failed because a read
// deadline or timeout passed, and says which, for the client. The
// connection's read deadline, which net/http sets from Server.ReadTimeout,
// fails reads with an error wrapping os.ErrDeadlineExceeded; a body read
// under a context's deadline fails with context.DeadlineExceeded.
func timeoutDetail(r *http.Request, err error) (string, bool) {
	const retry = " The request was not processed; send the whole body promptly and retry with the same key."
	var timeout interface{ Timeout() bool }
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "The request body did not arrive before the request's deadline." + retry, true
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &timeout) && timeout.Timeout():
		if srv, ok := r.Context().Value(http.ServerContextKey).(*http.Server); ok && srv.ReadTimeout > 0 {
			return fmt.Sprintf("The request body did not arrive within the server's read timeout of %s, which counts from the start of the request.", srv.ReadTimeout) + retry, true
		}
		return "The request body did not arrive before the server's read deadline." + retry, true
	}
	return "", false
}
