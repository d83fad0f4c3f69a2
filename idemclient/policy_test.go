package idemclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// wantCeiling computes min(limit, base·2ⁿ) in floating point, independently
// of backoffCeiling's shifts.
func wantCeiling(n int, base, limit time.Duration) time.Duration {
	c := math.Min(float64(limit), math.Ldexp(float64(base), n))
	return time.Duration(c)
}

func TestBackoffWithinBounds(t *testing.T) {
	t.Parallel()
	seeded := rand.New(rand.NewPCG(1, 2))
	var mu sync.Mutex
	sources := []struct {
		name   string
		int64n func(k int64) int64
		exact  func(ceiling time.Duration) (time.Duration, bool)
	}{
		{"HighestDraw", func(k int64) int64 { return k - 1 }, func(c time.Duration) (time.Duration, bool) { return c, true }},
		{"LowestDraw", func(int64) int64 { return 0 }, func(time.Duration) (time.Duration, bool) { return 0, true }},
		{"SeededDraw", func(k int64) int64 { mu.Lock(); defer mu.Unlock(); return seeded.Int64N(k) }, nil},
	}
	configs := []struct{ base, limit time.Duration }{
		{BaseDelayDefault, MaxDelayDefault},
		{time.Millisecond, time.Millisecond},
		{time.Nanosecond, time.Hour},
		{3 * time.Millisecond, 1000 * time.Millisecond},
	}
	for _, src := range sources {
		t.Run(src.name, func(t *testing.T) {
			t.Parallel()
			for _, cfg := range configs {
				for n := 0; n <= 100; n++ {
					ceiling := wantCeiling(n, cfg.base, cfg.limit)
					for range 50 {
						d := fullJitter(n, cfg.base, cfg.limit, src.int64n)
						if d < 0 || d > ceiling {
							t.Fatalf("fullJitter(%d, %v, %v) = %v, outside [0, %v]", n, cfg.base, cfg.limit, d, ceiling)
						}
						if src.exact != nil {
							if want, _ := src.exact(ceiling); d != want {
								t.Fatalf("fullJitter(%d, %v, %v) = %v, want %v", n, cfg.base, cfg.limit, d, want)
							}
						}
					}
				}
			}
		})
	}
	t.Run("DefaultBackoffSpreadsOverTheRange", func(t *testing.T) {
		t.Parallel()
		const n, samples = 3, 20000
		ceiling := wantCeiling(n, BaseDelayDefault, MaxDelayDefault) // 800ms
		var low, high int
		for range samples {
			d := DefaultBackoff(n, BaseDelayDefault, MaxDelayDefault)
			if d < 0 || d > ceiling {
				t.Fatalf("DefaultBackoff = %v, outside [0, %v]", d, ceiling)
			}
			if d < ceiling/4 {
				low++
			}
			if d > 3*ceiling/4 {
				high++
			}
		}
		// Full jitter is uniform: each quarter holds about 5000 of 20000.
		if low < 4000 || high < 4000 {
			t.Errorf("draws in the lowest and highest quarter: %d and %d of %d; want about a quarter each", low, high, samples)
		}
	})
	t.Run("CeilingNeverOverflows", func(t *testing.T) {
		t.Parallel()
		limit := time.Duration(math.MaxInt64)
		for n := 0; n < 200; n++ {
			c := backoffCeiling(n, time.Second, limit)
			if c <= 0 || c > limit || (n < 30 && c != time.Second<<n) {
				t.Fatalf("backoffCeiling(%d, 1s, MaxInt64) = %v", n, c)
			}
		}
		if d := fullJitter(100, time.Second, limit, func(k int64) int64 { return k - 1 }); d <= 0 {
			t.Errorf("fullJitter at the largest ceiling = %v, want positive", d)
		}
	})
}

func TestDeadlineBoundsAttempts(t *testing.T) {
	t.Parallel()
	highest := func(n int, base, limit time.Duration) time.Duration {
		return fullJitter(n, base, limit, func(k int64) int64 { return k - 1 })
	}
	tests := []struct {
		name         string
		cfg          Config
		retryAfter   string
		wantAttempts int
		wantWaits    []time.Duration
	}{
		{
			// Waits 100, 200, 400ms end at 700ms; the next, 800ms, would end
			// at 1.5s, after MaxElapsed.
			name:         "ComputedWaits",
			cfg:          Config{MaxAttempts: 100, MaxElapsed: time.Second, Backoff: highest},
			wantAttempts: 4,
			wantWaits:    []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond},
		},
		{
			name:         "WaitsCappedByMaxDelay",
			cfg:          Config{MaxAttempts: 100, MaxDelay: 300 * time.Millisecond, MaxElapsed: time.Second, Backoff: highest},
			wantAttempts: 5,
			wantWaits:    []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond},
		},
		{
			name:         "RetryAfterBeyondDeadline",
			cfg:          Config{MaxAttempts: 100, MaxElapsed: 30 * time.Second},
			retryAfter:   "31",
			wantAttempts: 1,
		},
		{
			name:         "RetryAfterWithinDeadline",
			cfg:          Config{MaxAttempts: 100, MaxElapsed: 25 * time.Second},
			retryAfter:   "10",
			wantAttempts: 3,
			wantWaits:    []time.Duration{10 * time.Second, 10 * time.Second},
		},
		{
			name:         "WaitEndingAtDeadlineAllowed",
			cfg:          Config{MaxAttempts: 100, MaxElapsed: 30 * time.Second},
			retryAfter:   "10",
			wantAttempts: 4,
			wantWaits:    []time.Duration{10 * time.Second, 10 * time.Second, 10 * time.Second},
		},
		{
			name:         "MaxAttemptsFirst",
			cfg:          Config{MaxAttempts: 3, MaxElapsed: time.Hour, Backoff: highest},
			wantAttempts: 3,
			wantWaits:    []time.Duration{100 * time.Millisecond, 200 * time.Millisecond},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			n := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				n++
				mu.Unlock()
				if tt.retryAfter != "" {
					w.Header().Set("Retry-After", tt.retryAfter)
				}
				http.Error(w, "unavailable", http.StatusServiceUnavailable)
			}))
			t.Cleanup(srv.Close)
			clock := newFakeClock()
			start := clock.now()
			c := newClient(t, srv, clock, tt.cfg)
			resp, err := c.Post(context.Background(), srv.URL, "text/plain", []byte("x"))
			if err != nil {
				t.Fatalf("Post: %v", err)
			}
			resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			if resp.StatusCode != http.StatusServiceUnavailable || n != tt.wantAttempts || Attempts(resp) != tt.wantAttempts {
				t.Errorf("status %d after %d attempts (Attempts %d), want the last 503 after %d",
					resp.StatusCode, n, Attempts(resp), tt.wantAttempts)
			}
			if got := clock.recorded(); fmt.Sprint(got) != fmt.Sprint(tt.wantWaits) {
				t.Errorf("waits = %v, want %v", got, tt.wantWaits)
			}
			if elapsed := clock.now().Sub(start); elapsed > c.rt.cfg.MaxElapsed {
				t.Errorf("waited %v in all, more than MaxElapsed %v", elapsed, c.rt.cfg.MaxElapsed)
			}
		})
	}
}

func TestDeadlineBoundsAttemptsOnErrors(t *testing.T) {
	t.Parallel()
	// A listener that closes every connection before answering.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	url := "http://" + ln.Addr().String()
	clock := newFakeClock()
	cfg := Config{MaxAttempts: 1000, MaxElapsed: 10 * time.Second}
	cfg.now, cfg.sleep = clock.now, clock.sleep
	c, err := New(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Post(context.Background(), url, "text/plain", []byte("x"))
	if resp != nil {
		resp.Body.Close()
		t.Fatalf("got status %d from a closed server", resp.StatusCode)
	}
	var re *RetryError
	if !errors.As(err, &re) {
		t.Fatalf("err = %v, want a *RetryError", err)
	}
	waits := clock.recorded()
	var total time.Duration
	for _, w := range waits {
		total += w
	}
	if re.Attempts != len(waits)+1 || re.Attempts >= 1000 || re.Attempts < 2 || total > 10*time.Second {
		t.Errorf("%d attempts, %d waits totalling %v; want a few attempts within 10s", re.Attempts, len(waits), total)
	}
}

func TestDefaultRetryPolicy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		err    error
		want   bool
	}{
		{"ConnectionError", 0, io.ErrUnexpectedEOF, true},
		{"AttemptTimeout", 0, context.DeadlineExceeded, true},
		{"UnknownAuthority", 0, fmt.Errorf("tls: %w", x509.UnknownAuthorityError{}), false},
		{"CertificateVerification", 0, &tls.CertificateVerificationError{Err: errors.New("bad cert")}, false},
		{"OK", http.StatusOK, nil, false},
		{"Created", http.StatusCreated, nil, false},
		{"BadRequest", http.StatusBadRequest, nil, false},
		{"Unauthorized", http.StatusUnauthorized, nil, false},
		{"NotFound", http.StatusNotFound, nil, false},
		{"RequestTimeout", http.StatusRequestTimeout, nil, true},
		{"Conflict", http.StatusConflict, nil, true},
		{"Unprocessable", http.StatusUnprocessableEntity, nil, false},
		{"TooManyRequests", http.StatusTooManyRequests, nil, true},
		{"InternalServerError", http.StatusInternalServerError, nil, true},
		{"NotImplemented", http.StatusNotImplemented, nil, false},
		{"BadGateway", http.StatusBadGateway, nil, true},
		{"ServiceUnavailable", http.StatusServiceUnavailable, nil, true},
		{"GatewayTimeout", http.StatusGatewayTimeout, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var resp *http.Response
			if tt.err == nil {
				resp = &http.Response{StatusCode: tt.status}
			}
			if got := DefaultRetryPolicy(resp, tt.err); got != tt.want {
				t.Errorf("DefaultRetryPolicy(%d, %v) = %v, want %v", tt.status, tt.err, got, tt.want)
			}
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name   string
		value  string
		want   time.Duration
		wantOK bool
	}{
		{"DeltaSeconds", "120", 120 * time.Second, true},
		{"Zero", "0", 0, true},
		{"Spaces", " 5 ", 5 * time.Second, true},
		{"HTTPDate", now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{"RFC850Date", now.Add(time.Minute).Format(time.RFC850), time.Minute, true},
		{"ANSICDate", now.Add(time.Hour).Format(time.ANSIC), time.Hour, true},
		{"DateInThePast", now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{"HugeDelta", "99999999999999999999", time.Duration(math.MaxInt64), true},
		{"Empty", "", 0, false},
		{"Negative", "-1", 0, false},
		{"Fraction", "1.5", 0, false},
		{"Garbage", "soon", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := parseRetryAfter(tt.value, now)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("parseRetryAfter(%q) = %v, %v; want %v, %v", tt.value, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, s := range []string{"0", "120", " 7 ", "-1", "1.5", "", "Sun, 06 Nov 1994 08:49:37 GMT",
		now.Add(time.Hour).Format(http.TimeFormat), "99999999999999999999", "Sunday, 06-Nov-94 08:49:37 GMT"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value string) {
		d, ok := parseRetryAfter(value, now)
		if !ok {
			if d != 0 {
				t.Fatalf("parseRetryAfter(%q) = %v with ok false", value, d)
			}
			return
		}
		if d < 0 {
			t.Fatalf("parseRetryAfter(%q) = %v, a negative wait", value, d)
		}
		// A date no later than now asks for no wait, and a delta is whole seconds.
		if at, err := http.ParseTime(value); err == nil && !at.After(now) && d != 0 {
			t.Fatalf("parseRetryAfter(%q) = %v for a past date", value, d)
		}
		if isDigits(value) && d != time.Duration(math.MaxInt64) && d%time.Second != 0 {
			t.Fatalf("parseRetryAfter(%q) = %v, not whole seconds", value, d)
		}
	})
}

func TestSleep(t *testing.T) {
	t.Parallel()
	t.Run("ReturnsAfterTheWait", func(t *testing.T) {
		t.Parallel()
		if err := sleep(context.Background(), time.Millisecond); err != nil {
			t.Errorf("sleep = %v, want nil", err)
		}
	})
	t.Run("StopsWhenContextEnds", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
			t.Errorf("sleep = %v, want context.Canceled", err)
		}
		if err := sleep(ctx, 0); !errors.Is(err, context.Canceled) {
			t.Errorf("sleep(0) = %v, want context.Canceled", err)
		}
	})
}
