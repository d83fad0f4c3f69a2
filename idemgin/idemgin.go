package idemgin

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"runtime"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
)

// Middleware is idem's middleware for Gin.
type Middleware struct {
	mw   *idem.Middleware
	base string // the problem type base, for the 503 of a rerun it cannot run
	name string // the name Gin gives the function Handler returns, as c.HandlerNames lists it
}

// New returns the middleware for store. cfg is idem's one Config; when its
// ClientID is nil, the client is gin.BasicAuth's user:
// ClientFromKey(gin.AuthUserKey).
func New(store idemstore.Store, cfg *idem.Config) (*Middleware, error) {
	var c idem.Config
	if cfg != nil {
		c = *cfg
	}
	if c.ClientID == nil {
		c.ClientID = ClientFromKey(gin.AuthUserKey)
	}
	mw, err := idem.New(store, &c)
	if err != nil {
		return nil, err
	}
	base := c.ProblemTypeBase
	if base == "" {
		base = idem.ProblemTypeBaseDefault
	}
	m := &Middleware{mw: mw, base: base}
	m.name = runtime.FuncForPC(reflect.ValueOf(m.Handler()).Pointer()).Name()
	return m, nil
}

// ginContextKey carries the gin.Context in the request that the core
// middleware sees, for ClientFromKey.
type ginContextKey struct{}

// ContextOf returns the gin.Context of a request that the middleware
// handles, for an idem.Config.ClientID of one's own.
func ContextOf(r *http.Request) (*gin.Context, bool) {
	c, ok := r.Context().Value(ginContextKey{}).(*gin.Context)
	return c, ok
}

// ClientFromKey returns an idem.Config.ClientID that reads the client
// from the gin.Context's key, where an auth middleware put it: a string,
// or a fmt.Stringer. gin.BasicAuth puts its user under gin.AuthUserKey.
func ClientFromKey(key string) func(*http.Request) (string, bool) {
	return func(r *http.Request) (string, bool) {
		c, ok := ContextOf(r)
		if !ok {
			return "", false
		}
		switch v := c.Value(key).(type) {
		case string:
			return v, v != ""
		case fmt.Stringer:
			s := v.String()
			return s, s != ""
		}
		return "", false
	}
}

// Handler returns the gin middleware. Use it in a route group, after the
// group's auth middleware.
func (m *Middleware) Handler() gin.HandlerFunc {
	return func(c *gin.Context) {
		out, req := c.Writer, c.Request
		runs := 0
		next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			c.Request = r
			c.Errors = c.Errors[:0]
			gw := &writer{w: w, out: out, status: http.StatusOK, size: -1}
			c.Writer = gw
			if runs == 1 {
				c.Next()
			} else if !m.rerun(c) {
				return
			}
			if !gw.Written() && len(c.Errors) > 0 && gw.status == http.StatusOK {
				// c.Error without a response: the handler failed.
				idem.WriteProblem(gw, idem.ProblemUnavailable.Kind().New(m.base, "The request failed and was not processed; retry with the same key."), 1)
			}
			gw.WriteHeaderNow()
		})
		r := req.WithContext(context.WithValue(req.Context(), ginContextKey{}, c))
		r.Pattern = c.FullPath()
		m.mw.Wrap(next).ServeHTTP(out, r)
		c.Writer, c.Request = out, req
		c.Abort() // the chain ran under the key, or must not run
	}
}

// rerun runs the route's handler again after a transaction conflict,
// when the middleware is the last before it; otherwise it answers 503,
// which frees the key, and reports false.
func (m *Middleware) rerun(c *gin.Context) bool {
	names := c.HandlerNames()
	if len(names) >= 2 && names[len(names)-2] == m.name {
		c.Handler()(c)
		return true
	}
	idem.WriteProblem(c.Writer, idem.ProblemUnavailable.Kind().New(m.base,
		"The request hit a transaction conflict and was rolled back; retry with the same key."), 1)
	return false
}

// StreamResponse is idem.StreamResponse for a Gin handler: call it before
// writing the response, in ModeTwoPhase, to send the response as it is
// written and store it only if it is at most maxStored bytes long.
func StreamResponse(c *gin.Context, maxStored int64) bool {
	gw, ok := c.Writer.(*writer)
	return ok && idem.StreamResponse(gw.w, maxStored)
}

// writer is a gin.ResponseWriter over the core middleware's recorder,
// with Gin's semantics: the status is sent with the first write or
// WriteHeaderNow.
type writer struct {
	w      http.ResponseWriter // the recorder
	out    gin.ResponseWriter  // the connection's, for CloseNotify
	status int
	size   int // -1 until the header is written
}

var _ gin.ResponseWriter = (*writer)(nil)

func (w *writer) Header() http.Header { return w.w.Header() }

func (w *writer) WriteHeader(code int) {
	if code > 0 && !w.Written() {
		w.status = code
	}
}

func (w *writer) WriteHeaderNow() {
	if !w.Written() {
		w.size = 0
		w.w.WriteHeader(w.status)
	}
}

func (w *writer) Write(p []byte) (int, error) {
	w.WriteHeaderNow()
	n, err := w.w.Write(p)
	w.size += n
	return n, err
}

func (w *writer) WriteString(s string) (int, error) { return w.Write([]byte(s)) }

func (w *writer) Status() int   { return w.status }
func (w *writer) Size() int     { return w.size }
func (w *writer) Written() bool { return w.size != -1 }

func (w *writer) Flush() {
	w.WriteHeaderNow()
	if f, ok := w.w.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack fails: a response under a key is recorded, and a hijacked
// connection's is not.
func (w *writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return nil, nil, errors.New("idemgin: a response under an idempotency key cannot be hijacked")
}

// CloseNotify is the connection's.
func (w *writer) CloseNotify() <-chan bool { return w.out.CloseNotify() }

func (w *writer) Pusher() http.Pusher { return nil }
