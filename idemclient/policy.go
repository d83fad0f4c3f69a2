package idemclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem/internal/pause"
)

// RetryPolicy reports whether an attempt that ended with resp or err is
// retried with the same key and body. Exactly one of resp and err is non-nil.
// It is consulted only for POST and PATCH requests, and never for an error
// caused by the caller's context. It must not read or close resp.Body.
type RetryPolicy func(resp *http.Response, err error) bool

// DefaultRetryPolicy retries every transport error (connection refused or
// reset, a connection dropped before the answer, a per-attempt timeout)
// except TLS certificate errors, and the responses 408 Request Timeout (the
// server gave up reading the request, so it was not processed), 409
// Conflict (the first attempt is still running), 429 Too Many Requests and
// every 5xx except 501 Not Implemented. It never retries 422 or any other
// 4xx status: those answers are the same on every attempt.
func DefaultRetryPolicy(resp *http.Response, err error) bool {
	if err != nil {
		var unknownAuthority x509.UnknownAuthorityError
		var verification *tls.CertificateVerificationError
		if errors.As(err, &unknownAuthority) || errors.As(err, &verification) {
			return false
		}
		return true
	}
	switch code := resp.StatusCode; {
	case code == http.StatusRequestTimeout, code == http.StatusConflict, code == http.StatusTooManyRequests:
		return true
	case code == http.StatusNotImplemented:
		return false
	default:
		return code >= 500 && code <= 599
	}
}

// Backoff returns the wait before the next attempt, given n, the number of
// retries already made (0 before the first retry), and base and limit, the
// configured BaseDelay and MaxDelay. A server's Retry-After replaces it.
type Backoff func(n int, base, limit time.Duration) time.Duration

// DefaultBackoff is exponential backoff with full jitter: a uniformly random
// duration in [0, min(limit, base·2ⁿ)].
func DefaultBackoff(n int, base, limit time.Duration) time.Duration {
	return fullJitter(n, base, limit, rand.Int64N)
}

// fullJitter returns a duration in [0, backoffCeiling(n, base, limit)] drawn by
// int64n, which returns a value in [0, k) like rand.Int64N.
func fullJitter(n int, base, limit time.Duration, int64n func(k int64) int64) time.Duration {
	ceiling := backoffCeiling(n, base, limit)
	if ceiling <= 0 {
		return 0
	}
	if ceiling == math.MaxInt64 {
		return time.Duration(int64n(math.MaxInt64))
	}
	return time.Duration(int64n(int64(ceiling) + 1))
}

// backoffCeiling returns min(limit, base·2ⁿ) without overflowing.
func backoffCeiling(n int, base, limit time.Duration) time.Duration {
	if base <= 0 || limit <= 0 {
		return 0
	}
	if n < 0 {
		n = 0
	}
	if n >= 63 || base > limit>>n {
		return limit
	}
	return base << n
}

// parseRetryAfter returns the wait a Retry-After field value asks for, as
// delta-seconds ("120") or an HTTP-date ("Wed, 21 Oct 2015 07:28:00 GMT")
// relative to now. A date in the past is a wait of 0. It reports false for
// an empty or malformed value.
func parseRetryAfter(value string, now time.Time) (time.Duration, bool) {
	v := strings.TrimSpace(value)
	if v == "" {
		return 0, false
	}
	if isDigits(v) {
		secs, err := strconv.ParseInt(v, 10, 64)
		if err != nil || secs > math.MaxInt64/int64(time.Second) {
			return time.Duration(math.MaxInt64), true // a wait longer than any deadline
		}
		return time.Duration(secs) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(at.Sub(now), 0), true
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// sleep waits for d or until ctx is done, whichever comes first.
func sleep(ctx context.Context, d time.Duration) error { return pause.For(ctx, d) }
