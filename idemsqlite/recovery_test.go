package idemsqlite_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/idemstore"
)

var discardLog = slog.New(slog.DiscardHandler)

// payments is a two-phase payments endpoint on SQLite whose processor
// charges once per key and can lose its answers.
type payments struct {
	store *idemsqlite.Store
	now   time.Time

	mu      sync.Mutex
	charges map[string]string
	calls   int
	lose    int
}

func newPayments(t *testing.T) *payments {
	t.Helper()
	store := openStore(t)
	if _, err := store.DB().Exec(`CREATE TABLE payments (key TEXT PRIMARY KEY, status TEXT NOT NULL, charge TEXT)`); err != nil {
		t.Fatal(err)
	}
	return &payments{store: store, now: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC), charges: map[string]string{}}
}

func (p *payments) charge(key string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	id, ok := p.charges[key]
	if !ok {
		id = fmt.Sprintf("ch_%d", len(p.charges)+1)
		p.charges[key] = id
	}
	if p.lose > 0 {
		p.lose--
		return "", errors.New("answer lost")
	}
	return id, nil
}

func exec(ctx context.Context, query string, args ...any) error {
	tx, err := idemsqlite.TxFromContext(ctx)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, query, args...)
	return err
}

// resume are the phases after the first.
func (p *payments) resume() idem.Phases {
	return idem.Phases{
		"payment_created": func(ctx context.Context, w http.ResponseWriter, st idem.State) (string, error) {
			id, err := p.charge(idem.DeriveKey(ctx, "charge"))
			if err != nil {
				return "", err
			}
			st["charge_id"] = id
			return "charge_created", nil
		},
		"charge_created": func(ctx context.Context, w http.ResponseWriter, st idem.State) (string, error) {
			if err := exec(ctx, `UPDATE payments SET status = 'succeeded', charge = ? WHERE key = ?`, st["charge_id"], st["payment"]); err != nil {
				return "", err
			}
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"charge":%q}`, st["charge_id"])
			return idemstore.RecoveryFinished, nil
		},
	}
}

func (p *payments) handler(t *testing.T) http.Handler {
	mw, err := idem.New(p.store, &idem.Config{
		ClientID: func(*http.Request) (string, bool) { return "alice", true },
		Mode:     idem.ModeTwoPhase, Logger: discardLog, Now: func() time.Time { return p.now },
	})
	if err != nil {
		t.Fatal(err)
	}
	return mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ph := p.resume()
		ph[idemstore.RecoveryStarted] = func(ctx context.Context, w http.ResponseWriter, st idem.State) (string, error) {
			scope, _ := idem.ScopeFromContext(ctx)
			if err := exec(ctx, `INSERT INTO payments (key, status) VALUES (?, 'pending')`, scope.Key); err != nil {
				return "", err
			}
			st["payment"] = scope.Key
			return "payment_created", nil
		}
		ph.Run(r.Context(), w)
	}))
}

// post sends a payment with key. The request ends at waitDeadline, so
// that a phase stuck waiting for the store ends the request, and the test
// fails on its answer, instead of hanging.
func (p *payments) post(h http.Handler, key string) *httptest.ResponseRecorder {
	ctx, cancel := context.WithTimeout(context.Background(), waitDeadline)
	defer cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/payments", strings.NewReader(`{"amount":4200}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(idem.HeaderKey, key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func (p *payments) status(t *testing.T, key string) (statuses []string) {
	t.Helper()
	rows, err := p.store.ReadDB().Query(`SELECT status FROM payments WHERE key = ?`, key)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		rows.Scan(&s)
		statuses = append(statuses, s)
	}
	return statuses
}

func TestPhasesResumeAfterALostAnswer(t *testing.T) {
	t.Parallel()
	p := newPayments(t)
	p.lose = 1
	h := p.handler(t)
	if w := p.post(h, "k1"); w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Fatalf("first answer = %d %s; want 503 with Retry-After", w.Code, w.Body)
	}
	if got := p.status(t, "k1"); len(got) != 1 || got[0] != "pending" {
		t.Fatalf("payments after the lost answer = %v; want one pending", got)
	}
	w := p.post(h, "k1")
	if w.Code != http.StatusCreated || w.Body.String() != `{"charge":"ch_1"}` {
		t.Fatalf("retry = %d %s; want 201 with ch_1", w.Code, w.Body)
	}
	if got := p.status(t, "k1"); len(got) != 1 || got[0] != "succeeded" {
		t.Errorf("payments = %v; want one succeeded", got)
	}
	if len(p.charges) != 1 || p.calls != 2 {
		t.Errorf("%d charges in %d calls; want 1 in 2", len(p.charges), p.calls)
	}
}

func TestResumerFinishesAbandonedPayment(t *testing.T) {
	t.Parallel()
	p := newPayments(t)
	p.lose = 1
	h := p.handler(t)
	// The client gives up after the 503 and never retries.
	if w := p.post(h, "k1"); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("first answer = %d; want 503", w.Code)
	}
	c, err := idem.NewResumer(p.store, &idem.Config{
		Logger: discardLog, Now: func() time.Time { return p.now }, Resume: idem.ResumeOpts{Operations: map[string]idem.Phases{"POST /v1/payments": p.resume()}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The resumer finishes a key (Complete, Release) even when its context
	// ends, so the test's deadline is its own, not the context's.
	type runResult struct {
		res idem.ResumerResult
		err error
	}
	ran := make(chan runResult, 1)
	go func() {
		res, err := c.RunOnce(context.Background())
		ran <- runResult{res, err}
	}()
	r := recvWithin(t, ran, "the resumer's pass over the abandoned key")
	if res, err := r.res, r.err; err != nil || res.Completed != 1 {
		t.Fatalf("RunOnce = %+v, %v; want one key completed", res, err)
	}
	if got := p.status(t, "k1"); len(got) != 1 || got[0] != "succeeded" {
		t.Errorf("payments = %v; want one succeeded", got)
	}
	w := p.post(h, "k1")
	if w.Code != http.StatusCreated || w.Header().Get(idem.HeaderReplayed) != "true" || w.Body.String() != `{"charge":"ch_1"}` {
		t.Errorf("client's return = %d %s; want the resumer's 201, replayed", w.Code, w.Body)
	}
	if len(p.charges) != 1 {
		t.Errorf("%d charges; want 1", len(p.charges))
	}
}
