package idempg_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/internal/pgtest/pgproxy"
)

// TestCutCommitIsNeverCalledRolledBack cuts the connection to PostgreSQL
// at the COMMIT of 100 requests in each mode, half of them just after the
// COMMIT went out (the service cannot know whether the server committed)
// and half just before (the server never commits). Every answer must be a
// 503 that tells the truth: "outcome-unknown" whenever the COMMIT went out
// and whenever the retry shows that it committed (a replay);
// "store-unavailable" only when the retry shows that the request was rolled
// back (it runs the handler). Each key ends with exactly one business row.
//
// In two-phase mode a COMMIT that went out may still lose: the middleware's
// fenced release can reach the server before the cut session has read its
// UPDATE, and then the fence rolls that session back. The retry runs the
// handler, and the answer was still rightly "unknown".
func TestCutCommitIsNeverCalledRolledBack(t *testing.T) {
	t.Parallel()
	const perMode = 100
	proxy, viaProxy, err := pgproxy.StartFor(pgtest.NewDatabase(t))
	if err != nil {
		t.Fatalf("start the proxy: %v", err)
	}
	t.Cleanup(func() { proxy.Close() })
	store := setupOn(t, newPool(t, viaProxy, 4), nil)

	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			var runs atomic.Int64
			srv := newServer(t, store, idem.Config{Mode: mode}, createPayment(&runs))
			client := srv.Client()
			url := srv.URL + "/v1/payments"
			var unknown, rolledBack int
			for i := range perMode {
				when := []pgproxy.When{pgproxy.After, pgproxy.Before}[i%2]
				key := fmt.Sprintf("%s-cut-%d", mode, i)
				proxy.CutNext(pgproxy.IsCommit, when)
				a := post(t, client, url, key, `{"amount":4200}`)
				if n := proxy.Armed(); n != 0 {
					t.Fatalf("%s: the request sent no COMMIT to cut (answer %d %s)", key, a.status, a.body)
				}
				code := problemCode(a)
				if a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" ||
					(code != string(idem.ProblemOutcomeUnknown) && code != string(idem.ProblemUnavailable)) {
					t.Fatalf("%s: a cut commit answered %d %s; want a 503 with Retry-After", key, a.status, a.body)
				}
				before := runs.Load()
				final := retryUntilFinal(t, client, url, key)
				ranAgain := runs.Load() > before
				switch {
				case final.status != http.StatusCreated:
					t.Errorf("%s: the retry answered %d %s, want 201", key, final.status, final.body)
				case when == pgproxy.After && code != string(idem.ProblemOutcomeUnknown):
					t.Errorf("%s: the COMMIT went out and its answer was lost, yet the service answered %q, not outcome-unknown", key, code)
				case final.replayed && code != string(idem.ProblemOutcomeUnknown):
					t.Errorf("%s: answered %q, yet the retry was a replay: the request had committed", key, code)
				case code == string(idem.ProblemUnavailable) && !ranAgain:
					t.Errorf("%s: answered store-unavailable, yet the retry did not run the handler", key)
				}
				if code == string(idem.ProblemOutcomeUnknown) {
					unknown++
				} else {
					rolledBack++
				}
				if n := countRows(t, store, key); n != 1 {
					t.Errorf("%s: %d business rows, want 1", key, n)
				}
			}
			t.Logf("%s: %d cut commits: %d answered outcome-unknown, %d store-unavailable", mode, perMode, unknown, rolledBack)
		})
	}
}

// retryUntilFinal retries as a client does, with the same key and body,
// until the answer is neither 409 nor 503, within a generous deadline.
func retryUntilFinal(t *testing.T, client *http.Client, url, key string) answer {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		a := post(t, client, url, key, `{"amount":4200}`)
		if a.status != http.StatusConflict && a.status != http.StatusServiceUnavailable {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %d after %s: %s", key, a.status, testTimeout, a.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
