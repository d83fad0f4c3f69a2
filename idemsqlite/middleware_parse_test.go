package idemsqlite_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemfingerprint"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
)

const formType = "application/x-www-form-urlencoded"

// utf16Body is s encoded as UTF-16 big-endian with a byte order mark, as a
// client that honours charset=utf-16 sends it.
func utf16Body(s string) string {
	var b strings.Builder
	b.WriteString("\xfe\xff")
	for _, u := range utf16.Encode([]rune(s)) {
		b.WriteByte(byte(u >> 8))
		b.WriteByte(byte(u))
	}
	return b.String()
}

// TestMediaTypeAndCharset: a body in a charset other than UTF-8 is a media
// type the middleware does not support (415), for JSON and form bodies
// alike; UTF-8 in any spelling, or no charset, is accepted.
func TestMediaTypeAndCharset(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	tests := []struct {
		name        string
		contentType string
		body        string
		want        int
		code        string
	}{
		{"JSONInUTF16", "application/json; charset=utf-16", utf16Body(payment), 415, "unsupported-media-type"},
		{"JSONInUTF16WithASCIIBody", "application/json; charset=UTF-16", payment, 415, "unsupported-media-type"},
		{"StructuredSuffixInLatin1", "application/merchant+json; charset=iso-8859-1", payment, 415, "unsupported-media-type"},
		{"FormInLatin1", formType + "; charset=ISO-8859-1", "amount=4200&currency=usd", 415, "unsupported-media-type"},
		{"QuotedCharset", `application/json; charset="utf-16"`, payment, 415, "unsupported-media-type"},
		{"JSONInUTF8", "application/json; charset=utf-8", payment, 201, ""},
		{"JSONInUTF8Uppercase", "application/json; charset=UTF-8", payment, 201, ""},
		{"JSONWithoutCharset", "application/json", payment, 201, ""},
		{"FormInUTF8", formType + "; charset=utf-8", "amount=4200&currency=usd", 201, ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(req{contentType: tt.contentType, body: tt.body, keys: []string{fmt.Sprintf("cs%d", i)}})
			if r.status != tt.want {
				t.Fatalf("status %d body %s, want %d", r.status, r.body, tt.want)
			}
			if tt.code == "" {
				return
			}
			p := r.problem(t)
			if p.Code != tt.code || !strings.Contains(p.Detail, "UTF-8") {
				t.Errorf("problem %+v, want %s with a detail that asks for UTF-8", p, tt.code)
			}
		})
	}
}

// TestContentTypeRepeatedGets400: Content-Type is a singleton field. A
// request that sends it twice is rejected, whichever value comes first,
// before any store work.
func TestContentTypeRepeatedGets400(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	for i, second := range []string{"text/plain", "application/json", formType} {
		t.Run(second, func(t *testing.T) {
			r := e.do(req{contentType: "application/json", body: payment, keys: []string{fmt.Sprintf("ct%d", i)},
				extra: http.Header{"Content-Type": {second}}})
			if r.status != http.StatusBadRequest {
				t.Fatalf("two Content-Type fields: status %d body %s, want 400", r.status, r.body)
			}
			if p := r.problem(t); p.Code != "request-body-malformed" || !strings.Contains(p.Detail, "Content-Type") {
				t.Errorf("problem %+v, want request-body-malformed naming Content-Type", p)
			}
		})
	}
	if e.runs.Load() != 0 || e.keys() != 0 {
		t.Errorf("runs %d keys %d, want nothing run or stored", e.runs.Load(), e.keys())
	}
}

// TestMismatchNamesTheMediaType: a retry that sends the first request's
// values in another media type is another request (422), and the answer
// says the media type differs instead of listing every field.
func TestMismatchNamesTheMediaType(t *testing.T) {
	t.Parallel()
	const form = "amount=4200&currency=usd&customer=cus_123"
	tests := []struct {
		name                string
		first, retry        req
		firstName, thisName string
	}{
		{"FormThenJSON", req{contentType: formType, body: form}, req{body: payment}, "form", "JSON"},
		{"JSONThenForm", req{body: payment}, req{contentType: formType, body: form}, "JSON", "form"},
		{"FormThenJSONArray", req{contentType: formType, body: form}, req{body: `[4200]`}, "form", "JSON"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, nil)
			key := []string{fmt.Sprintf("mt%d", i)}
			tt.first.keys, tt.retry.keys = key, key
			if r := e.do(tt.first); r.status != http.StatusCreated {
				t.Fatalf("first: %d %s", r.status, r.body)
			}
			r := e.do(tt.retry)
			if r.status != http.StatusUnprocessableEntity {
				t.Fatalf("retry in another media type: %d %s, want 422", r.status, r.body)
			}
			p := r.problem(t)
			if p.Code != "idempotency-key-reused" || len(p.Fields) != 0 || !strings.Contains(p.Detail, "media type") ||
				!strings.Contains(p.Detail, tt.firstName) || !strings.Contains(p.Detail, tt.thisName) {
				t.Errorf("problem %+v; want a detail naming the media types %s and %s, and no fields", p, tt.firstName, tt.thisName)
			}
			if n := e.runs.Load(); n != 1 {
				t.Errorf("handler ran %d times, want 1", n)
			}
		})
	}
	t.Run("SameMediaTypeStillNamesFields", func(t *testing.T) {
		t.Parallel()
		e := setup(t, nil)
		e.do(req{contentType: formType, body: form, keys: []string{"same"}})
		r := e.do(req{contentType: formType + "; charset=utf-8", body: strings.Replace(form, "4200", "4300", 1), keys: []string{"same"}})
		if p := r.problem(t); r.status != http.StatusUnprocessableEntity || fmt.Sprint(p.Fields) != "[/amount]" {
			t.Errorf("changed form amount: %d %+v, want 422 naming /amount", r.status, p)
		}
	})
}

// delayedClaimStore is a memory store whose Claim moves the clock on by
// wait before it looks at the key, as a claim that queues behind other
// writers does.
type delayedClaimStore struct {
	*idemtest.MemoryStore
	clock *idemtest.Clock
	wait  time.Duration
}

func (s *delayedClaimStore) Claim(ctx context.Context, p idemstore.ClaimParams) (idemstore.ClaimResult, error) {
	s.clock.Advance(s.wait)
	return s.MemoryStore.Claim(ctx, p)
}

// TestRetryAfterNeverExceedsTheLease: the 409 for a two-phase key in flight
// says to retry when the holder's lease runs out, rounded up to a whole
// second and at least 1, and never later than a whole lock timeout, even
// when the holder claimed the key after this request read the clock.
func TestRetryAfterNeverExceedsTheLease(t *testing.T) {
	t.Parallel()
	const lockTimeout = 5 * time.Second
	tests := []struct {
		name     string
		holderAt time.Duration // when the holder claimed, from this request's first clock reading
		wait     time.Duration // how long this request's claim took
		want     string
	}{
		{"HolderClaimedWhileThisClaimWaited", time.Second, 2 * time.Second, "4"},
		{"HolderClockAhead", 3 * time.Second, 0, "5"},
		{"WholeLeaseLeft", 0, 0, "5"},
		{"PartOfASecondLeft", -4200 * time.Millisecond, 0, "1"},
		{"FractionRoundsUp", -1500 * time.Millisecond, 0, "4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			t0 := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
			clock := idemtest.NewClock(t0)
			store := &delayedClaimStore{MemoryStore: idemtest.NewMemoryStore(), clock: clock, wait: tt.wait}
			fp, err := idemfingerprint.New(idemfingerprint.Params{Method: "POST", Path: "/v1/payments", ContentType: "application/json", Body: []byte(payment)})
			if err != nil {
				t.Fatal(err)
			}
			holder, err := store.MemoryStore.Claim(context.Background(), idemstore.ClaimParams{
				Scope: idemstore.Scope{ClientID: "alice", Key: "busy"}, Method: "POST", Path: "/v1/payments",
				RequestHash: fp.Hash, RequestFields: fp.Fields, TwoPhase: true,
				Now: t0.Add(tt.holderAt), LockTimeout: lockTimeout, Retention: time.Hour,
			})
			if err != nil || holder.Lease == nil {
				t.Fatalf("holder's claim: %+v, %v", holder, err)
			}
			mw, err := idem.New(store, &idem.Config{
				ClientID: func(*http.Request) (string, bool) { return "alice", true },
				Mode:     idem.ModeTwoPhase, LockTimeout: lockTimeout, Retention: time.Hour,
				Now: clock.Now, Logger: quiet,
			})
			if err != nil {
				t.Fatal(err)
			}
			runs := 0
			h := mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { runs++ }))
			r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(payment))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Idempotency-Key", "busy")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusConflict || w.Header().Get("Retry-After") != tt.want {
				t.Fatalf("status %d Retry-After %q, want 409 with %s; body %s", w.Code, w.Header().Get("Retry-After"), tt.want, w.Body)
			}
			if runs != 0 {
				t.Errorf("handler ran %d times, want 0", runs)
			}
		})
	}
}

// stalledBody returns its data, then err, as a request body whose client
// stopped sending does once the server's read deadline passes.
type stalledBody struct {
	data string
	err  error
}

func (b *stalledBody) Read(p []byte) (int, error) {
	if b.data == "" {
		return 0, b.err
	}
	n := copy(p, b.data)
	b.data = b.data[n:]
	return n, nil
}

func (b *stalledBody) Close() error { return nil }

// TestBodyReadTimeoutGets408: a body that stops arriving until the server's
// read deadline passes is answered 408 request-body-timeout, naming the
// timeout, never a 400 that blames the body; other read errors stay 400.
func TestBodyReadTimeoutGets408(t *testing.T) {
	t.Parallel()
	// What net/http's connection returns once Server.ReadTimeout passes.
	connTimeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	tests := []struct {
		name        string
		err         error
		readTimeout time.Duration // the server's; 0 for none
		status      int
		code        string
		detail      string
	}{
		{"ServerReadTimeout", connTimeout, 30 * time.Second, 408, "request-body-timeout", "read timeout of 30s"},
		{"ReadDeadlineWithoutReadTimeout", connTimeout, 0, 408, "request-body-timeout", "read deadline"},
		{"WrappedDeadline", fmt.Errorf("proxy: %w", os.ErrDeadlineExceeded), 0, 408, "request-body-timeout", "read deadline"},
		{"ContextDeadline", fmt.Errorf("read body: %w", context.DeadlineExceeded), 30 * time.Second, 408, "request-body-timeout", "deadline"},
		{"ClientGone", io.ErrUnexpectedEOF, 30 * time.Second, 400, "request-body-malformed", "could not be read"},
		{"OtherError", errors.New("broken"), 0, 400, "request-body-malformed", "could not be read"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			store := idemtest.NewMemoryStore()
			mw, err := idem.New(store, &idem.Config{ClientID: func(*http.Request) (string, bool) { return "alice", true }, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			runs := 0
			h := mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { runs++ }))
			r := httptest.NewRequest(http.MethodPost, "/v1/payments", nil)
			r.Body = &stalledBody{data: `{"amount":`, err: tt.err}
			r.ContentLength = int64(len(payment))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Idempotency-Key", "slow")
			if tt.readTimeout > 0 {
				r = r.WithContext(context.WithValue(r.Context(), http.ServerContextKey, &http.Server{ReadTimeout: tt.readTimeout}))
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			var p idem.Problem
			if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
				t.Fatalf("status %d body %s: %v", w.Code, w.Body, err)
			}
			if w.Code != tt.status || p.Status != tt.status || p.Code != tt.code || !strings.Contains(p.Detail, tt.detail) {
				t.Errorf("status %d problem %+v; want %d %s with a detail saying %q", w.Code, p, tt.status, tt.code, tt.detail)
			}
			if strings.Contains(w.Body.String(), "amount") {
				t.Errorf("the answer echoes the body: %s", w.Body)
			}
			if runs != 0 || store.Len() != 0 {
				t.Errorf("runs %d keys %d, want nothing run or stored", runs, store.Len())
			}
		})
	}
}

// TestBodyReadTimeoutEndToEnd: a client sends the headers and part of the
// body, then stalls; the server's ReadTimeout passes and the client gets
// 408 request-body-timeout on the same connection. The header must reach
// the server within the ReadTimeout too, so on a machine too busy for that
// the server drops the connection unanswered, and the test tries again
// with a longer timeout.
func TestBodyReadTimeoutEndToEnd(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	for _, readTimeout := range []time.Duration{250 * time.Millisecond, time.Second, 4 * time.Second, 16 * time.Second} {
		mw, err := idem.New(idemtest.NewMemoryStore(), &idem.Config{ClientID: func(*http.Request) (string, bool) { return "alice", true }, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { runs.Add(1) })))
		srv.Config.ReadTimeout = readTimeout
		srv.Start()
		res, err := stallBody(t, srv.Listener.Addr().String())
		srv.Close()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			t.Logf("ReadTimeout %s: the server dropped the connection before it read the header; trying a longer one", readTimeout)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var p idem.Problem
		json.Unmarshal(body, &p)
		want := fmt.Sprintf("read timeout of %s", readTimeout)
		if res.StatusCode != http.StatusRequestTimeout || p.Code != "request-body-timeout" || !strings.Contains(p.Detail, want) {
			t.Fatalf("stalled body: %d %s; want 408 request-body-timeout saying %q", res.StatusCode, body, want)
		}
		if n := runs.Load(); n != 0 {
			t.Errorf("handler ran %d times, want 0", n)
		}
		return
	}
	t.Fatal("the server never read the header within its ReadTimeout")
}

// stallBody sends a POST whose body stops after 10 of its 54 bytes and
// reads the answer, waiting at most 60 s.
func stallBody(t *testing.T, addr string) (*http.Response, error) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.SetDeadline(time.Now().Add(60 * time.Second)); err != nil {
		t.Fatal(err)
	}
	head := "POST /v1/payments HTTP/1.1\r\nHost: idem.test\r\nIdempotency-Key: slow\r\nContent-Type: application/json\r\n" +
		fmt.Sprintf("Content-Length: %d\r\n\r\n", len(payment)) + payment[:10]
	if _, err := io.WriteString(conn, head); err != nil {
		return nil, err
	}
	return http.ReadResponse(bufio.NewReader(conn), nil)
}
