package idem_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
)

// streamServer serves handler behind the middleware in a mode, on a memory
// store, and returns a function that posts with a key.
func streamServer(t *testing.T, mode idem.Mode, handler http.HandlerFunc) func(key string) *http.Response {
	t.Helper()
	mw, err := idem.New(idemtest.NewMemoryStore(), &idem.Config{
		Mode:     mode,
		ClientID: func(r *http.Request) (string, bool) { return "alice", true },
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Wrap(handler))
	t.Cleanup(srv.Close)
	return func(key string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/exports", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestStreamResponse(t *testing.T) {
	t.Parallel()
	t.Run("RefusedInAtomicMode", func(t *testing.T) {
		t.Parallel()
		post := streamServer(t, idem.ModeAtomic, func(w http.ResponseWriter, r *http.Request) {
			if idem.StreamResponse(w, 1) {
				t.Error("StreamResponse accepted in atomic mode, where the response must wait for the commit")
			}
			io.WriteString(w, "buffered")
		})
		resp := post("k0")
		if body := readAll(t, resp); body != "buffered" {
			t.Fatalf("%q", body)
		}
		if body := readAll(t, post("k0")); body != "buffered" {
			t.Fatalf("replay %q", body)
		}
	})
	{
		mode := idem.ModeTwoPhase
		t.Run(mode.String()+"/ReachesClientBeforeHandlerReturns", func(t *testing.T) {
			t.Parallel()
			proceed := make(chan struct{})
			post := streamServer(t, mode, func(w http.ResponseWriter, r *http.Request) {
				if !idem.StreamResponse(w, 1<<10) {
					t.Error("StreamResponse refused the middleware's writer")
				}
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "first\n")
				http.NewResponseController(w).Flush()
				<-proceed // the client has read the first line
				io.WriteString(w, "second\n")
			})
			resp := post("k1")
			lines := bufio.NewReader(resp.Body)
			if first, err := lines.ReadString('\n'); err != nil || first != "first\n" || resp.StatusCode != http.StatusCreated {
				t.Fatalf("%d %q %v", resp.StatusCode, first, err)
			}
			close(proceed)
			if rest, _ := io.ReadAll(lines); string(rest) != "second\n" {
				t.Fatalf("rest %q", rest)
			}
			replay := post("k1")
			if body := readAll(t, replay); body != "first\nsecond\n" || replay.Header.Get(idem.HeaderReplayed) != "true" || replay.StatusCode != http.StatusCreated {
				t.Fatalf("replay %d %q", replay.StatusCode, body)
			}
		})
		t.Run(mode.String()+"/LargerThanStoredIsNotRetained", func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int64
			big := strings.Repeat("x", 5000)
			post := streamServer(t, mode, func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				idem.StreamResponse(w, 1000)
				w.Header().Set("Location", "/v1/exports/1")
				w.WriteHeader(http.StatusCreated)
				for i := 0; i < len(big); i += 700 {
					io.WriteString(w, big[i:min(i+700, len(big))])
				}
			})
			first := post("k2")
			if body := readAll(t, first); body != big || first.StatusCode != http.StatusCreated {
				t.Fatalf("first: %d, %d bytes", first.StatusCode, len(body))
			}
			retry := post("k2")
			var p struct {
				idem.Problem
				OriginalStatus int    `json:"original_status"`
				Location       string `json:"location"`
			}
			if err := json.Unmarshal([]byte(readAll(t, retry)), &p); err != nil {
				t.Fatal(err)
			}
			if retry.StatusCode != http.StatusCreated || p.Code != string(idem.ProblemResponseNotRetained) || p.OriginalStatus != 201 ||
				p.Location != "/v1/exports/1" || retry.Header.Get("Location") != "/v1/exports/1" || retry.Header.Get(idem.HeaderReplayed) != "true" {
				t.Fatalf("retry: %d %v %+v", retry.StatusCode, retry.Header, p)
			}
			if n := runs.Load(); n != 1 {
				t.Fatalf("handler ran %d times, want 1", n)
			}
		})
	}
	// The limit is inclusive: a body of exactly maxStored bytes is stored
	// whole, and one byte more is not; a limit of 0 streams and stores no
	// body but an empty one.
	for _, tt := range []struct {
		name     string
		max      int64
		body     string
		retained bool
	}{
		{"ExactlyTheMaximumIsRetained", 10, "0123456789", true},
		{"OneByteMoreIsNot", 10, "0123456789a", false},
		{"MaximumZeroKeepsAnEmptyBody", 0, "", true},
		{"MaximumZeroKeepsNoOther", 0, "0", false},
	} {
		t.Run(idem.ModeTwoPhase.String()+"/"+tt.name, func(t *testing.T) {
			t.Parallel()
			post := streamServer(t, idem.ModeTwoPhase, func(w http.ResponseWriter, r *http.Request) {
				if !idem.StreamResponse(w, tt.max) {
					t.Errorf("StreamResponse(w, %d) refused the middleware's writer", tt.max)
				}
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, tt.body)
			})
			if first := post("k"); readAll(t, first) != tt.body || first.StatusCode != http.StatusCreated {
				t.Fatalf("first: %d, want 201 %q", first.StatusCode, tt.body)
			}
			retry := post("k")
			body := readAll(t, retry)
			if retained := !strings.Contains(body, string(idem.ProblemResponseNotRetained)); retained != tt.retained || retained && body != tt.body || retry.StatusCode != http.StatusCreated {
				t.Fatalf("retry: %d %q; want 201, the body retained: %t", retry.StatusCode, body, tt.retained)
			}
		})
	}
	t.Run("RefusedOutsideMiddleware", func(t *testing.T) {
		t.Parallel()
		if idem.StreamResponse(httptest.NewRecorder(), 1) {
			t.Fatal("StreamResponse accepted a writer that is not the middleware's")
		}
	})
}

// TestBreakResponse checks that a broken response reaches the client cut
// short, whether it declared its length (which a server cuts short by
// itself when the handler writes less) or is chunked (which only the
// connection's abort cuts short), and that a retry learns the request was
// answered, without a second run.
func TestBreakResponse(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, length string }{{"DeclaredLength", "100"}, {"Chunked", ""}} {
		length := tt.length
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int64
			post := streamServer(t, idem.ModeTwoPhase, func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				if idem.BreakResponse(w) {
					t.Error("BreakResponse accepted a response whose status was not sent")
				}
				idem.StreamResponse(w, 1<<20)
				if length != "" {
					w.Header().Set("Content-Length", length)
				}
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "half of it")
				if !idem.BreakResponse(w) {
					t.Error("BreakResponse refused a streamed response")
				}
			})
			first := post("k")
			if body, err := io.ReadAll(first.Body); err == nil || first.StatusCode != http.StatusCreated {
				t.Fatalf("first: %d %q, body read error %v; want 201 and a body cut short", first.StatusCode, body, err)
			}
			retry := post("k")
			body := readAll(t, retry)
			if retry.StatusCode != http.StatusCreated || !strings.Contains(body, string(idem.ProblemResponseNotRetained)) || !strings.Contains(body, "broke off") {
				t.Fatalf("retry: %d %q", retry.StatusCode, body)
			}
			if n := runs.Load(); n != 1 {
				t.Fatalf("handler ran %d times", n)
			}
		})
	}
}
