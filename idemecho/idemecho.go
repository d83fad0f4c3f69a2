package idemecho

import (
	"context"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
)

// ClientKeyDefault is the echo.Context key that New reads the client from
// when idem.Config.ClientID is nil.
const ClientKeyDefault = "user"

// Middleware is idem's middleware for Echo.
type Middleware struct {
	mw *idem.Middleware
}

// New returns the middleware for store. cfg is idem's one Config; when its
// ClientID is nil, the client is ClientFromKey(ClientKeyDefault).
func New(store idemstore.Store, cfg *idem.Config) (*Middleware, error) {
	var c idem.Config
	if cfg != nil {
		c = *cfg
	}
	if c.ClientID == nil {
		c.ClientID = ClientFromKey(ClientKeyDefault)
	}
	mw, err := idem.New(store, &c)
	if err != nil {
		return nil, err
	}
	return &Middleware{mw: mw}, nil
}

// echoContextKey carries the echo.Context in the request that the core
// middleware sees, for ClientFromKey.
type echoContextKey struct{}

// ContextOf returns the echo.Context of a request that the middleware
// handles, for an idem.Config.ClientID of one's own.
func ContextOf(r *http.Request) (echo.Context, bool) {
	c, ok := r.Context().Value(echoContextKey{}).(echo.Context)
	return c, ok
}

// ClientFromKey returns an idem.Config.ClientID that reads the client
// from the echo.Context's key, where an auth middleware put it (c.Set): a
// string, or a fmt.Stringer.
func ClientFromKey(key string) func(*http.Request) (string, bool) {
	return func(r *http.Request) (string, bool) {
		c, ok := ContextOf(r)
		if !ok {
			return "", false
		}
		switch v := c.Get(key).(type) {
		case string:
			return v, v != ""
		case fmt.Stringer:
			s := v.String()
			return s, s != ""
		}
		return "", false
	}
}

// Handler returns the Echo middleware. Use it in a group, after the
// group's auth middleware.
func (m *Middleware) Handler() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			out, req := c.Response(), c.Request()
			run := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c.SetRequest(r)
				c.SetResponse(echo.NewResponse(w, c.Echo()))
				if err := next(c); err != nil {
					c.Error(err) // the Echo's HTTPErrorHandler answers, under the key
				}
			})
			r := req.WithContext(context.WithValue(req.Context(), echoContextKey{}, c))
			r.Pattern = c.Path()
			m.mw.Wrap(run).ServeHTTP(out, r)
			c.SetResponse(out)
			c.SetRequest(req)
			return nil
		}
	}
}

// StreamResponse is idem.StreamResponse for an Echo handler: call it
// before writing the response, in ModeTwoPhase, to send the response as
// it is written and store it only if it is at most maxStored bytes long.
func StreamResponse(c echo.Context, maxStored int64) bool {
	return idem.StreamResponse(c.Response().Writer, maxStored)
}
