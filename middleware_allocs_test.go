package idem

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/race"
	"github.com/idemkit/idem/internal/record"
)

// allocStore is a store that allocates nothing of its own: every claim is
// new, or finds the completed response it was given, and its lease stores
// the response's header as the SQL stores do, with record.EncodeHeader.
type allocStore struct {
	replay *idemstore.Record // when set, what every claim finds
	lease  allocLease
}

func (s *allocStore) Claim(ctx context.Context, p idemstore.ClaimParams) (idemstore.ClaimResult, error) {
	if s.replay != nil {
		return idemstore.ClaimResult{Record: s.replay}, nil
	}
	return idemstore.ClaimResult{Lease: &s.lease}, nil
}

type allocLease struct{ header []byte }

func (l *allocLease) Context(ctx context.Context) context.Context { return ctx }
func (l *allocLease) Release(context.Context) error               { return nil }
func (l *allocLease) Info() idemstore.LeaseInfo                   { return idemstore.LeaseInfo{Token: 1} }
func (l *allocLease) Complete(_ context.Context, resp *idemstore.Response) error {
	h, err := record.EncodeHeader(resp.Header)
	l.header = h
	return err
}

// allocWriter is a ResponseWriter that can be used again, and keeps only
// the status.
type allocWriter struct {
	header http.Header
	code   int
}

func (w *allocWriter) Header() http.Header         { return w.header }
func (w *allocWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *allocWriter) WriteHeader(code int)        { w.code = code }

// TestMiddlewareAllocs bounds what the middleware allocates for a new key
// and for a replay, with a store and a handler that allocate (next to)
// nothing: a rise is a regression to look at. The counts include the
// test's request, its recorder and the handler's header fields.
func TestMiddlewareAllocs(t *testing.T) {
	if race.Enabled {
		t.Skip("allocation counts differ under the race detector")
	}
	const body = `{"amount":4200,"currency":"usd"}`
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		h := w.Header()
		h["Content-Type"] = []string{"application/json"}
		h["Location"] = []string{"/v1/payments/pay_1"}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"pay_1","status":"succeeded"}`)
	})
	store := &allocStore{}
	m, err := New(store, &Config{
		ClientID: func(*http.Request) (string, bool) { return "client-1", true },
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	h := m.Wrap(handler)
	req := httptest.NewRequest(http.MethodPost, "/v1/payments", nil)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderKey, "k-1")
	rd := strings.NewReader(body)
	req.Body, req.ContentLength = io.NopCloser(rd), int64(len(body))
	w := &allocWriter{header: make(http.Header)}
	serve := func(want int) {
		rd.Reset(body)
		clear(w.header)
		w.code = 0
		h.ServeHTTP(w, req)
		if w.code != want {
			t.Fatalf("status = %d, want %d", w.code, want)
		}
	}
	for _, tt := range []struct {
		name   string
		replay bool
		max    float64
	}{
		// The call and its fingerprint's fields (2), the claim's
		// deadline (4: its context, timer, the timer's function and the
		// cancel function), the handler's request and header map (2), the
		// handler's own (3), the finish's deadline (4) and the stored
		// header (1).
		{"NewKey", false, 16},
		// The call and its fingerprint's fields (2) and the claim's
		// deadline (4).
		{"Replay", true, 6},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store.replay = nil
			if tt.replay {
				store.replay = &idemstore.Record{
					Status: idemstore.StatusCompleted, RequestHash: nil,
					Response: &idemstore.Response{StatusCode: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"pay_1"}`)},
				}
			}
			serve(http.StatusCreated)
			allocs := testing.AllocsPerRun(200, func() { serve(http.StatusCreated) })
			t.Logf("%s: %v allocations", tt.name, allocs)
			if allocs > tt.max {
				t.Errorf("%s allocates %v times; want at most %v", tt.name, allocs, tt.max)
			}
		})
	}
}
