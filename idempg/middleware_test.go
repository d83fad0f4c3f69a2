package idempg_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/internal/pgtest"
)

// clientOf authenticates a request by its X-Client header.
func clientOf(r *http.Request) (string, bool) {
	c := r.Header.Get("X-Client")
	return c, c != ""
}

// createPayment is a handler that records one business row in the lease's
// transaction and answers 201 with the row's id. runs counts the runs whose
// insert ran: in atomic mode the claim goes out with the handler's first
// statement, so the code before it also runs for a request that is then
// answered from the key, and is discarded.
func createPayment(runs *atomic.Int64) http.Handler {
	return insertPayment(func(string) { runs.Add(1) })
}

// insertPayment is createPayment, calling inserted with the key once the
// insert ran.
func insertPayment(inserted func(key string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scope, _ := idem.ScopeFromContext(r.Context())
		tx, err := idempg.TxFromContext(r.Context())
		if err != nil {
			http.Error(w, "no transaction", http.StatusServiceUnavailable)
			return
		}
		var id int64
		if err := tx.QueryRow(r.Context(), `INSERT INTO business (value) VALUES ($1) RETURNING id`, scope.Key).Scan(&id); err != nil {
			http.Error(w, "insert failed", http.StatusInternalServerError)
			return
		}
		inserted(scope.Key)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", fmt.Sprintf("/v1/payments/%d", id))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d,"amount":4200}`, id)
	})
}

// newServer serves handler behind the idem middleware on store.
func newServer(t testing.TB, store *idempg.Store, cfg idem.Config, handler http.Handler) *httptest.Server {
	t.Helper()
	cfg.ClientID = clientOf
	cfg.Logger = quiet
	mw, err := idem.New(store, &cfg)
	if err != nil {
		t.Fatalf("idem.New: %v", err)
	}
	srv := httptest.NewServer(mw.Wrap(handler))
	t.Cleanup(srv.Close)
	return srv
}

// answer is a response as a test looks at it.
type answer struct {
	status   int
	header   http.Header
	body     []byte
	replayed bool
}

// post sends one POST to url with key and returns the answer.
func post(t testing.TB, client *http.Client, url, key, body string) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Client", "alice")
	resp, err := client.Do(req)
	if err != nil {
		t.Errorf("POST: %v", err)
		return answer{}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("read body: %v", err)
	}
	return answer{
		status: resp.StatusCode, header: resp.Header, body: b,
		replayed: resp.Header.Get(idem.HeaderReplayed) == "true",
	}
}

// problemCode returns the code of a problem answer, "" for anything else.
func problemCode(a answer) string {
	if a.header.Get("Content-Type") != idem.ProblemContentType {
		return ""
	}
	var p idem.Problem
	if err := json.Unmarshal(a.body, &p); err != nil {
		return ""
	}
	return p.Code
}

// TestMiddlewareConcurrentDuplicates sends one request 50 times at once:
// exactly one runs and commits, the others get 409 or its replay.
func TestMiddlewareConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	const n = 50
	store := setup(t, nil)
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int64
			srv := newServer(t, store, idem.Config{Mode: mode}, createPayment(&runs))
			payments := srv.URL + "/v1/payments"
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}
			defer client.CloseIdleConnections()
			key := "dup-" + mode.String()
			body := `{"amount":4200,"currency":"usd"}`

			start := make(chan struct{})
			answers := make(chan answer, n)
			var wg sync.WaitGroup
			for range n {
				wg.Go(func() {
					<-start
					answers <- post(t, client, payments, key, body)
				})
			}
			close(start)
			wg.Wait()
			close(answers)

			var first []byte
			originals, replays, inUse := 0, 0, 0
			created := func(a answer) {
				if first == nil {
					first = a.body
				} else if !bytes.Equal(a.body, first) {
					t.Errorf("201 bodies differ: %q and %q", first, a.body)
				}
			}
			for a := range answers {
				switch {
				case a.status == http.StatusCreated && !a.replayed:
					originals++
					created(a)
				case a.status == http.StatusCreated:
					replays++
					created(a)
				case a.status == http.StatusConflict && problemCode(a) == string(idem.ProblemKeyInFlight):
					inUse++
				default:
					t.Errorf("unexpected answer %d %q", a.status, a.body)
				}
			}
			t.Logf("%s: %d original, %d replays, %d in use", mode, originals, replays, inUse)
			if originals != 1 || runs.Load() != 1 {
				t.Errorf("%d original answers and %d handler inserts, want 1 and 1", originals, runs.Load())
			}
			if rows := countRows(t, store, key); rows != 1 {
				t.Errorf("%d business rows, want 1", rows)
			}
			// Afterwards every retry is a byte-identical replay.
			a := post(t, client, payments, key, body)
			if a.status != http.StatusCreated || !a.replayed || !bytes.Equal(a.body, first) || a.header.Get("Location") == "" {
				t.Errorf("retry after the storm: %d replayed=%v %q; want the replay of %q with its Location", a.status, a.replayed, a.body, first)
			}
		})
	}
}

// TestMiddlewareSurvivesRestart stops PostgreSQL under a running service and
// starts it again, without touching the pool, the store or the server.
func TestMiddlewareSurvivesRestart(t *testing.T) {
	t.Parallel()
	const (
		acquireTimeout = 500 * time.Millisecond
		keysPerPhase   = 5
	)
	cluster := pgtest.StartCluster(t)
	pool := newPool(t, cluster.CreateDatabase(t, "payments"), 4)
	// The connections are opened first: on a loaded machine opening one
	// can take longer than the acquire timeout, which would fail a request
	// before the stop rather than one during it.
	warmUp(t, pool, 4)
	store := setupOn(t, pool, &idempg.Config{AcquireTimeout: acquireTimeout})
	var runs atomic.Int64
	srv := newServer(t, store, idem.Config{}, createPayment(&runs))
	client := srv.Client()
	payments := srv.URL + "/v1/payments"
	body := `{"amount":4200}`
	created := map[string][]byte{}

	for i := range keysPerPhase {
		key := fmt.Sprintf("before-%d", i)
		a := post(t, client, payments, key, body)
		if a.status != http.StatusCreated {
			t.Fatalf("before the stop: %s answered %d %q, want 201", key, a.status, a.body)
		}
		created[key] = a.body
	}

	cluster.Stop(t)
	runsBefore := runs.Load()
	for i := range keysPerPhase {
		key := fmt.Sprintf("during-%d", i)
		a := post(t, client, payments, key, body)
		if a.status != http.StatusServiceUnavailable || problemCode(a) != string(idem.ProblemUnavailable) {
			t.Fatalf("while stopped: %s answered %d %q, want the 503 problem store-unavailable", key, a.status, a.body)
		}
		if a.header.Get("Retry-After") == "" {
			t.Errorf("while stopped: 503 without Retry-After")
		}
		// A replay cannot be served either, and must not pretend.
		if a := post(t, client, payments, "before-0", body); a.status != http.StatusServiceUnavailable {
			t.Errorf("while stopped: a replay answered %d, want 503", a.status)
		}
	}
	if runs.Load() != runsBefore {
		t.Fatalf("the handler's insert ran %d times while the database was down", runs.Load()-runsBefore)
	}

	cluster.Start(t)
	// The clients retry their keys; stale pooled connections, and new ones
	// that a loaded machine opens slower than the acquire timeout, may fail
	// requests with 503 until the pool has replaced them: each key is
	// retried until testTimeout.
	for i := range keysPerPhase {
		for _, key := range []string{fmt.Sprintf("during-%d", i), fmt.Sprintf("after-%d", i)} {
			var a answer
			deadline := time.Now().Add(testTimeout)
			for attempt := 1; ; attempt++ {
				if a = post(t, client, payments, key, body); a.status != http.StatusServiceUnavailable || time.Now().After(deadline) {
					break
				}
				t.Logf("after the restart: %s attempt %d answered 503", key, attempt)
				time.Sleep(50 * time.Millisecond) // a retry's pause
			}
			if a.status != http.StatusCreated || a.replayed {
				t.Fatalf("after the restart: %s answered %d %q, want a fresh 201", key, a.status, a.body)
			}
			created[key] = a.body
		}
	}
	if a := post(t, client, payments, "before-0", body); a.status != http.StatusCreated || !a.replayed || !bytes.Equal(a.body, created["before-0"]) {
		t.Errorf("replay of a key from before the stop: %d replayed=%v %q, want %q", a.status, a.replayed, a.body, created["before-0"])
	}
	for key := range created {
		if n := countRows(t, store, key); n != 1 {
			t.Errorf("%s: %d business rows, want 1", key, n)
		}
	}
}

// TestMiddlewareRerunsConflictedRequest runs two write-skew requests at
// SERIALIZABLE: bob's fails with a serialization failure, and the middleware
// runs it again, which then sees alice's commit.
func TestMiddlewareRerunsConflictedRequest(t *testing.T) {
	t.Parallel()
	store := setup(t, &idempg.Config{IsoLevel: pgx.Serializable})
	createDoctors(t, store)
	var (
		runs      atomic.Int64
		arrived   atomic.Int64
		bothRead  = make(chan struct{})
		aliceDone = make(chan struct{})
	)
	wait := func(ch chan struct{}) bool {
		select {
		case <-ch:
			return true
		case <-time.After(testTimeout):
			return false
		}
	}
	// Each doctor asks to go off call; one must stay. The first runs of
	// both requests read before either writes; bob's first run writes only
	// after alice's request has committed, so it is bob's that must fail.
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		first := runs.Add(1) <= 2
		name := r.URL.Query().Get("doctor")
		tx, err := idempg.TxFromContext(ctx)
		if err != nil {
			http.Error(w, "no transaction", http.StatusServiceUnavailable)
			return
		}
		var onCall int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM doctors WHERE on_call`).Scan(&onCall); err != nil {
			http.Error(w, "read failed: "+err.Error(), http.StatusInternalServerError)
			return
		}
		if first {
			if arrived.Add(1) == 2 {
				close(bothRead)
			}
			if !wait(bothRead) || (name == "bob" && !wait(aliceDone)) {
				http.Error(w, "the other request never came", http.StatusInternalServerError)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		if onCall < 2 {
			w.WriteHeader(http.StatusOK)
			fmt.Fprint(w, `{"off_call":false}`)
			return
		}
		if _, err := tx.Exec(ctx, `UPDATE doctors SET on_call = false WHERE name = $1`, name); err != nil {
			http.Error(w, "update failed: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"off_call":true}`)
	})
	mw, err := idem.New(store, &idem.Config{ClientID: clientOf, Logger: quiet})
	if err != nil {
		t.Fatalf("idem.New: %v", err)
	}
	srv := httptest.NewServer(mw.Wrap(handler))
	defer srv.Close()

	answers := map[string]chan answer{"alice": make(chan answer, 1), "bob": make(chan answer, 1)}
	for doctor, ch := range answers {
		go func() {
			a := post(t, srv.Client(), srv.URL+"/v1/off-call?doctor="+doctor, "off-"+doctor, `{}`)
			if doctor == "alice" {
				close(aliceDone)
			}
			ch <- a
		}()
	}
	alice, bob := <-answers["alice"], <-answers["bob"]
	if alice.status != http.StatusCreated || string(alice.body) != `{"off_call":true}` {
		t.Errorf("alice: %d %q, want 201 off call", alice.status, alice.body)
	}
	if bob.status != http.StatusOK || string(bob.body) != `{"off_call":false}` {
		t.Errorf("bob: %d %q, want 200 staying on call, from the rerun", bob.status, bob.body)
	}
	if n := runs.Load(); n != 3 {
		t.Errorf("the handler ran %d times, want 3: bob's request runs again once", n)
	}
	var onCall int
	if err := store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM doctors WHERE on_call`).Scan(&onCall); err != nil || onCall != 1 {
		t.Errorf("%d doctors on call (err %v), want 1", onCall, err)
	}
}
