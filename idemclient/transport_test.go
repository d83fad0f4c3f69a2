package idemclient

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// failThenCreate answers 503 to the first fails requests and 201 after that,
// recording every body it receives.
type failThenCreate struct {
	mu     sync.Mutex
	fails  int
	bodies [][]byte
	lens   []int64
}

func (s *failThenCreate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.bodies = append(s.bodies, body)
	s.lens = append(s.lens, r.ContentLength)
	n := len(s.bodies)
	s.mu.Unlock()
	if n <= s.fails {
		// A body bigger than nothing, which the client must drain.
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, strings.Repeat("unavailable ", 1000))
		return
	}
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, "created")
}

func (s *failThenCreate) received() ([][]byte, []int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.bodies...), append([]int64(nil), s.lens...)
}

func TestBodyReplay(t *testing.T) {
	t.Parallel()
	payload := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	tests := []struct {
		name       string
		newRequest func(url string) *http.Request
		want       []byte
	}{
		{"GetBody", func(url string) *http.Request {
			req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(payload))
			return req
		}, payload},
		{"BufferedUnknownLength", func(url string) *http.Request {
			req, _ := http.NewRequest(http.MethodPost, url, io.NopCloser(bytes.NewReader(payload)))
			return req
		}, payload},
		{"NoBody", func(url string) *http.Request {
			req, _ := http.NewRequest(http.MethodPost, url, nil)
			return req
		}, nil},
		{"HTTPNoBody", func(url string) *http.Request {
			req, _ := http.NewRequest(http.MethodPatch, url, http.NoBody)
			return req
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := &failThenCreate{fails: 2}
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			c := newClient(t, srv, newFakeClock(), Config{})
			resp, err := c.Do(tt.newRequest(srv.URL))
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated || Attempts(resp) != 3 {
				t.Fatalf("status %d after %d attempts, want 201 after 3", resp.StatusCode, Attempts(resp))
			}
			bodies, lens := h.received()
			for i, b := range bodies {
				if !bytes.Equal(b, tt.want) {
					t.Errorf("attempt %d body: %d bytes, want %d identical bytes", i+1, len(b), len(tt.want))
				}
				if lens[i] != int64(len(tt.want)) {
					t.Errorf("attempt %d Content-Length %d, want %d", i+1, lens[i], len(tt.want))
				}
			}
		})
	}
}

func TestBodyTooLarge(t *testing.T) {
	t.Parallel()
	h := &failThenCreate{}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c := newClient(t, srv, newFakeClock(), Config{MaxBodyBytes: 1024})
	tests := []struct {
		name    string
		size    int
		getBody bool
		wantErr bool
	}{
		{"AtLimit", 1024, false, false},
		{"OverLimit", 1025, false, true},
		{"OverLimitWithGetBody", 4096, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Not parallel: the subtests share the server's record.
			before, _ := h.received()
			payload := bytes.Repeat([]byte("x"), tt.size)
			body := &trackedBody{Reader: bytes.NewReader(payload)}
			req, _ := http.NewRequest(http.MethodPost, srv.URL, body)
			if tt.getBody {
				req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(payload)), nil }
			}
			resp, err := c.Do(req)
			after, _ := h.received()
			if tt.wantErr {
				if resp != nil || !errors.Is(err, ErrBodyTooLarge) {
					t.Fatalf("Do = %v, %v; want ErrBodyTooLarge", resp, err)
				}
				if len(after) != len(before) {
					t.Error("a body over the limit was sent")
				}
				if !body.closed {
					t.Error("the request body was not closed")
				}
				return
			}
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			resp.Body.Close()
			if len(after) != len(before)+1 || len(after[len(after)-1]) != tt.size {
				t.Errorf("server did not receive the %d-byte body once", tt.size)
			}
		})
	}
}

func TestRewindFailure(t *testing.T) {
	t.Parallel()
	h := &failThenCreate{fails: 5}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c := newClient(t, srv, newFakeClock(), Config{})
	rewind := errors.New("cannot rewind")
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("x"))
	req.GetBody = func() (io.ReadCloser, error) { return nil, rewind }
	resp, err := c.Do(req)
	var re *RetryError
	if resp != nil || !errors.Is(err, rewind) || !errors.As(err, &re) || re.Attempts != 1 {
		t.Fatalf("Do = %v, %v; want a RetryError after 1 attempt wrapping the rewind error", resp, err)
	}
	if bodies, _ := h.received(); len(bodies) != 1 {
		t.Errorf("server saw %d attempts, want 1", len(bodies))
	}
}

func TestConnectionReuse(t *testing.T) {
	t.Parallel()
	h := &failThenCreate{fails: 4}
	srv := httptest.NewUnstartedServer(h)
	var mu sync.Mutex
	conns := 0
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			conns++
			mu.Unlock()
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c := newClient(t, srv, newFakeClock(), Config{})
	resp, err := c.Post(context.Background(), srv.URL, "text/plain", []byte("x"))
	if err != nil {
		t.Fatalf("Post: %v", err)
	}
	resp.Body.Close()
	if Attempts(resp) != 5 {
		t.Fatalf("Attempts = %d, want 5", Attempts(resp))
	}
	mu.Lock()
	defer mu.Unlock()
	if conns != 1 {
		t.Errorf("5 attempts used %d connections, want 1: intermediate bodies must be drained and closed", conns)
	}
}

func TestAttemptTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	proceed := make(chan struct{})
	var mu sync.Mutex
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		mu.Lock()
		keys = append(keys, r.Header.Get(HeaderKey))
		n := len(keys)
		mu.Unlock()
		if n == 1 {
			select { // hang until the client gives up on this attempt
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		// The second half of the body is sent only after the client has
		// read the first, so it must still be connected then.
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "created-")
		w.(http.Flusher).Flush()
		select {
		case <-proceed:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "in-full")
	}))
	t.Cleanup(srv.Close)
	// The first attempt hangs for the whole timeout; the second must finish
	// well within it, body included.
	c := newClient(t, srv, newFakeClock(), Config{AttemptTimeout: time.Second})
	resp, err := c.Post(context.Background(), srv.URL, "text/plain", []byte("x"))
	if err != nil {
		t.Fatalf("Post: %v", err)
	}
	first := make([]byte, len("created-"))
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatalf("reading the first half: %v", err)
	}
	close(proceed)
	rest, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if body := string(first) + string(rest); err != nil || body != "created-in-full" {
		t.Errorf("body = %q, %v; want created-in-full: the attempt's context must live until Close", body, err)
	}
	if resp.StatusCode != http.StatusCreated || Attempts(resp) != 2 {
		t.Errorf("status %d after %d attempts, want 201 after 2", resp.StatusCode, Attempts(resp))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] {
		t.Errorf("keys = %q, want the same key twice", keys)
	}
}

func TestAttemptsOnPassThrough(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv, newFakeClock(), Config{})
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n := Attempts(resp); n != 0 {
		t.Errorf("Attempts = %d for a GET, want 0", n)
	}
}
