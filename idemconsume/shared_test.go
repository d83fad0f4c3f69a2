package idemconsume_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemconsume"
	"github.com/idemkit/idem/idemtest"
)

// A consumer that shares keys with an HTTP endpoint (its path, and the
// client as the scope) is the same operation as a request with the same
// key: whichever comes second gets the first one's answer, and the work is
// done once.
func TestSharesKeysWithHTTP(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := idemtest.NewMemoryStore()
	var runs atomic.Int32
	create := func(w http.ResponseWriter) {
		runs.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"id":"tr_1"}`))
	}
	mw, err := idem.New(store, &idem.Config{Logger: quiet, ClientID: func(r *http.Request) (string, bool) { return "acme", true }})
	if err != nil {
		t.Fatal(err)
	}
	api := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { create(w) }))
	c, err := idemconsume.New(store, func(ctx context.Context, m *idemconsume.Message) error {
		create(idemconsume.ResponseWriter(ctx))
		return nil
	}, &idemconsume.Config{Name: "transfers", Path: "/v1/transfers", Idem: &idem.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	post := func(key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/v1/transfers", strings.NewReader(transfer))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(idem.HeaderKey, key)
		w := httptest.NewRecorder()
		api.ServeHTTP(w, req)
		return w
	}

	// The message first, then the request.
	want(t, c.Handle(ctx, &idemconsume.Message{ID: "k-1", Client: "acme", Body: []byte(transfer)}), idemconsume.OutcomeExecuted, idemconsume.Ack)
	w := post("k-1")
	if w.Code != http.StatusCreated || w.Body.String() != `{"id":"tr_1"}` || w.Header().Get(idem.HeaderReplayed) != "true" {
		t.Fatalf("request after the message: %d %q %v", w.Code, w.Body, w.Header())
	}
	// The request first, then the message.
	if w := post("k-2"); w.Code != http.StatusCreated {
		t.Fatalf("request: %d", w.Code)
	}
	want(t, c.Handle(ctx, &idemconsume.Message{ID: "k-2", Client: "acme", Body: []byte(transfer)}), idemconsume.OutcomeDuplicate, idemconsume.Ack)
	// Another client's message with the same key is another operation.
	want(t, c.Handle(ctx, &idemconsume.Message{ID: "k-2", Client: "globex", Body: []byte(transfer)}), idemconsume.OutcomeExecuted, idemconsume.Ack)
	if n := runs.Load(); n != 3 {
		t.Fatalf("ran %d times, want 3", n)
	}
}

// A handler's own 4xx answer is recorded and dead-letters the message with
// its detail.
func TestHandlerRefusalIsDeadLettered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var runs atomic.Int32
	c := setup(t, "transfers", func(ctx context.Context, m *idemconsume.Message) error {
		runs.Add(1)
		p := idem.ProblemKind{Code: "insufficient-funds", Status: http.StatusPaymentRequired, Title: "Insufficient funds"}.New("/problems/", "Account acct_1 holds less than 100.")
		idem.WriteProblem(idemconsume.ResponseWriter(ctx), p, 0)
		return nil
	}, idem.ModeAtomic)
	for range 2 {
		r := c.Handle(ctx, msg("m-1", transfer))
		want(t, r, idemconsume.OutcomeRejected, idemconsume.DeadLetter)
		if r.Reason != "rejected: Account acct_1 holds less than 100." {
			t.Fatalf("reason %q", r.Reason)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("ran %d times, want 1", runs.Load())
	}
}
