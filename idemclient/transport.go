package idemclient

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

var _ http.RoundTripper = (*transport)(nil)

// maxDrainBytes bounds how much of a discarded response body is read so that
// its connection can be reused; a longer body closes the connection instead.
const maxDrainBytes = 64 << 10

// attemptKey is the context key under which each attempt's request records
// its attempt number, read back by Attempts.
type attemptKey struct{}

// transport is the retrying http.RoundTripper behind a Client.
type transport struct {
	cfg Config
}

// RoundTrip sends a POST or PATCH with an Idempotency-Key and retries it with
// the same key and body; it sends any other request once, unchanged.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !needsKey(req.Method) {
		return t.cfg.Transport.RoundTrip(req)
	}
	var field string
	if values := req.Header.Values(HeaderKey); len(values) > 0 {
		field = values[0] // the caller's key, sent as it is
	} else {
		var err error
		if field, err = t.keyField(req.Context()); err != nil {
			closeBody(req)
			return nil, err
		}
	}
	body, err := newReplayBody(req, t.cfg.MaxBodyBytes)
	if err != nil {
		return nil, err
	}
	defer body.close()
	return t.retry(req, field, body)
}

// retry runs the attempts of one logical operation.
func (t *transport) retry(req *http.Request, field string, body *replayBody) (*http.Response, error) {
	ctx := req.Context()
	key := parseKey(field)
	deadline := t.cfg.now().Add(t.cfg.MaxElapsed)
	for n := 1; ; n++ {
		if err := ctx.Err(); err != nil {
			return nil, &RetryError{Key: key, Attempts: n - 1, Err: err}
		}
		rc, err := body.next()
		if err != nil {
			return nil, &RetryError{Key: key, Attempts: n - 1, Err: err}
		}
		resp, cancel, err := t.attempt(ctx, req, field, rc, body, n)
		if err != nil && ctx.Err() != nil {
			cancel()
			return nil, &RetryError{Key: key, Attempts: n, Err: ctx.Err()}
		}
		if !t.cfg.RetryPolicy(resp, err) || n >= t.cfg.MaxAttempts {
			return finish(resp, cancel, err, key, n)
		}
		now := t.cfg.now()
		wait := max(t.cfg.Backoff(n-1, t.cfg.BaseDelay, t.cfg.MaxDelay), 0)
		if resp != nil {
			if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), now); ok {
				wait = d
			}
		}
		if wait > deadline.Sub(now) || endsAfterContext(ctx, now, wait) {
			return finish(resp, cancel, err, key, n)
		}
		t.logRetry(ctx, req, n, resp, err, wait)
		discard(resp)
		cancel()
		if err := t.cfg.sleep(ctx, wait); err != nil {
			return nil, &RetryError{Key: key, Attempts: n, Err: err}
		}
	}
}

// attempt sends attempt number n with body rc. It returns the response or
// the transport error, and the function that releases the attempt's context.
func (t *transport) attempt(ctx context.Context, req *http.Request, field string, rc io.ReadCloser, body *replayBody, n int) (*http.Response, context.CancelFunc, error) {
	actx := context.WithValue(ctx, attemptKey{}, n)
	cancel := context.CancelFunc(func() {})
	if t.cfg.AttemptTimeout > 0 {
		actx, cancel = context.WithTimeout(actx, t.cfg.AttemptTimeout)
	}
	areq := req.Clone(actx)
	if areq.Header == nil {
		areq.Header = make(http.Header)
	}
	if len(areq.Header.Values(HeaderKey)) == 0 {
		areq.Header.Set(HeaderKey, field)
	}
	areq.Body = rc
	areq.GetBody = body.get
	areq.ContentLength = body.length
	resp, err := t.cfg.Transport.RoundTrip(areq)
	if err != nil {
		return nil, cancel, err
	}
	resp.Request = areq
	return resp, cancel, nil
}

// finish returns the final outcome of an operation of n attempts.
func finish(resp *http.Response, cancel context.CancelFunc, err error, key string, n int) (*http.Response, error) {
	if err != nil {
		cancel()
		return nil, &RetryError{Key: key, Attempts: n, Err: err}
	}
	if resp.Body == nil {
		cancel()
		return resp, nil
	}
	// The attempt's timeout covers reading the body; release it on Close.
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// endsAfterContext reports whether a wait starting at now would end after the
// deadline of ctx, so that the next attempt could not start.
func endsAfterContext(ctx context.Context, now time.Time, wait time.Duration) bool {
	d, ok := ctx.Deadline()
	return ok && wait > d.Sub(now)
}

func (t *transport) logRetry(ctx context.Context, req *http.Request, n int, resp *http.Response, err error, wait time.Duration) {
	attrs := []any{"method", req.Method, "host", req.URL.Host, "path", req.URL.Path, "attempt", n, "wait", wait}
	if resp != nil {
		attrs = append(attrs, "status", resp.StatusCode)
	}
	if err != nil {
		attrs = append(attrs, "error", err.Error())
	}
	t.cfg.Logger.DebugContext(ctx, "idemclient: retrying", attrs...)
}

// discard drains a little of a response that is not returned, and closes it
// so that its connection can be reused.
func discard(resp *http.Response) {
	if resp == nil || resp.Body == nil {
		return
	}
	io.CopyN(io.Discard, resp.Body, maxDrainBytes)
	resp.Body.Close()
}

// cancelBody releases an attempt's context when the response body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// replayBody hands out the same request body for every attempt.
type replayBody struct {
	first  io.ReadCloser                 // the request's own body, for the first attempt; nil once used
	get    func() (io.ReadCloser, error) // a fresh copy for each later attempt; nil when there is no body
	length int64                         // the ContentLength of every attempt
}

// newReplayBody prepares req's body for replay: it keeps req.GetBody when it
// is set and otherwise reads the body into memory, closing it, up to max bytes.
func newReplayBody(req *http.Request, max int64) (*replayBody, error) {
	switch {
	case req.Body == nil || req.Body == http.NoBody:
		return &replayBody{}, nil
	case req.GetBody != nil:
		return &replayBody{first: req.Body, get: req.GetBody, length: req.ContentLength}, nil
	}
	defer req.Body.Close()
	buf, err := io.ReadAll(io.LimitReader(req.Body, max+1))
	if err != nil {
		return nil, fmt.Errorf("idemclient: reading request body: %w", err)
	}
	if int64(len(buf)) > max {
		return nil, fmt.Errorf("%w: the body is longer than %d bytes and has no GetBody", ErrBodyTooLarge, max)
	}
	get := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
	return &replayBody{get: get, length: int64(len(buf))}, nil
}

// next returns the body for the next attempt.
func (b *replayBody) next() (io.ReadCloser, error) {
	if b.first != nil {
		rc := b.first
		b.first = nil
		return rc, nil
	}
	if b.get == nil {
		return nil, nil
	}
	rc, err := b.get()
	if err != nil {
		return nil, fmt.Errorf("idemclient: rewinding request body: %w", err)
	}
	return rc, nil
}

// close closes the request's own body if no attempt used it.
func (b *replayBody) close() {
	if b.first != nil {
		b.first.Close()
		b.first = nil
	}
}
