package idemstore_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
)

// fencedStore stands for a store whose final fence, a unique key, refuses
// the holder's row because another request stored the key first. Its lease
// says so with a CompletedError that carries the stored row.
type fencedStore struct{}

func (fencedStore) Claim(_ context.Context, p idemstore.ClaimParams) (idemstore.ClaimResult, error) {
	return idemstore.ClaimResult{Lease: fencedLease{p}}, nil
}

type fencedLease struct{ p idemstore.ClaimParams }

func (l fencedLease) Context(ctx context.Context) context.Context { return ctx }
func (l fencedLease) Info() idemstore.LeaseInfo                   { return idemstore.LeaseInfo{Token: 1} }
func (l fencedLease) Release(context.Context) error               { return nil }

func (l fencedLease) Complete(context.Context, *idemstore.Response) error {
	stored := &idemstore.Record{
		Scope: l.p.Scope, Method: l.p.Method, Path: l.p.Path, RequestHash: l.p.RequestHash,
		Status:   idemstore.StatusCompleted,
		Response: &idemstore.Response{StatusCode: http.StatusCreated, Header: http.Header{}, Body: []byte(`{"id":"ch_1"}`)},
	}
	return fmt.Errorf("mystore: complete: %w", &idemstore.CompletedError{Record: stored})
}

// When Complete finds that another request completed the key first, the
// handler's writes are rolled back and the client gets the stored answer:
// the replay here, 422 for a different request.
func ExampleCompletedError() {
	mw, err := idem.New(fencedStore{}, &idem.Config{
		ClientID: func(*http.Request) (string, bool) { return "alice", true },
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"ch_2"}`)
	}))
	req := httptest.NewRequest(http.MethodPost, "/v1/charges", strings.NewReader(`{"amount":4200}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idem.HeaderKey, `"order-7-charge"`)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	fmt.Printf("%d replayed=%q %s\n", w.Code, w.Header().Get(idem.HeaderReplayed), w.Body)
	// Output: 201 replayed="true" {"id":"ch_1"}
}
