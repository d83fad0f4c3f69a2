// Package idemlog writes one structured line per HTTP request, with what
// the idem middleware did with it: wrap a service's whole router with
// [New].
package idemlog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemkit/idem/internal/reqlog"
)

// HeaderRequestID carries a request's id, in requests and in responses.
const HeaderRequestID = "X-Request-Id"

// MaxRequestIDLength is the longest X-Request-Id accepted from a client.
const MaxRequestIDLength = 128

// Config configures [New].
type Config struct {
	// Logger receives one line per request. Defaults to slog.Default().
	Logger *slog.Logger
}

// New returns middleware that writes one structured line per
// request when it ends, "http request", with:
//
//   - request_id: the request's X-Request-Id when it is 1 to
//     MaxRequestIDLength printable ASCII characters without spaces, or else
//     a new random id; it is also set on the response and available to
//     handlers through [RequestIDFromContext];
//   - method and route: the ServeMux pattern that matched ("POST
//     /v1/payments"), never the path, which may carry ids or keys;
//     "unmatched" when no pattern did;
//   - client: the client that the idem middleware, the key-status handler
//     or [SetClient] named; absent when none did;
//   - key_digest: a short digest of the Idempotency-Key (the first 12 hex digits of its SHA-256, as every idem component logs it),
//     never the key;
//   - outcome: the idem.Result of a request the idem middleware handled
//     (executed, released, replayed, in_flight, mismatch, rejected,
//     unavailable, outcome_unknown, lease_lost); absent otherwise;
//   - status and duration_ms.
//
// It never logs a body, a header value other than the request id, or a
// token. Wrap the whole router with it: the route is read from the request
// after the router has matched it.
func New(cfg *Config) func(http.Handler) http.Handler {
	logger := slog.Default()
	if cfg != nil && cfg.Logger != nil {
		logger = cfg.Logger
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			started := time.Now()
			id := r.Header.Get(HeaderRequestID)
			if !validRequestID(id) {
				id = newRequestID()
			}
			info := &reqlog.Info{ID: id}
			r = r.WithContext(reqlog.NewContext(r.Context(), info))
			w.Header().Set(HeaderRequestID, id)
			sw := &statusWriter{ResponseWriter: w}
			defer func() {
				status := sw.statusCode()
				p := recover()
				if p != nil && sw.status == 0 {
					status = http.StatusInternalServerError // what the server answers
				}
				logRequest(logger, r, info, status, time.Since(started))
				if p != nil {
					panic(p) // to the server, which logs it and drops the connection
				}
			}()
			next.ServeHTTP(sw, r)
		})
	}
}

func logRequest(logger *slog.Logger, r *http.Request, info *reqlog.Info, status int, d time.Duration) {
	route := r.Pattern
	if route == "" {
		route = "unmatched"
	}
	attrs := make([]slog.Attr, 0, 8)
	attrs = append(attrs, slog.String("request_id", info.ID), slog.String("method", r.Method), slog.String("route", route))
	client, keyDigest, result := info.Notes()
	if client != "" {
		attrs = append(attrs, slog.String("client", client))
	}
	if keyDigest != "" {
		attrs = append(attrs, slog.String("key_digest", keyDigest))
	}
	if result != "" {
		attrs = append(attrs, slog.String("outcome", result))
	}
	attrs = append(attrs, slog.Int("status", status), slog.Float64("duration_ms", float64(d.Microseconds())/1000))
	level := slog.LevelInfo
	if status >= 500 {
		level = slog.LevelWarn
	}
	logger.LogAttrs(r.Context(), level, "http request", attrs...)
}

// RequestIDFromContext returns the id that [New] gave the request whose
// context this is.
func RequestIDFromContext(ctx context.Context) (string, bool) {
	info, ok := reqlog.FromContext(ctx)
	if !ok {
		return "", false
	}
	return info.ID, true
}

// SetClient names the authenticated client in the request's log line,
// for an auth layer that runs before any idem handler. It does nothing
// when the context did not come through [New].
func SetClient(ctx context.Context, client string) {
	if info, ok := reqlog.FromContext(ctx); ok {
		info.SetClient(client)
	}
}

// validRequestID reports whether a client's X-Request-Id may be logged and
// echoed: 1 to MaxRequestIDLength visible ASCII characters.
func validRequestID(id string) bool {
	if id == "" || len(id) > MaxRequestIDLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

func newRequestID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// statusWriter remembers the status code a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// Flush sends what the handler wrote so far, when the server's writer can.
func (w *statusWriter) Flush() {
	http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) statusCode() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
